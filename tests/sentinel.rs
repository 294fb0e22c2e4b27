//! Members under Redis Sentinel, against a real master with two replicas and three
//! sentinels on loopback: a `redis+sentinel://` member locks as a plain one does, follows a
//! failover, keeps a promoted replica that lacks a lock out until that lock's TTL is over,
//! gives a client still connected to the old master no vote there, and counts a majority
//! of the whole sentinel group even when its URL lists one sentinel.

mod common;

use std::time::{Duration, Instant};

use common::clients::{cron_client, new_processes_until_one_locks};
use common::proxy::{FaultProxy, Link};
use common::topology::{SentinelProcess, SentinelTopology};
use common::{RedisServer, unique};
use quorum_lock::{Error, FindingKind, LockGuard, Redlock};

/// A client of one Sentinel member, restart quarantine on (as it must be).
fn client(url: &str) -> Redlock {
    Redlock::builder()
        .nodes([url])
        .retry_delay(Duration::from_millis(20))
        .max_retry_delay(Duration::from_millis(100))
        .build()
        .unwrap()
}

fn keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut server.conn())
        .unwrap()
}

/// Whether `server` answers as a replica that has no `key`; `false` while a request fails
/// (the server resets its clients' connections as it turns into a replica).
fn demoted_without(server: &RedisServer, key: &str) -> bool {
    let answered = redis::Client::open(server.url())
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(1)))
        .and_then(|mut conn| {
            let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn)?;
            let found: Vec<String> = redis::cmd("KEYS").arg(key).query(&mut conn)?;
            Ok((role, found))
        });
    matches!(answered, Ok((role, found))
        if found.is_empty()
            && matches!(role.first(), Some(redis::Value::BulkString(r)) if r.as_slice() == b"slave"))
}

fn role(server: &RedisServer) -> String {
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut server.conn()).unwrap();
    match role.first() {
        Some(redis::Value::BulkString(r)) => String::from_utf8_lossy(r).into_owned(),
        other => panic!("ROLE answered {other:?}"),
    }
}

/// Fails the topology over, then waits out the sentinels' confirmation window (500 ms): a
/// vote within it may still count on the old master (the promoted one is quarantined for
/// it on top of the TTL), none after it.
async fn fail_over_past_the_confirmation_window(topology: &SentinelTopology) {
    topology.failover();
    tokio::time::sleep(Duration::from_millis(600)).await;
}

/// A lock on `resource` for `ttl` through `redlock`, replicated and then taken off every
/// replica, as if replication had not carried it: the guard, and when the lock's TTL ends.
async fn held_and_lost_on_replicas(
    topology: &SentinelTopology,
    redlock: &Redlock,
    resource: &str,
    ttl: Duration,
) -> (LockGuard, Instant) {
    let acquired = Instant::now();
    let held = redlock.lock(resource, ttl).await.unwrap();
    let waited: i64 = redis::cmd("WAIT")
        .arg(2)
        .arg(1000)
        .query(&mut topology.server(0).conn())
        .unwrap();
    assert_eq!(
        waited, 2,
        "both replicas had the key before it was taken off"
    );
    lost_on_replicas(topology, resource);
    (held, acquired + ttl)
}

/// The lock on `resource` that `redlock` waits for after a failover to server `promoted`:
/// granted no sooner than `held_until` (the lost lock's end), with its key on the promoted
/// master. The guard, and when it was granted.
async fn granted_on(
    topology: &SentinelTopology,
    promoted: usize,
    redlock: &Redlock,
    resource: &str,
    ttl: Duration,
    held_until: Instant,
) -> (LockGuard, Instant) {
    let next = redlock
        .lock(resource, ttl)
        .wait(Duration::from_secs(20))
        .await
        .unwrap();
    let granted = Instant::now();
    assert!(
        granted >= held_until,
        "granted {:?} before the first holder's TTL ran out",
        held_until - granted
    );
    assert_eq!(
        keys(topology.server(promoted), resource),
        vec![resource.to_owned()]
    );
    (next, granted)
}

