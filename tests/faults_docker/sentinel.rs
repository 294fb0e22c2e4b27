//! Members under Sentinel in containers: three members, each a master and a replica in a
//! container of its own, on a private bridge network of their own, and three sentinels
//! that watch all three, one beside each member's first master, as hosts running Redis
//! usually carry a sentinel too. A container is a host here: a sentinel runs in its
//! master's container (`docker exec`), so it shares the master's address and its freezer,
//! and a stalled host stops both at the same instant, the way a stalled VM would; two
//! containers paused one after the other would leave a moment in which one answers, at an
//! address of its own.
//!
//! Two faults, both silent, both healed by a thaw after which the sentinels turn the old
//! master into the new master's replica:
//! - [`Fault::Failover`]: the master's process stalls alone (`SIGSTOP` through `docker
//!   kill`; the sentinel beside it keeps watching) until the sentinels, finding it silent,
//!   promote its replica;
//! - [`Fault::HostStall`]: the master's whole host stalls (`docker pause`), its sentinel
//!   with it; the two other sentinels must still make a majority and promote the replica.
//!   A thawed sentinel names the old master until it hears of the promotion, and stays in
//!   TILT mode for 30 s (it answers but does not vote): a second host stall within that
//!   time would leave one sentinel able to vote, and no failover.
//!
//! The containers run the tier's image (`docker/build-image.sh`), which has a writable
//! `/tmp` for the sentinels' configuration files, which they rewrite. Every container and
//! the network carry this run's name and are removed when the ensemble is dropped.

use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::topology::{SENTINEL_DOWN_AFTER, SENTINEL_FAILOVER_TIMEOUT};
use crate::kit::ensemble::{Ensemble, Fault, MARKER};
use crate::{run, used_subnets};

const IMAGE: &str = "quorum-lock/redis:local";
const MEMBERS: usize = 3;
/// One sentinel on each member's first master's host.
const SENTINELS: usize = MEMBERS;
const SENTINEL_PORT: u16 = 26379;
/// How long the topology gets to come up, to fail over or to take a thawed master back.
const SETTLE: Duration = Duration::from_secs(30);
/// Connect and read timeout of the checks: a frozen master must not stall one for long.
const CHECK_TIMEOUT: Duration = Duration::from_millis(500);

/// The running containers of one set of members.
pub struct DockerSentinelMembers {
    name: String,
    prefix: String,
    /// Per member, which of its two servers its fault froze, and how, while it lasts.
    frozen: Vec<Option<Frozen>>,
}

/// A frozen server: its index in its member, and whether its whole host (container) is
/// frozen or its process alone.
#[derive(Clone, Copy, Debug)]
struct Frozen {
    server: usize,
    host: bool,
}

impl DockerSentinelMembers {
    /// Creates the network and the containers on a free subnet, and waits until every
    /// replica is linked and every sentinel knows every member's replica and the other
    /// sentinels.
    pub fn up() -> Result<DockerSentinelMembers, String> {
        let name = format!("qlsentinel{}", std::process::id());
        let used = used_subnets();
        let prefix = (0..100u32)
            .map(|k| format!("172.30.{}", 100 + (std::process::id() + k) % 100))
            .find(|p| !used.contains(&format!("{p}.")))
            .ok_or("no free 172.30.x.0/24 subnet")?;
        let members = DockerSentinelMembers {
            name,
            prefix,
            frozen: vec![None; MEMBERS],
        };
        members.start()?;
        members.settle("the members and sentinels to come up", |m| {
            m.linked_everywhere()
        })?;
        Ok(members)
    }

    fn start(&self) -> Result<(), String> {
        let subnet = format!("{}.0/24", self.prefix);
        docker(&["network", "create", "--subnet", &subnet, &self.name])?;
        for m in 0..MEMBERS {
            self.run_server(&self.server(m, 0), self.server_ip(m, 0), None)?;
            let master = self.server_ip(m, 0);
            self.run_server(&self.server(m, 1), self.server_ip(m, 1), Some(&master))?;
        }
        for s in 0..SENTINELS {
            self.run_sentinel(s)?;
        }
        Ok(())
    }

