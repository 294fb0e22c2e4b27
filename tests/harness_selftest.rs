//! Tests of the test harness in `tests/common` itself.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::topology::{RedisClusterTopology, SentinelTopology};
use common::{
    BlackHole, Cluster, PORT_HI, PORT_LO, RedisServer, ServerOptions, listed_server_bins, raw_ping,
    read_line, redis_server_bin, unique, wait_until,
};
use nix::sys::signal::kill;
use nix::unistd::Pid;
use redis::Commands;

const SILENCE: Duration = Duration::from_millis(300);

fn is_silence(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

fn pid_exists(pid: u32) -> bool {
    kill(Pid::from_raw(pid as i32), None).is_ok()
}

fn set(server: &RedisServer, key: &str, value: &str) {
    let _: () = server.conn().set(key, value).expect("SET");
}

fn get(server: &RedisServer, key: &str) -> Option<String> {
    server.conn().get(key).expect("GET")
}

#[test]
fn cluster_nodes_are_independent_and_reachable() {
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);
    let mut ports: Vec<u16> = cluster.nodes.iter().map(RedisServer::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3, "distinct ports: {urls:?}");
    for node in &cluster.nodes {
        assert!((PORT_LO..PORT_HI).contains(&node.port()));
        assert_eq!(node.url(), format!("redis://127.0.0.1:{}", node.port()));
        assert!(node.is_running());
    }

    let prefix = unique("selftest-cluster");
    for (i, node) in cluster.nodes.iter().enumerate() {
        let key = format!("{prefix}:{i}");
        set(node, &key, &format!("v{i}"));
        assert_eq!(get(node, &key), Some(format!("v{i}")));
    }
    let found = cluster.keys_everywhere(&format!("{prefix}:*"));
    let expected: Vec<(usize, String)> = (0..3).map(|i| (i, format!("{prefix}:{i}"))).collect();
    assert_eq!(found, expected, "each key lives only on its own node");
}

/// The `executable:` field of the node's `INFO server`, resolved through symlinks.
fn running_executable(server: &RedisServer) -> std::path::PathBuf {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut server.conn())
        .expect("INFO server");
    let exe = info
        .lines()
        .find_map(|l| l.strip_prefix("executable:"))
        .unwrap_or_else(|| panic!("no executable: field in INFO server:\n{info}"));
    std::fs::canonicalize(exe.trim()).expect("canonicalize executable")
}

#[test]
fn nodes_run_the_listed_servers_round_robin_also_after_restart() {
    let listed = listed_server_bins();
    let expected = |i: usize| match listed.len() {
        0 => redis_server_bin(),
        len => listed[i % len].clone(),
    };
    let mut cluster = Cluster::start(3);
    for (i, node) in cluster.nodes.iter().enumerate() {
        let want = std::fs::canonicalize(expected(i)).expect("canonicalize listed server");
        assert_eq!(std::fs::canonicalize(node.bin()).unwrap(), want, "node {i}");
        assert_eq!(running_executable(node), executed(want), "node {i}");
    }
    cluster.nodes[1].restart();
    let want = executed(std::fs::canonicalize(expected(1)).unwrap());
    assert_eq!(
        running_executable(&cluster.nodes[1]),
        want,
        "node 1 after restart"
    );
}

/// The binary that runs for a listed server path: the path itself, or, for a wrapper
/// script (scripts/servers.sh's Redis 7.4, which sets `LD_LIBRARY_PATH` and `exec`s
/// `<path>.bin`), the binary it execs.
fn executed(path: std::path::PathBuf) -> std::path::PathBuf {
    let is_script = std::fs::read(&path).is_ok_and(|bytes| bytes.starts_with(b"#!"));
    let bin = std::path::PathBuf::from(format!("{}.bin", path.display()));
    if is_script && bin.exists() { bin } else { path }
}

#[test]
fn paused_node_is_silent_until_resumed() {
    let cluster = Cluster::start(2);
    let node = &cluster.nodes[0];
    let prefix = unique("selftest-pause");
    set(node, &format!("{prefix}:a"), "1");
    set(&cluster.nodes[1], &format!("{prefix}:b"), "1");

    node.pause();
    assert!(node.is_paused());
    assert!(node.is_running(), "a paused server still runs");

    // The kernel still accepts the connection, but nobody answers.
    let mut stream = TcpStream::connect(("127.0.0.1", node.port())).expect("connect");
    stream.set_read_timeout(Some(SILENCE)).unwrap();
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let err = stream.read(&mut buf).expect_err("paused server replied");
    assert!(is_silence(&err), "unexpected error: {err}");
    assert!(started.elapsed() >= Duration::from_millis(250));
    let err = raw_ping(node.port(), SILENCE).expect_err("paused server replied");
    assert!(is_silence(&err), "unexpected error: {err}");

    // Paused nodes are skipped, the others still listed.
    assert_eq!(
        cluster.keys_everywhere(&format!("{prefix}:*")),
        vec![(1, format!("{prefix}:b"))]
    );

    node.resume();
    assert!(!node.is_paused());
    // The PING buffered while stopped is answered now.
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(read_line(&mut stream).unwrap(), "+PONG");
    assert_eq!(raw_ping(node.port(), SILENCE).unwrap(), "+PONG");
    assert_eq!(cluster.keys_everywhere(&format!("{prefix}:*")).len(), 2);
}