/// Takes `key` off every replica of the topology, as if replication had not carried it.
fn lost_on_replicas(topology: &SentinelTopology, key: &str) {
    for server in &topology.servers()[1..] {
        let mut conn = server.conn();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("replica-read-only")
            .arg("no")
            .query(&mut conn)
            .unwrap();
        let deleted: i64 = redis::cmd("DEL").arg(key).query(&mut conn).unwrap();
        assert_eq!(deleted, 1, "the replica had received the key");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_member_locks_on_the_master_the_sentinels_name() {
    let topology = SentinelTopology::start(2, 3);
    let redlock = client(&topology.member_url());
    let resource = unique("sentinel-plain");
    let guard = redlock
        .lock(&resource, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(keys(topology.server(0), &resource), vec![resource.clone()]);
    guard.release().await.unwrap();
    assert_eq!(keys(topology.server(0), &resource), Vec::<String>::new());
    // The deployment check names the master the sentinels chose, and does not warn of
    // its replicas: the member follows their failovers by design.
    let report = redlock.check_deployment().await;
    let master = format!("127.0.0.1:{}", topology.server(0).port());
    assert_eq!(report.nodes[0].sentinel_master.as_deref(), Some(&*master));
    assert_eq!(report.nodes[0].replicas, Some(2));
    let kinds: Vec<_> = report.findings.iter().map(|f| f.kind).collect();
    assert!(!kinds.contains(&FindingKind::FailoverRisk), "{kinds:?}");
    let named: Vec<_> = report.nodes[0]
        .sentinels
        .iter()
        .map(|s| s.master.clone())
        .collect();
    assert_eq!(
        named,
        vec![Some(master.clone()); 3],
        "every sentinel names it"
    );
    assert!(!kinds.contains(&FindingKind::SentinelQuorum), "{kinds:?}");
    redlock.shutdown().await;
}

/// The deployment check shows what each sentinel says: a member with one sentinel of three
/// gone still votes, with a warning that one more loss stops it; with two gone it has no
/// master to vote through: unreachable, and the sentinels' answers say why (an error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_shows_a_member_losing_its_sentinels() {
    let mut topology = SentinelTopology::start(1, 3);
    let redlock = client(&topology.member_url());
    let sentinel_findings = |report: &quorum_lock::DeploymentReport| -> Vec<_> {
        report
            .findings
            .iter()
            .filter(|f| f.kind == FindingKind::SentinelQuorum)
            .map(|f| (f.severity, f.message.clone()))
            .collect()
    };
    topology.sentinel_mut(2).kill();
    let gone = topology.sentinels()[2].addr().to_string();
    let report = redlock.check_deployment().await;
    let found = sentinel_findings(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, quorum_lock::Severity::Warning, "{found:?}");
    assert!(
        found[0].1.contains(&format!("{gone}: no answer")),
        "{found:?}"
    );
    assert!(
        redlock
            .try_lock(&unique("sentinel-two-left"), Duration::from_secs(2))
            .await
            .unwrap()
            .is_some(),
        "two sentinels of three still confirm the master"
    );

    topology.sentinel_mut(1).kill();
    let report = redlock.check_deployment().await;
    assert!(
        !report.nodes[0].reachable,
        "no sentinel majority names a master to connect to"
    );
    let found = sentinel_findings(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, quorum_lock::Severity::Error, "{found:?}");
    redlock.shutdown().await;
}

/// A frozen sentinel (SIGSTOP, as a stalled VM: it accepts nothing and answers nothing) of
/// three stops nothing: fresh clients, as a cron job's each run, and a long-lived one keep
/// locking through the two that answer, within a short wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_sentinel_of_three_stops_no_client() {
    let topology = SentinelTopology::start(1, 3);
    let url = topology.member_url();
    let warm = client(&url);
    let try_one = |redlock: Redlock, name: &'static str| async move {
        let guard = redlock
            .lock(unique(name), Duration::from_secs(2))
            .wait(Duration::from_secs(3))
            .await
            .unwrap_or_else(|e| panic!("{name}: one frozen sentinel of three stopped it: {e}"));
        guard.release().await.unwrap();
        redlock
    };
    let warm = try_one(warm, "frozen-sentinel-warm-up").await;
    topology.sentinels()[2].pause();
    for _ in 0..3 {
        try_one(client(&url), "frozen-sentinel-fresh")
            .await
            .shutdown()
            .await;
    }
    let mut warm = warm;
    for _ in 0..3 {
        warm = try_one(warm, "frozen-sentinel-warm").await;
    }
    topology.sentinels()[2].resume();
    warm.shutdown().await;
}