    fn run_server(
        &self,
        container: &str,
        ip: String,
        replica_of: Option<&str>,
    ) -> Result<(), String> {
        let mut args = vec!["run", "-d"];
        args.extend(self.placed(container, &ip));
        args.extend([
            IMAGE,
            "--port",
            "6379",
            "--bind",
            "0.0.0.0",
            "--protected-mode",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--repl-diskless-sync-delay",
            "0",
        ]);
        if let Some(master) = replica_of {
            args.extend(["--replicaof", master, "6379"]);
        }
        docker(&args).map(|_| ())
    }

    /// Sentinel `s`, on member `s`'s first master's host: its configuration copied into
    /// that container's `/tmp`, then started there beside the master.
    fn run_sentinel(&self, s: usize) -> Result<(), String> {
        let host = self.server(s, 0);
        let conf = std::env::temp_dir().join(format!("{host}-sentinel.conf"));
        std::fs::write(&conf, self.sentinel_conf()).map_err(|e| format!("write {conf:?}: {e}"))?;
        let copied = docker(&[
            "cp",
            conf.to_str().expect("utf-8 path"),
            &format!("{host}:/tmp/sentinel.conf"),
        ]);
        let _ = std::fs::remove_file(&conf);
        copied?;
        docker(&[
            "exec",
            "-d",
            &host,
            "/usr/local/bin/redis-server",
            "/tmp/sentinel.conf",
            "--sentinel",
        ])
        .map(|_| ())
    }

    /// The `docker run`/`create` options that name a container of this run, label it for
    /// the teardown and give it `ip` on the run's network.
    fn placed<'a>(&'a self, container: &'a str, ip: &'a str) -> [&'a str; 8] {
        [
            "--name",
            container,
            "--label",
            &self.name,
            "--network",
            &self.name,
            "--ip",
            ip,
        ]
    }

    fn sentinel_conf(&self) -> String {
        let mut conf = format!("port {SENTINEL_PORT}\nbind 0.0.0.0\nprotected-mode no\n");
        for m in 0..MEMBERS {
            let service = service(m);
            conf.push_str(&format!(
                "sentinel monitor {service} {} 6379 {}\n\
                 sentinel down-after-milliseconds {service} {}\n\
                 sentinel failover-timeout {service} {}\n\
                 sentinel parallel-syncs {service} 1\n",
                self.server_ip(m, 0),
                SENTINELS / 2 + 1,
                SENTINEL_DOWN_AFTER.as_millis(),
                SENTINEL_FAILOVER_TIMEOUT.as_millis(),
            ));
        }
        conf
    }

    fn server(&self, m: usize, k: usize) -> String {
        format!("{}_m{m}_{k}", self.name)
    }

    fn server_ip(&self, m: usize, k: usize) -> String {
        format!("{}.{}", self.prefix, 21 + 2 * m + k)
    }

    fn sentinel_addr(&self, s: usize) -> String {
        format!("{}:{SENTINEL_PORT}", self.server_ip(s, 0))
    }

    /// Which of member `m`'s two servers is at `ip`.
    fn server_at(&self, m: usize, ip: &str) -> usize {
        (0..2)
            .find(|&k| self.server_ip(m, k) == ip)
            .unwrap_or_else(|| panic!("the sentinels name a stranger for {}: {ip}", service(m)))
    }

    /// The address every sentinel that answers names for member `m`, if they agree.
    fn named_master(&self, m: usize) -> Option<String> {
        let mut named = (0..SENTINELS).filter_map(|s| {
            let reply: Vec<String> = query(
                &self.sentinel_addr(s),
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(service(m)),
            )
            .ok()?;
            reply.first().cloned()
        });
        let first = named.next()?;
        named.all(|ip| ip == first).then_some(first)
    }

    /// Whether every sentinel sees member `m`'s master with one linked replica and the
    /// two other sentinels.
    fn linked(&self, m: usize) -> bool {
        (0..SENTINELS).all(|s| {
            let addr = self.sentinel_addr(s);
            let master: Vec<String> =
                query(&addr, redis::cmd("SENTINEL").arg("master").arg(service(m)))
                    .unwrap_or_default();
            let replicas: Vec<Vec<String>> = query(
                &addr,
                redis::cmd("SENTINEL").arg("replicas").arg(service(m)),
            )
            .unwrap_or_default();
            field(&master, "flags") == Some("master")
                && field(&master, "num-other-sentinels") == Some("2")
                && replicas.len() == 1
                && field(&replicas[0], "flags") == Some("slave")
                && field(&replicas[0], "master-link-status") == Some("ok")
        })
    }

    fn linked_everywhere(&self) -> bool {
        (0..MEMBERS).all(|m| self.linked(m))
    }

    fn settle(&self, what: &str, done: impl Fn(&Self) -> bool) -> Result<(), String> {
        settle_within(what, || done(self))
    }

    fn must_settle(&self, what: &str, done: impl Fn(&Self) -> bool) {
        if let Err(e) = self.settle(what, done) {
            panic!("{e}\n{}", self.describe());
        }
    }

    /// Whether the sentinels name a master for member `m` other than `old`, and it says it
    /// is a master.
    fn promoted_other_than(&self, m: usize, old: &str) -> bool {
        self.named_master(m).is_some_and(|ip| {
            ip != old
                && query::<String>(&format!("{ip}:6379"), redis::cmd("INFO").arg("replication"))
                    .is_ok_and(|info| info.contains("role:master"))
        })
    }

    /// Freezes member `m`'s server `k`: its whole host (`docker pause`, with the sentinel
    /// on it, if any), or its process alone (`SIGSTOP`).
    fn freeze(&mut self, m: usize, k: usize, host: bool) {
        set_frozen(&self.server(m, k), host, true);
        self.frozen[m] = Some(Frozen { server: k, host });
    }

    /// Thaws what [`freeze`](Self::freeze) froze on member `m`, if anything, and returns
    /// once that server answers.
    fn thaw(&mut self, m: usize) {
        let Some(Frozen { server, host }) = self.frozen[m].take() else {
            return;
        };
        set_frozen(&self.server(m, server), host, false);
        let addr = format!("{}:6379", self.server_ip(m, server));
        self.must_settle("the thawed master to answer", |_| {
            query::<String>(&addr, &redis::cmd("PING")).is_ok()
        });
    }

    /// Each server's role and each sentinel's view: what a timed-out wait prints.
    fn describe(&self) -> String {
        let mut out = String::new();
        for m in 0..MEMBERS {
            for k in 0..2 {
                let ip = self.server_ip(m, k);
                let role =
                    query::<String>(&format!("{ip}:6379"), redis::cmd("INFO").arg("replication"))
                        .map(|info| info.lines().take(4).collect::<Vec<_>>().join(" "));
                out.push_str(&format!("{} {ip}: {role:?}\n", self.server(m, k)));
            }
            out.push_str(&format!(
                "{} named: {:?}\n",
                service(m),
                self.named_master(m)
            ));
        }
        out
    }
}