#[test]
fn restart_of_non_persistent_node_loses_data() {
    let mut server = RedisServer::start();
    let (port, pid) = (server.port(), server.pid());
    let key = unique("selftest-volatile");
    set(&server, &key, "x");

    server.kill();
    assert!(!server.is_running());
    assert!(!pid_exists(pid), "killed pid {pid} was reaped");
    assert!(
        raw_ping(port, SILENCE).is_err(),
        "nothing listens after kill"
    );
    server.kill(); // idempotent

    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port, "same port after restart");
    assert_ne!(server.pid(), pid);
    assert_eq!(get(&server, &key), None);
    assert!(server.keys("*").is_empty());
}

#[test]
fn restart_of_appendonly_node_keeps_data() {
    let mut server = RedisServer::start_with(ServerOptions {
        appendonly: true,
        ..ServerOptions::default()
    });
    let port = server.port();
    let key = unique("selftest-durable");
    set(&server, &key, "kept");

    // restart() on a running (here: paused) server kills it first.
    server.pause();
    server.restart();
    assert!(!server.is_paused());
    assert_eq!(server.port(), port);
    assert_eq!(get(&server, &key), Some("kept".to_string()));
    assert_eq!(server.keys(&format!("{key}*")), vec![key.clone()]);
}

#[test]
fn password_server_requires_auth() {
    let password = "s3cret pass/word";
    let server = RedisServer::start_with(ServerOptions {
        password: Some(password.to_string()),
        ..ServerOptions::default()
    });
    assert_eq!(
        server.url(),
        format!("redis://:s3cret%20pass%2Fword@127.0.0.1:{}", server.port())
    );
    let reply = raw_ping(server.port(), Duration::from_secs(2)).unwrap();
    assert!(reply.starts_with("-NOAUTH"), "got {reply:?}");

    let pong: String = redis::cmd("PING").query(&mut server.conn()).unwrap();
    assert_eq!(pong, "PONG");
    let key = unique("selftest-auth");
    set(&server, &key, "1");
    assert_eq!(server.keys(&key), vec![key.clone()]);
}

#[cfg(feature = "tls")]
#[test]
fn tls_server_answers_through_conn() {
    let server = RedisServer::start_with(ServerOptions {
        tls: true,
        ..ServerOptions::default()
    });
    assert_eq!(
        server.url(),
        format!("rediss://127.0.0.1:{}", server.port())
    );
    let ca = server.ca_pem().expect("TLS server has a CA");
    assert!(String::from_utf8(ca).unwrap().contains("BEGIN CERTIFICATE"));

    let pong: String = redis::cmd("PING").query(&mut server.conn()).unwrap();
    assert_eq!(pong, "PONG");

    // The listener really is TLS: a plaintext PING gets no +PONG.
    let plain = raw_ping(server.port(), SILENCE);
    assert!(
        !matches!(&plain, Ok(r) if r.starts_with("+PONG")),
        "plaintext PING answered: {plain:?}"
    );

    // The certificate is really verified: without the test CA it is rejected.
    common::ensure_crypto_provider();
    let untrusted = redis::Client::build_with_tls(
        server.url(),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: None,
        },
    )
    .unwrap()
    .get_connection_with_timeout(Duration::from_secs(5));
    assert!(untrusted.is_err(), "connected without trusting the test CA");
}