/// A promoted master's quarantine counts from when this client first learnt it: reconnects
/// to the same master (a killed connection, a redirect) do not start it over, so a client
/// whose connections keep breaking still gets the promoted master's vote back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_do_not_restart_a_promoted_masters_quarantine() {
    let topology = SentinelTopology::start(1, 3);
    let redlock = cron_client(&topology.member_url());
    let warm = redlock.lock(unique("reconnect-warm"), Duration::from_secs(2));
    warm.wait(Duration::from_secs(10))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let promoted = topology.failover();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let failed_over = Instant::now();
    let granted = loop {
        // Every connection of this client to the promoted master breaks, again and again.
        let _: redis::Value = redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"][..])
            .query(&mut topology.server(promoted).conn())
            .unwrap();
        if let Ok(Some(guard)) = redlock
            .try_lock(&unique("reconnect"), Duration::from_secs(2))
            .await
        {
            guard.release().await.unwrap();
            break failed_over.elapsed();
        }
        assert!(
            failed_over.elapsed() < Duration::from_secs(20),
            "every reconnect started the promoted master's quarantine over"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    println!("the promoted master voted again {granted:?} after the failover");
    redlock.shutdown().await;
}

/// After a failover every new process (a command run from cron, each shorter than the
/// quarantine) counts the promoted master's quarantine from when the first client learnt
/// its life, as recorded on the node, not from its own first contact: once that is over, a
/// fresh client with a 1 s wait gets the vote.
///
/// On the code before this change each new process started the quarantine again, so none
/// ever saw it end: "no new process got the promoted master's vote within 15 s".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_processes_count_a_promoted_masters_quarantine_from_its_first_learning() {
    let topology = SentinelTopology::start(1, 3);
    let warm = cron_client(&topology.member_url());
    (warm.lock(unique("cron-warm"), Duration::from_secs(2)))
        .wait(Duration::from_secs(10))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    warm.shutdown().await;
    let promoted = topology.failover();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let first = cron_client(&topology.member_url());
    let refused = first
        .try_lock(&unique("cron-first"), Duration::from_secs(2))
        .await;
    assert!(
        !matches!(refused, Ok(Some(_))),
        "the promoted master voted at once"
    );
    first.shutdown().await;
    let learnt = Instant::now();
    let record: Option<String> = redis::cmd("GET")
        .arg("quorum-lock:node:promoted")
        .query(&mut topology.server(promoted).conn())
        .unwrap();
    println!("promotion record: {record:?}");
    new_processes_until_one_locks(&topology.member_url(), &unique("cron"), learnt).await;
}