impl Drop for DockerSentinelMembers {
    fn drop(&mut self) {
        tear_down(&self.name);
    }
}

impl Ensemble for DockerSentinelMembers {
    fn size(&self) -> usize {
        MEMBERS
    }

    fn client_urls(&self) -> Vec<String> {
        let sentinels: Vec<String> = (0..SENTINELS).map(|s| self.sentinel_addr(s)).collect();
        (0..MEMBERS)
            .map(|m| format!("redis+sentinel://{}/{}", sentinels.join(","), service(m)))
            .collect()
    }

    /// The member's current master.
    fn admin_url(&self, i: usize) -> String {
        let ip = self
            .named_master(i)
            .expect("the sentinels agree on a master");
        format!("redis://{ip}:6379")
    }

    fn supports(&self, fault: &Fault) -> bool {
        matches!(fault, Fault::Failover | Fault::HostStall)
    }

    /// Whether a client has admitted member `i`'s current master in its current life: its
    /// marker names the life the client reads from `INFO`, which for a promoted replica is
    /// its `run_id` and replication ID (DESIGN.md section 7).
    fn admitted(&self, i: usize) -> bool {
        let Some(ip) = self.named_master(i) else {
            return false;
        };
        let addr = format!("{ip}:6379");
        let Ok(info) = query::<String>(&addr, redis::cmd("INFO").arg("server").arg("replication"))
        else {
            return false;
        };
        let value = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        let (Some(run_id), Some(replid)) = (value("run_id"), value("master_replid")) else {
            return false;
        };
        let life = match value("second_repl_offset") {
            Some("-1") | None => run_id.to_owned(),
            Some(_) => format!("{run_id}~{replid}"),
        };
        let marker = query::<Option<String>>(&addr, redis::cmd("GET").arg(MARKER));
        marker.is_ok_and(|m| m.is_some_and(|m| m.split(':').next() == Some(life.as_str())))
    }