#[cfg(feature = "tls")]
#[test]
fn tls_and_password_together() {
    let server = RedisServer::start_with(ServerOptions {
        tls: true,
        password: Some("pw".to_string()),
        appendonly: false,
    });
    assert_eq!(
        server.url(),
        format!("rediss://:pw@127.0.0.1:{}", server.port())
    );
    let pong: String = redis::cmd("PING").query(&mut server.conn()).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn black_hole_accepts_and_never_replies() {
    let hole = BlackHole::start();
    assert_eq!(hole.url(), format!("redis://127.0.0.1:{}", hole.port()));
    let mut stream = TcpStream::connect(("127.0.0.1", hole.port())).expect("connect");
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    stream.set_read_timeout(Some(SILENCE)).unwrap();
    let mut buf = [0u8; 16];
    let err = stream.read(&mut buf).expect_err("black hole replied");
    assert!(is_silence(&err), "unexpected error: {err}");
    wait_until(Duration::from_secs(2), "black hole to accept", || {
        hole.accepted() >= 1
    });

    // A redis client with a response timeout gives up instead of hanging.
    let client = redis::Client::open(hole.url()).unwrap();
    let started = Instant::now();
    let res = client
        .get_connection_with_timeout(SILENCE)
        .and_then(|mut c| {
            c.set_read_timeout(Some(SILENCE))?;
            redis::cmd("PING").query::<String>(&mut c)
        });
    assert!(res.is_err(), "black hole answered a PING: {res:?}");
    assert!(started.elapsed() < Duration::from_secs(3));

    // Dropping it closes the held sockets.
    drop(hole);
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    match stream.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("black hole sent {n} bytes"),
        Err(e) => assert!(
            matches!(
                e.kind(),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            ),
            "socket not closed after drop: {e}"
        ),
    }
}

#[test]
fn dropped_servers_are_killed_and_reaped() {
    let running = RedisServer::start();
    let paused = RedisServer::start();
    paused.pause();
    let pids = [running.pid(), paused.pid()];
    let dirs = [running.dir().to_path_buf(), paused.dir().to_path_buf()];
    assert!(pids.iter().all(|&p| pid_exists(p)));
    drop(running);
    drop(paused);
    for pid in pids {
        // Not even a zombie: kill(pid, 0) fails once the child was waited for.
        assert!(!pid_exists(pid), "pid {pid} still exists after drop");
    }
    for dir in dirs {
        assert!(!dir.exists(), "{} not removed", dir.display());
    }
}

#[test]
fn kill_works_on_paused_server() {
    let mut server = RedisServer::start();
    let pid = server.pid();
    server.pause();
    server.kill();
    assert!(!server.is_running());
    assert!(!server.is_paused());
    assert!(!pid_exists(pid));
}

#[test]
fn unique_names_differ() {
    let a = unique("k");
    let b = unique("k");
    assert_ne!(a, b);
    assert!(a.starts_with(&format!("k-{}-", std::process::id())));
}

#[test]
#[should_panic(expected = "timed out after 50ms waiting for: the impossible")]
fn wait_until_panics_with_what() {
    wait_until(Duration::from_millis(50), "the impossible", || false);
}

#[test]
fn wait_until_returns_when_true() {
    let mut calls = 0;
    wait_until(Duration::from_secs(1), "third call", || {
        calls += 1;
        calls >= 3
    });
    assert_eq!(calls, 3);
}

/// `INFO replication`'s `role:` on `server`.
fn role(server: &RedisServer) -> String {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut server.conn())
        .expect("INFO replication");
    info.lines()
        .find_map(|l| l.strip_prefix("role:"))
        .unwrap_or_else(|| panic!("no role: in INFO replication:\n{info}"))
        .trim()
        .to_string()
}