#[test]
fn a_sentinel_member_without_quarantine_or_with_a_bad_url_is_a_config_error() {
    let refused = |builder: quorum_lock::RedlockBuilder| match builder.build() {
        Err(Error::Config(why)) => why,
        other => panic!("built: {:?}", other.map(|_| ())),
    };
    let url = "redis+sentinel://127.0.0.1:26379/svc";
    let why = refused(Redlock::builder().nodes([url]).restart_quarantine(false));
    assert!(why.contains("needs restart quarantine"), "{why}");
    let why = refused(Redlock::builder().nodes(["redis+sentinel://:secret@h:1"]));
    assert!(why.contains("names no service"), "{why}");
    assert!(!why.contains("secret"), "the password is not shown: {why}");
    let twice = [
        "redis+sentinel://a:1,b:2/svc",
        "redis+sentinel://b:2,a:1/svc",
    ];
    let why = refused(Redlock::builder().nodes(twice));
    assert!(why.contains("listed twice"), "{why}");
}

/// A member under Sentinel and its master listed again as a plain member are one server:
/// a configuration error naming both, as two URLs of one server are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_member_and_its_master_listed_plainly_are_refused() {
    let topology = SentinelTopology::start(1, 3);
    let plain = RedisServer::start();
    let urls = [
        topology.member_url(),
        plain.url(),
        format!("redis://127.0.0.1:{}", topology.server(0).port()),
    ];
    let redlock = Redlock::builder().nodes(&urls).build().unwrap();
    let names: Vec<String> = redlock.nodes().map(str::to_owned).collect();
    match redlock.connect().await {
        Err(Error::SameServer { first, second }) => {
            assert_eq!((first, second), (names[0].clone(), names[2].clone()));
        }
        other => panic!("{other:?}"),
    }
    redlock.shutdown().await;
}

/// The lock's key never reached the replicas; a failover promotes one. The member follows
/// the sentinels to it, and it does not vote until the lock it lacks is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_that_lost_the_lock_keeps_the_next_holder_out_until_its_ttl() {
    const TTL: Duration = Duration::from_secs(3);
    let topology = SentinelTopology::start(2, 3);
    let url = topology.member_url();
    let (first, second) = (client(&url), client(&url));
    let resource = unique("sentinel-lost");
    let (held, held_until) = held_and_lost_on_replicas(&topology, &first, &resource, TTL).await;

    let failing_over = Instant::now();
    let promoted = topology.failover();
    let failed_over = failing_over.elapsed();
    let (next, granted) =
        granted_on(&topology, promoted, &second, &resource, TTL, held_until).await;
    eprintln!(
        "failover took {failed_over:?}; the promoted master voted {:?} after it, {:?} after \
         the lost lock's TTL",
        granted - failing_over - failed_over,
        granted - held_until
    );
    next.release().await.unwrap();
    drop(held);
    first.shutdown().await;
    second.shutdown().await;
}

/// After a failover the old master still accepts writes for a while (Sentinel
/// reconfigures it later): a client still connected to it gets no vote there once the
/// sentinels' last confirmation of it is half a second old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_connected_to_the_old_master_gets_no_vote_there() {
    let topology = SentinelTopology::start(2, 3);
    let redlock = client(&topology.member_url());
    // Connected to the first master, admitted, with a lock's record written.
    let warm = unique("sentinel-warm");
    let guard = redlock.lock(&warm, Duration::from_secs(2)).await.unwrap();
    guard.release().await.unwrap();

    fail_over_past_the_confirmation_window(&topology).await;
    let resource = unique("sentinel-old-master");
    let refused = redlock.try_lock(&resource, Duration::from_secs(2)).await;
    assert_eq!(
        role(topology.server(0)),
        "master",
        "the old master was still a master: it would have voted"
    );
    match refused {
        Ok(Some(guard)) => panic!("the old master voted after the failover: {}", guard.token()),
        outcome => eprintln!("after the failover: {:?}", outcome.map(|_| ())),
    }
    redlock.shutdown().await;
}