    /// Freezes member `i`'s master, its process alone ([`Fault::Failover`]) or its whole
    /// host ([`Fault::HostStall`]), and returns once the sentinels have promoted its
    /// replica and it says it is a master. A member failed over before first waits until
    /// the sentinels see its thawed master linked as a replica, one they can promote.
    fn inject(&mut self, i: usize, fault: &Fault) {
        assert!(self.supports(fault), "these members only fail over");
        self.must_settle("a replica the sentinels can promote", |t| t.linked(i));
        let old = self
            .named_master(i)
            .expect("the sentinels agree on a master");
        let k = self.server_at(i, &old);
        self.freeze(i, k, *fault == Fault::HostStall);
        self.must_settle("the sentinels to promote the replica", |t| {
            t.promoted_other_than(i, &old)
        });
    }

    /// Thaws the frozen master (and its host's sentinel) and returns once it answers. It is
    /// still a master, and accepts writes, until the sentinels turn it into the new
    /// master's replica (8 s later, Sentinel's wait for a stale master to be reconfigured):
    /// the workers go on meanwhile, and any vote it gives must not count.
    fn heal(&mut self, i: usize, _: &Fault) {
        self.thaw(i);
    }
}

fn service(m: usize) -> String {
    format!("m{m}")
}

/// Removes every container labelled `name` (thawed first; a stopped process needs no
/// `SIGCONT` to be killed) and the network `name`.
pub(crate) fn tear_down(name: &str) {
    let label = format!("label={name}");
    if let Ok(out) = docker(&["ps", "-aq", "--filter", &label]) {
        let ids: Vec<&str> = out.split_whitespace().collect();
        for id in &ids {
            let _ = docker(&["unpause", id]);
        }
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f"];
            args.extend(ids);
            if let Err(e) = docker(&args) {
                eprintln!("docker teardown of {name}: {e}");
            }
        }
    }
    if let Err(e) = docker(&["network", "rm", name]) {
        eprintln!("docker teardown of {name}: {e}");
    }
}

/// Waits, checking every 50 ms, until `done` holds, at most [`SETTLE`].
pub(crate) fn settle_within(what: &str, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > SETTLE {
            return Err(format!("timed out after {SETTLE:?} waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// `docker args`, its standard output when it succeeded.
pub(crate) fn docker(args: &[&str]) -> Result<String, String> {
    let out: Output = run("docker", args, &[], Duration::from_secs(60))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "docker {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

pub(crate) fn query<T: redis::FromRedisValue>(addr: &str, cmd: &redis::Cmd) -> Result<T, String> {
    let client = redis::Client::open(format!("redis://{addr}")).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_connection_with_timeout(CHECK_TIMEOUT)
        .map_err(|e| format!("{addr}: {e}"))?;
    conn.set_read_timeout(Some(CHECK_TIMEOUT))
        .map_err(|e| e.to_string())?;
    cmd.query(&mut conn).map_err(|e| format!("{addr}: {e}"))
}

/// A field of a `SENTINEL master` / `replicas` entry (field names and values in turn).
fn field<'a>(entry: &'a [String], name: &str) -> Option<&'a str> {
    entry
        .chunks(2)
        .find(|pair| pair[0] == name)
        .and_then(|pair| pair.get(1))
        .map(String::as_str)
}

/// Freezes (`frozen`) or thaws `container`: the whole host (`docker pause`, `unpause`), or
/// its process alone (`SIGSTOP`, `SIGCONT`).
fn set_frozen(container: &str, host: bool, frozen: bool) {
    let args = match (host, frozen) {
        (true, true) => vec!["pause", container],
        (true, false) => vec!["unpause", container],
        (false, true) => vec!["kill", "--signal", "STOP", container],
        (false, false) => vec!["kill", "--signal", "CONT", container],
    };
    docker(&args).unwrap_or_else(|e| panic!("{e}"));
}