#[test]
fn topology_cluster_comes_up_and_fails_over() {
    let started = Instant::now();
    let cluster = RedisClusterTopology::start(3, 1);
    let up = started.elapsed();
    assert_eq!(cluster.nodes().len(), 6);
    let urls = cluster.seed_urls();
    assert_eq!(urls.len(), 6);
    for node in cluster.nodes() {
        let port = node.port();
        assert!((PORT_LO..PORT_HI).contains(&port), "port {port}");
        assert!(port + 10000 < 32768, "bus port of {port} is ephemeral");
        assert!(urls.contains(&format!("redis://127.0.0.1:{port}")));
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut node.conn())
            .expect("CLUSTER INFO");
        for field in [
            "cluster_state:ok",
            "cluster_slots_assigned:16384",
            "cluster_slots_ok:16384",
            "cluster_slots_pfail:0",
            "cluster_slots_fail:0",
            "cluster_known_nodes:6",
            "cluster_size:3",
        ] {
            assert!(
                info.lines().any(|l| l.trim() == field),
                "port {port}: no {field} in\n{info}"
            );
        }
    }
    // Initial layout: 0..3 masters, 3 + m replicates m.
    for m in 0..3 {
        assert_eq!(role(cluster.node(m)), "master", "node {m}");
        assert_eq!(cluster.replicas_of(m), vec![3 + m], "replicas of {m}");
        assert_eq!(role(cluster.node(3 + m)), "slave", "node {}", 3 + m);
    }
    let slots: Vec<Vec<(u16, u16)>> = (0..3)
        .map(|m| {
            let view = cluster.cluster_nodes(m);
            let me = view.iter().find(|e| e.has_flag("myself")).unwrap();
            assert_eq!(me.id, cluster.node_id(m));
            me.slots.clone()
        })
        .collect();
    assert_eq!(
        slots,
        vec![vec![(0, 5460)], vec![(5461, 10921)], vec![(10922, 16383)]]
    );

    let key = unique("selftest-topology-cluster");
    let slot = cluster.key_slot(&key);
    let master = cluster.master_for_key(&key);
    assert!(
        slots[master]
            .iter()
            .any(|&(lo, hi)| (lo..=hi).contains(&slot))
    );
    set(cluster.node(master), &key, "before-failover");
    assert_eq!(
        get(cluster.node(master), &key),
        Some("before-failover".to_string())
    );
    // Another master answers with a redirection to the owner, not the value.
    let other = (master + 1) % 3;
    let moved = redis::cmd("GET")
        .arg(&key)
        .query::<Option<String>>(&mut cluster.node(other).conn())
        .expect_err("a master that does not own the slot answered");
    let owner = format!("127.0.0.1:{}", cluster.node(master).port());
    assert_eq!(
        moved.redirect_node(),
        Some((owner.as_str(), slot)),
        "{moved}"
    );
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(1000)
        .query(&mut cluster.node(master).conn())
        .expect("WAIT");
    assert_eq!(acked, 1, "the replica acknowledged the write");

    let replica = cluster.replicas_of(master)[0];
    let old_pid = cluster.node(replica).pid();
    let failing_over = Instant::now();
    cluster.force_failover(replica);
    let failover = failing_over.elapsed();
    assert_eq!(role(cluster.node(replica)), "master");
    assert_eq!(role(cluster.node(master)), "slave");
    assert_eq!(cluster.master_for_key(&key), replica);
    assert_eq!(cluster.replicas_of(replica), vec![master]);
    assert!(cluster.replicas_of(master).is_empty());
    assert_eq!(cluster.node(replica).pid(), old_pid, "promoted in place");
    assert_eq!(
        get(cluster.node(replica), &key),
        Some("before-failover".to_string())
    );
    eprintln!("cluster up in {up:?}, failover in {failover:?}");
}

#[test]
fn topology_sentinel_comes_up_and_fails_over() {
    let started = Instant::now();
    let topology = SentinelTopology::start(2, 3);
    let up = started.elapsed();
    assert_eq!(topology.servers().len(), 3);
    assert_eq!(topology.sentinels().len(), 3);
    assert_eq!(topology.service(), SentinelTopology::SERVICE);
    let master_addr = format!("127.0.0.1:{}", topology.server(0).port());
    assert_eq!(topology.master_addr().to_string(), master_addr);
    assert_eq!(topology.master_index(), 0);
    assert_eq!(role(topology.server(0)), "master");
    assert_eq!(role(topology.server(1)), "slave");
    assert_eq!(role(topology.server(2)), "slave");
    let addrs = topology.sentinel_addrs();
    assert_eq!(addrs.len(), 3);
    for (s, addr) in topology.sentinels().iter().zip(&addrs) {
        assert_eq!(addr.to_string(), format!("127.0.0.1:{}", s.port()));
        assert!((PORT_LO..PORT_HI).contains(&s.port()));
        let reply: Vec<String> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(topology.service())
            .query(&mut s.conn())
            .expect("SENTINEL get-master-addr-by-name");
        assert_eq!(reply.join(":"), master_addr);
        assert!(
            std::fs::read_to_string(s.config_path())
                .unwrap()
                .contains("sentinel myid "),
            "sentinel rewrote its config file"
        );
    }
    assert_eq!(
        topology.sentinel_urls(),
        addrs
            .iter()
            .map(|a| format!("redis://{a}"))
            .collect::<Vec<_>>()
    );

    let key = unique("selftest-topology-sentinel");
    set(topology.server(0), &key, "before-failover");
    let acked: i64 = redis::cmd("WAIT")
        .arg(2)
        .arg(1000)
        .query(&mut topology.server(0).conn())
        .expect("WAIT");
    assert_eq!(acked, 2, "both replicas acknowledged the write");

    let failing_over = Instant::now();
    let new = topology.failover();
    let failover = failing_over.elapsed();
    assert!(
        new == 1 || new == 2,
        "new master is a former replica: {new}"
    );
    assert_eq!(topology.master_index(), new);
    assert_eq!(
        topology.master_addr().to_string(),
        format!("127.0.0.1:{}", topology.server(new).port())
    );
    assert_eq!(role(topology.server(new)), "master");
    assert_eq!(
        get(topology.server(new), &key),
        Some("before-failover".to_string())
    );
    eprintln!("sentinel topology up in {up:?}, failover in {failover:?}");
}