/// A holder still connected to the old master cannot extend its lock there once the
/// sentinels' confirmation is half a second old: the promoted master may lack the lock,
/// and its quarantine covers only the lock's TTL from then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_cannot_extend_on_the_old_master() {
    let topology = SentinelTopology::start(2, 3);
    let redlock = client(&topology.member_url());
    let resource = unique("sentinel-extend");
    let guard = redlock
        .lock(&resource, Duration::from_secs(10))
        .await
        .unwrap();
    fail_over_past_the_confirmation_window(&topology).await;
    let extended = guard.extend(Duration::from_secs(10)).await;
    assert_eq!(
        role(topology.server(0)),
        "master",
        "the old master was still a master: it would have extended"
    );
    assert!(
        extended.is_err(),
        "extended on the old master after the failover: {extended:?}"
    );
    drop(guard);
    redlock.shutdown().await;
}

/// The master stops answering (paused, as a stalled VM is), and the sentinels replace it by
/// themselves with a replica that never received a 6 s lock. A request sent into the pause
/// gets no vote, though the old master applies it when it resumes, still a master for a
/// moment; the holder cannot extend there; the promoted master votes only once the lost
/// lock's TTL is over; and the resumed master, demoted, keeps nothing of the late request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_master_replaced_by_the_sentinels_keeps_its_lost_lock_exclusive() {
    const TTL: Duration = Duration::from_secs(6);
    let topology = SentinelTopology::start(2, 3);
    let url = topology.member_url();
    let (first, second) = (client(&url), client(&url));
    let resource = unique("sentinel-paused");
    let (held, held_until) = held_and_lost_on_replicas(&topology, &first, &resource, TTL).await;

    let old = topology.master_addr();
    topology.server(0).pause();
    let paused = Instant::now();
    let late = unique("sentinel-late");
    let into_the_pause = second.try_lock(&late, TTL).await;
    assert!(
        !matches!(into_the_pause, Ok(Some(_))),
        "a paused master voted: {:?}",
        into_the_pause.map(|g| g.map(|g| g.token().to_owned()))
    );
    let promoted = topology.await_new_master(old);
    let promotion = paused.elapsed();
    topology.server(0).resume();

    let extended = held.extend(TTL).await;
    assert!(
        extended.is_err(),
        "extended on the resumed old master after the promotion: {extended:?}"
    );
    let (next, granted) =
        granted_on(&topology, promoted, &second, &resource, TTL, held_until).await;
    eprintln!(
        "promoted {promotion:?} after the pause; the member voted again {:?} after the \
         promotion, {:?} after the lost lock's TTL",
        granted - paused - promotion,
        granted - held_until
    );
    next.release().await.unwrap();
    common::eventually(
        Duration::from_secs(20),
        "the old master demoted and resynced",
        || demoted_without(topology.server(0), &late),
    )
    .await;
    drop(held);
    first.shutdown().await;
    second.shutdown().await;
}

/// Closes every connection the sentinel `sentinel` has on `server` (Sentinel names them
/// `sentinel-<first 8 characters of its id>-cmd` and `-pubsub`): a paused sentinel then
/// reads nothing published there after this, as if cut off from it.
fn cut_sentinel_links(server: &RedisServer, id: &str) {
    let mut conn = server.conn();
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut conn).unwrap();
    let name = format!("name=sentinel-{}-", &id[..8]);
    for line in clients.lines().filter(|l| l.contains(&name)) {
        let client_id = line
            .split(' ')
            .find_map(|field| field.strip_prefix("id="))
            .expect("CLIENT LIST has ids");
        let _: redis::Value = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(client_id)
            .query(&mut conn)
            .unwrap();
    }
}

/// The longest TTL of the clients of [`three_member_client`]: a promoted master's
/// quarantine lasts that long.
const GROUP_TTL: Duration = Duration::from_secs(6);

/// A client of `[svc, p1, p2]`, quorum 2, whose sentinel requests give up after 150 ms.
fn three_member_client(sentinel_member: &str, p1: &str, p2: &str) -> Redlock {
    Redlock::builder()
        .nodes([sentinel_member, p1, p2])
        .ttl_ceiling(GROUP_TTL)
        .default_ttl(GROUP_TTL)
        .connect_timeout(Duration::from_millis(150))
        .retry_delay(Duration::from_millis(20))
        .max_retry_delay(Duration::from_millis(100))
        .build()
        .unwrap()
}

/// The ports of the other sentinels `sentinel` knows for `service`.
fn known_sentinel_ports(sentinel: &SentinelProcess, service: &str) -> Vec<u16> {
    let known: Vec<std::collections::HashMap<String, String>> = redis::cmd("SENTINEL")
        .arg("SENTINELS")
        .arg(service)
        .query(&mut sentinel.conn())
        .unwrap();
    known
        .iter()
        .filter_map(|s| s.get("port")?.parse().ok())
        .collect()
}

/// Two clients of the members `[svc, P1, P2]`: X lists the three sentinels of `svc`, the
/// third through a proxy (as the third announces itself to the others), Y lists only the
/// third, directly. The third sentinel is cut off (the proxy closes its connections; it is
/// paused, and its links to the servers are closed) while the first forces a failover to
/// the replica R; the old master M cannot be demoted (its `REPLICAOF` is renamed away), so
/// it stays a master. X locks through R and P2 (its link to P1 fails fast). Then the first
/// two sentinels, R and P2 stop, and the third resumes, still naming M and remembering the
/// others. Y must not lock through M and P1 while X holds: the third sentinel alone is no
/// majority of the group of three, whatever Y's URL lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_listing_one_sentinel_gets_no_vote_from_a_minority_of_the_group() {
    let topology = SentinelTopology::start_with_master_args(
        1,
        3,
        &[
            "--rename-command",
            "REPLICAOF",
            "",
            "--rename-command",
            "SLAVEOF",
            "",
        ],
    );
    let service = topology.service();
    let sentinels = topology.sentinels();
    // The others reach the third sentinel only through the proxy, once it announces it.
    let third = FaultProxy::start(sentinels[2].addr());
    let _: () = redis::cmd("SENTINEL")
        .arg("CONFIG")
        .arg("SET")
        .arg("announce-port")
        .arg(third.addr().port())
        .query(&mut sentinels[2].conn())
        .unwrap();
    common::wait_until(
        Duration::from_secs(20),
        "the others to know the third sentinel at the proxy",
        || {
            sentinels[..2]
                .iter()
                .all(|s| known_sentinel_ports(s, service).contains(&third.addr().port()))
        },
    );
    let (p1, p2) = (RedisServer::start(), RedisServer::start());
    let p1_for_x = FaultProxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], p1.port())));
    let listing = |listed: &[std::net::SocketAddr]| {
        let addrs: Vec<String> = listed.iter().map(ToString::to_string).collect();
        format!("redis+sentinel://{}/{service}", addrs.join(","))
    };
    let x = three_member_client(
        &listing(&[sentinels[0].addr(), sentinels[1].addr(), third.addr()]),
        &p1_for_x.url(),
        &p2.url(),
    );
    let y = three_member_client(&listing(&[sentinels[2].addr()]), &p1.url(), &p2.url());
    // Every node admitted (restart quarantine's marker written), with a short record.
    let warm = x
        .lock(unique("sentinel-group-warm"), Duration::from_secs(1))
        .await;
    warm.unwrap().release().await.unwrap();

    let third_id: String = redis::cmd("SENTINEL")
        .arg("MYID")
        .query(&mut sentinels[2].conn())
        .unwrap();
    third.set_link(Link::Reset);
    sentinels[2].pause();
    for server in topology.servers() {
        cut_sentinel_links(server, &third_id);
    }
    let promoted = topology.failover();
    assert_eq!(promoted, 1);
    tokio::time::sleep(Duration::from_millis(600)).await;

    // X locks through R (once its quarantine as a promoted master is over) and P2.
    p1_for_x.set_link(Link::Reset);
    let resource = unique("sentinel-group");
    let held = x
        .lock(&resource, GROUP_TTL)
        .wait(Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(keys(topology.server(1), &resource), vec![resource.clone()]);
    assert_eq!(keys(&p1, &resource), Vec::<String>::new());

    sentinels[0].pause();
    sentinels[1].pause();
    topology.server(1).pause();
    p2.pause();
    sentinels[2].resume();
    let started = Instant::now();
    let attempt = y.try_lock(&resource, Duration::from_secs(2)).await;
    let tried = started.elapsed();
    let old_master_role = role(topology.server(0));
    let third_names: Vec<String> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(service)
        .query(&mut sentinels[2].conn())
        .unwrap();
    sentinels[0].resume();
    sentinels[1].resume();
    topology.server(1).resume();
    p2.resume();

    assert_eq!(
        old_master_role, "master",
        "the old master was still a master"
    );
    assert_eq!(
        third_names[1],
        topology.server(0).port().to_string(),
        "the third sentinel still named the old master"
    );
    eprintln!(
        "Y's attempt took {tried:?}: {:?}",
        attempt.as_ref().map(|g| g.is_some())
    );
    if let Ok(Some(second)) = attempt {
        panic!(
            "two holders: Y locked through the old master (token {}) while X holds \
             (token {}, valid: {})",
            second.token(),
            held.token(),
            held.is_valid()
        );
    }
    assert!(held.is_valid(), "X still holds");
    drop(held);
    x.shutdown().await;
    y.shutdown().await;
}

/// A client whose URL lists one sentinel of a healthy group of three learns the other two
/// from it: it locks as usual, the deployment check shows all three and warns that the
/// list is partial, and with the listed sentinel gone the two it learnt still confirm the
/// master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_listing_one_sentinel_learns_the_group() {
    let mut topology = SentinelTopology::start(1, 3);
    let listed = topology.sentinels()[0].addr().to_string();
    let url = format!("redis+sentinel://{listed}/{}", topology.service());
    let redlock = client(&url);
    let guard = redlock
        .lock(unique("sentinel-one-listed"), Duration::from_secs(5))
        .await
        .unwrap();
    guard.release().await.unwrap();

    let report = redlock.check_deployment().await;
    let node = &report.nodes[0];
    let master = format!("127.0.0.1:{}", topology.server(0).port());
    let mut shown: Vec<(String, bool, Option<String>)> = node
        .sentinels
        .iter()
        .map(|s| (s.sentinel.clone(), s.listed, s.master.clone()))
        .collect();
    shown[1..].sort();
    let mut expected: Vec<(String, bool, Option<String>)> = topology
        .sentinel_addrs()
        .iter()
        .enumerate()
        .map(|(i, addr)| (addr.to_string(), i == 0, Some(master.clone())))
        .collect();
    expected[1..].sort();
    assert_eq!(shown, expected);
    assert_eq!(node.sentinel_group_size, Some(3));
    let partial: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::SentinelPartialList)
        .collect();
    assert_eq!(partial.len(), 1, "{:?}", report.findings);
    assert_eq!(partial[0].severity, quorum_lock::Severity::Warning);
    assert!(
        partial[0].message.contains("lists 1 of the 3 sentinels"),
        "{}",
        partial[0].message
    );
    let kinds: Vec<_> = report.findings.iter().map(|f| f.kind).collect();
    assert!(!kinds.contains(&FindingKind::SentinelQuorum), "{kinds:?}");
    assert!(report.to_json().contains("\"listed\":false"));

    topology.sentinel_mut(0).kill();
    let guard = redlock
        .try_lock(unique("sentinel-listed-gone"), Duration::from_secs(2))
        .await
        .unwrap();
    assert!(
        guard.is_some(),
        "the two learnt sentinels confirm the master"
    );
    redlock.shutdown().await;
}
