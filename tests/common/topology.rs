//! Replicated topologies on loopback, for quorum members that are not a single master: a
//! Redis Cluster ([`RedisClusterTopology`]) and a Sentinel-managed master with replicas
//! ([`SentinelTopology`]).
//!
//! Both return only once the topology has settled (every slot served, every replica
//! linked, every sentinel agreeing), by polling the nodes' own reports, never by sleeping;
//! a topology that does not settle within [`TOPOLOGY_TIMEOUT`] panics with each node's
//! state and log tail. Every node is a [`RedisServer`] and every sentinel a
//! [`SentinelProcess`]: both are SIGKILLed by pid and reaped when dropped, also during a
//! panic (a paused one too: SIGKILL needs no SIGCONT).
//!
//! All nodes of one topology run the same binary (the next one of [`super::SERVERS_ENV`],
//! or [`super::redis_server_bin`]): replication between different builds is not what
//! these topologies are for.

use std::collections::HashMap;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill as send_signal};
use nix::unistd::Pid;

use super::{
    Proc, RedisServer, START_TRIES, ServerExtras, ServerOptions, file_tail, free_port,
    kill_and_reap, make_temp_dir, next_port_candidate, next_server_bin, port_is_free, raw_ping,
};

/// How long a topology gets to come up or to settle after a failover.
pub const TOPOLOGY_TIMEOUT: Duration = Duration::from_secs(20);
/// `cluster-node-timeout` of cluster nodes: short, so failure detection is quick.
pub const CLUSTER_NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// The cluster bus listens on the client port plus this (Redis' default `cluster-port`).
pub const CLUSTER_BUS_OFFSET: u16 = 10000;
/// Slots of a Redis Cluster.
pub const CLUSTER_SLOTS: u16 = 16384;
/// `sentinel down-after-milliseconds`.
pub const SENTINEL_DOWN_AFTER: Duration = Duration::from_millis(1000);
/// `sentinel failover-timeout`.
pub const SENTINEL_FAILOVER_TIMEOUT: Duration = Duration::from_millis(5000);
/// How long [`SentinelTopology::failover`] waits for one sentinel's failover before it
/// asks the next.
const FAILOVER_PATIENCE: Duration = Duration::from_secs(8);

/// First port of the kernel's ephemeral range: cluster bus ports stay below it.
const EPHEMERAL_LO: u16 = 32768;
/// Interval between two polls of a topology.
const POLL: Duration = Duration::from_millis(20);
/// Connect/read/write timeout of the polling connections (a paused node must not stall a
/// poll for [`super::ADMIN_TIMEOUT`]).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Log lines per node in a timeout's panic message.
const LOG_LINES: usize = 8;
const SENTINEL_LOG: &str = "sentinel.log";
const SENTINEL_STDIO: &str = "sentinel.stdio";
const SENTINEL_CONF: &str = "sentinel.conf";

/// Arguments every node of a topology gets: a master starts a full sync at once instead
/// of waiting 5 s (Redis 7's default `repl-diskless-sync-delay`) for more replicas.
const REPLICATION_ARGS: [&str; 2] = ["--repl-diskless-sync-delay", "0"];

/// Polls `done` every [`POLL`] until it returns true (then true), or until `deadline` has
/// passed (then false).
fn poll(deadline: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() > deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// The value of `field:` in an `INFO` or `CLUSTER INFO` reply.
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

fn connect(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let conn = client.get_connection_with_timeout(PROBE_TIMEOUT)?;
    conn.set_read_timeout(Some(PROBE_TIMEOUT))?;
    conn.set_write_timeout(Some(PROBE_TIMEOUT))?;
    Ok(conn)
}

/// Polling connections by port, kept open across polls (a connection per poll would
/// leave thousands of sockets in TIME_WAIT) and dropped after any error, so a late reply
/// is never read as the next answer.
#[derive(Default)]
struct Probe {
    conns: HashMap<u16, redis::Connection>,
}

impl Probe {
    fn query<T: redis::FromRedisValue>(&mut self, port: u16, cmd: &redis::Cmd) -> Option<T> {
        let conn = match self.conns.entry(port) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(connect(port).ok()?),
        };
        match cmd.query(conn) {
            Ok(v) => Some(v),
            Err(_) => {
                self.conns.remove(&port);
                None
            }
        }
    }

    fn info(&mut self, port: u16, section: &str) -> Option<String> {
        self.query(port, redis::cmd("INFO").arg(section))
    }
}

/// One query on a fresh connection, for set-up steps and `describe`; the error as text.
fn query_once<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Result<T, String> {
    let mut conn = connect(port).map_err(|e| format!("connect to port {port}: {e}"))?;
    cmd.query(&mut conn)
        .map_err(|e| format!("port {port}: {e}"))
}

/// Like [`query_once`], panicking on error.
fn must<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> T {
    query_once(port, cmd).unwrap_or_else(|e| panic!("{e}"))
}

/// The node is running and not paused: it can answer.
fn is_reachable(server: &RedisServer) -> bool {
    server.is_running() && !server.is_paused()
}

/// A port `P` for a cluster node with `P` and its bus port `P + CLUSTER_BUS_OFFSET` both
/// free and both below the ephemeral range. Drawn from the harness's own port sequence,
/// so no two servers of this process are handed the same `P`.
fn free_cluster_port() -> u16 {
    for _ in 0..20_000 {
        let p = next_port_candidate();
        let Some(bus) = p.checked_add(CLUSTER_BUS_OFFSET) else {
            continue;
        };
        if bus < EPHEMERAL_LO && port_is_free(p) && port_is_free(bus) {
            return p;
        }
    }
    panic!(
        "no free cluster port P with a free bus port P+{CLUSTER_BUS_OFFSET} below {EPHEMERAL_LO}"
    );
}

impl RedisServer {
    /// A cluster-mode node (`nodes.conf` in its own dir) on a port whose bus port is free
    /// too. Spawned here rather than by [`RedisServer::start_extended`], which cannot be
    /// told to keep `P + 10000` free; restart, pause, kill and Drop are the usual ones.
    fn start_cluster_node(bin: &Path) -> RedisServer {
        let mut errors = Vec::new();
        for _ in 0..START_TRIES {
            let port = free_cluster_port();
            let dir = make_temp_dir();
            let mut extra_args: Vec<String> = REPLICATION_ARGS.map(String::from).to_vec();
            extra_args.extend([
                "--cluster-enabled".to_string(),
                "yes".to_string(),
                "--cluster-config-file".to_string(),
                dir.join("nodes.conf").display().to_string(),
                "--cluster-node-timeout".to_string(),
                CLUSTER_NODE_TIMEOUT.as_millis().to_string(),
            ]);
            let server = RedisServer {
                bin: bin.to_path_buf(),
                opts: ServerOptions::default(),
                extras: ServerExtras {
                    extra_args,
                    bin: Some(bin.to_path_buf()),
                    ..ServerExtras::default()
                },
                port,
                dir,
                ca_pem: None,
                proc_: Mutex::new(Proc {
                    child: None,
                    pid: 0,
                }),
                paused: AtomicBool::new(false),
                spawns: AtomicU32::new(0),
            };
            match server.spawn_ready() {
                Ok(()) => return server,
                // `server` is dropped: its temp dir is removed.
                Err(e) => errors.push(format!("port {port}: {e}")),
            }
        }
        panic!(
            "cluster node did not start after {START_TRIES} tries:\n{}",
            errors.join("\n")
        );
    }
}

/// One line of `CLUSTER NODES`: a node as one cluster member sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNodeEntry {
    /// The 40-character node id.
    pub id: String,
    /// Client port (0 while the address is unknown).
    pub port: u16,
    /// `myself`, `master`, `slave`, `fail?`, `fail`, `handshake`, `noaddr`, ...
    pub flags: Vec<String>,
    /// The master's node id, for a replica.
    pub master_id: Option<String>,
    /// Inclusive slot ranges served (migration entries `[...]` left out).
    pub slots: Vec<(u16, u16)>,
}

impl ClusterNodeEntry {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    pub fn is_master(&self) -> bool {
        self.has_flag("master")
    }

    /// Suspected (`fail?`) or agreed (`fail`) failing, or not yet joined.
    pub fn is_unhealthy(&self) -> bool {
        ["fail", "fail?", "handshake", "noaddr"]
            .iter()
            .any(|f| self.has_flag(f))
    }

    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot))
    }
}

/// Parses a `CLUSTER NODES` reply; malformed lines are skipped.
pub fn parse_cluster_nodes(text: &str) -> Vec<ClusterNodeEntry> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let id = parts.next()?.to_string();
            // `ip:port@cport[,hostname]`
            let addr = parts.next()?;
            let port = addr.split('@').next()?.rsplit(':').next()?.parse().ok()?;
            let flags = parts.next()?.split(',').map(String::from).collect();
            let master_id = Some(parts.next()?).filter(|m| *m != "-").map(String::from);
            // ping-sent, pong-recv, config-epoch, link-state
            let slots = parts
                .skip(4)
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
                    None => s.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Some(ClusterNodeEntry {
                id,
                port,
                flags,
                master_id,
                slots,
            })
        })
        .collect()
}

/// The slots master `m` of `masters` is given at start: 16384 split evenly, in order.
fn initial_slots(m: usize, masters: usize) -> (u16, u16) {
    let total = usize::from(CLUSTER_SLOTS);
    let lo = m * total / masters;
    let hi = (m + 1) * total / masters - 1;
    (
        u16::try_from(lo).expect("slot fits u16"),
        u16::try_from(hi).expect("slot fits u16"),
    )
}

/// Polls `done` until it holds, printing how long `what` took in `topology`; panics after
/// [`TOPOLOGY_TIMEOUT`] with what `describe` says of the topology.
fn settle_or_describe(
    topology: &str,
    what: &str,
    done: impl FnMut() -> bool,
    describe: impl FnOnce() -> String,
) {
    let start = Instant::now();
    if !poll(TOPOLOGY_TIMEOUT, done) {
        panic!(
            "timed out after {TOPOLOGY_TIMEOUT:?} waiting for {what}\n{}",
            describe()
        );
    }
    eprintln!("{topology}: {what}: {:?}", start.elapsed());
}

/// A Redis Cluster of `masters` masters with `replicas_per_master` replicas each, all
/// 16384 slots covered, `cluster-node-timeout` [`CLUSTER_NODE_TIMEOUT`].
///
/// Nodes are addressed by index: at start, `0..masters` are the masters (master `m`
/// serving slots `m * 16384 / masters ..`) and replica `r` of master `m` is
/// `masters + m * replicas_per_master + r`. Indexes stay with the processes; roles move
/// with failovers (see [`master_for_key`](Self::master_for_key)). The cluster is built
/// with `CLUSTER SET-CONFIG-EPOCH`, `ADDSLOTS`, `MEET` and `REPLICATE` (what
/// `redis-cli --cluster create` does), without `redis-cli`'s fixed sleeps.
pub struct RedisClusterTopology {
    nodes: Vec<RedisServer>,
    /// Node ids by index; a restart keeps them (`nodes.conf` is in the node's dir).
    ids: Vec<String>,
    masters: usize,
}

impl RedisClusterTopology {
    /// Starts the nodes and forms the cluster; returns once every node says
    /// `cluster_state:ok` with all slots ok, every node sees every other one with its
    /// initial role, and every replica reports `master_link_status:up`.
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisClusterTopology {
        assert!(masters >= 1, "a cluster needs at least one master");
        let bin = next_server_bin(false);
        let total = masters * (1 + replicas_per_master);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| RedisServer::start_cluster_node(&bin))
            .collect();
        let ids: Vec<String> = nodes
            .iter()
            .map(|n| must(n.port(), redis::cmd("CLUSTER").arg("MYID")))
            .collect();
        let cluster = RedisClusterTopology {
            nodes,
            ids,
            masters,
        };
        cluster.form(replicas_per_master);
        cluster
    }

    fn form(&self, replicas_per_master: usize) {
        let ports: Vec<u16> = self.nodes.iter().map(RedisServer::port).collect();
        // Distinct epochs before the nodes meet, so no epoch collision has to be resolved.
        for (i, &port) in ports.iter().enumerate() {
            let _: String = must(
                port,
                redis::cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(i + 1),
            );
        }
        for (m, &port) in ports.iter().enumerate().take(self.masters) {
            let (lo, hi) = initial_slots(m, self.masters);
            let slots: Vec<u16> = (lo..=hi).collect();
            let _: String = must(port, redis::cmd("CLUSTER").arg("ADDSLOTS").arg(slots));
        }
        for &port in &ports[1..] {
            let _: String = must(
                ports[0],
                redis::cmd("CLUSTER").arg("MEET").arg("127.0.0.1").arg(port),
            );
        }
        // REPLICATE needs the replica to know its master.
        let mut probe = Probe::default();
        self.settle("every node to know every other node", |c| {
            c.reachable().all(|i| {
                c.view(&mut probe, i).is_some_and(|view| {
                    view.len() == c.nodes.len() && view.iter().all(|e| !e.is_unhealthy())
                })
            })
        });
        for m in 0..self.masters {
            for r in 0..replicas_per_master {
                let replica = self.masters + m * replicas_per_master + r;
                let _: String = must(
                    ports[replica],
                    redis::cmd("CLUSTER").arg("REPLICATE").arg(&self.ids[m]),
                );
            }
        }
        let expected_master: Vec<Option<&str>> = (0..self.nodes.len())
            .map(|i| {
                (i >= self.masters).then(|| {
                    let m = (i - self.masters) / replicas_per_master;
                    self.ids[m].as_str()
                })
            })
            .collect();
        self.settle("the cluster to come up", |c| {
            c.reachable().all(|i| {
                let state_ok = c.cluster_info(&mut probe, i).is_some_and(|info| {
                    info_field(&info, "cluster_state") == Some("ok")
                        && info_field(&info, "cluster_slots_ok") == Some("16384")
                });
                let roles_ok = c.view(&mut probe, i).is_some_and(|view| {
                    view.len() == c.nodes.len()
                        && view.iter().all(|e| {
                            let at = c.index_of_id(&e.id);
                            !e.is_unhealthy()
                                && at.is_some_and(|at| {
                                    e.master_id.as_deref() == expected_master[at]
                                        && e.is_master() == expected_master[at].is_none()
                                })
                        })
                });
                let link_ok = expected_master[i].is_none() || c.link_is_up(&mut probe, i);
                state_ok && roles_ok && link_ok
            })
        });
    }

    /// Every node, by index.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// For `kill` and `restart` (a restarted node keeps its node id and rejoins, empty).
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// The node id of node `i`.
    pub fn node_id(&self, i: usize) -> &str {
        &self.ids[i]
    }

    /// `redis://127.0.0.1:PORT` of every node: seeds for a cluster client.
    pub fn seed_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Indexes of the nodes that are running and not paused.
    pub fn reachable(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| is_reachable(&self.nodes[i]))
    }

    fn first_reachable(&self) -> usize {
        self.reachable()
            .next()
            .expect("no cluster node is running and unpaused")
    }

    fn index_of_id(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|x| x == id)
    }

    /// `CLUSTER NODES` as node `i` sees it.
    pub fn cluster_nodes(&self, i: usize) -> Vec<ClusterNodeEntry> {
        let text: String = must(self.nodes[i].port(), redis::cmd("CLUSTER").arg("NODES"));
        parse_cluster_nodes(&text)
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn key_slot(&self, key: &str) -> u16 {
        let port = self.nodes[self.first_reachable()].port();
        must(port, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
    }

    /// The index of the master serving `key`'s slot, as the first reachable node sees it.
    pub fn master_for_key(&self, key: &str) -> usize {
        self.master_for_slot(self.key_slot(key))
    }

    /// The index of the master serving `slot`, as the first reachable node sees it.
    pub fn master_for_slot(&self, slot: u16) -> usize {
        let viewer = self.first_reachable();
        let view = self.cluster_nodes(viewer);
        let entry = view
            .iter()
            .find(|e| e.is_master() && e.serves(slot))
            .unwrap_or_else(|| panic!("node {viewer} knows no master for slot {slot}"));
        self.index_of_id(&entry.id)
            .unwrap_or_else(|| panic!("slot {slot} is served by a stranger: {entry:?}"))
    }

    /// Indexes of the replicas of node `master`, sorted, as the first reachable node sees
    /// them (failed ones included).
    pub fn replicas_of(&self, master: usize) -> Vec<usize> {
        let view = self.cluster_nodes(self.first_reachable());
        let mut replicas: Vec<usize> = view
            .iter()
            .filter(|e| e.master_id.as_deref() == Some(self.ids[master].as_str()))
            .filter_map(|e| self.index_of_id(&e.id))
            .collect();
        replicas.sort_unstable();
        replicas
    }

    /// `CLUSTER FAILOVER FORCE` on node `replica`, then waits until it reports
    /// `role:master` and every reachable node says `cluster_state:ok` and names it master
    /// of its old master's slots; if the old master is reachable, also until every
    /// reachable node names the old master its replica and the old master's
    /// `master_link_status` is up.
    pub fn force_failover(&self, replica: usize) {
        let view = self.cluster_nodes(replica);
        let me = view
            .iter()
            .find(|e| e.has_flag("myself"))
            .expect("CLUSTER NODES has a myself line");
        let old_id = me
            .master_id
            .clone()
            .unwrap_or_else(|| panic!("node {replica} is not a replica: {me:?}"));
        let old = self.index_of_id(&old_id);
        let slots = view
            .iter()
            .find(|e| e.id == old_id)
            .map(|e| e.slots.clone())
            .unwrap_or_default();
        let port = self.nodes[replica].port();
        let reply: String = must(port, redis::cmd("CLUSTER").arg("FAILOVER").arg("FORCE"));
        assert_eq!(reply, "OK", "CLUSTER FAILOVER FORCE on node {replica}");

        let new_id = self.ids[replica].clone();
        let old_reachable = |c: &Self| old.is_some_and(|o| is_reachable(&c.nodes[o]));
        let mut probe = Probe::default();
        self.settle(&format!("node {replica} to take over as master"), |c| {
            let promoted = probe
                .info(port, "replication")
                .is_some_and(|info| info_field(&info, "role") == Some("master"));
            // Every node's own view, not only the two involved: the others learn the
            // change by gossip, later.
            let agreed = c.reachable().all(|i| {
                let state_ok = c
                    .cluster_info(&mut probe, i)
                    .is_some_and(|info| info_field(&info, "cluster_state") == Some("ok"));
                let view_ok = c.view(&mut probe, i).is_some_and(|view| {
                    let owner_ok = view.iter().any(|e| {
                        e.id == new_id && e.is_master() && e.slots == slots && !e.is_unhealthy()
                    });
                    let demoted = !old_reachable(c)
                        || view.iter().any(|e| {
                            e.id == old_id && e.master_id.as_deref() == Some(new_id.as_str())
                        });
                    owner_ok && demoted
                });
                state_ok && view_ok
            });
            let relinked = match old {
                Some(o) if old_reachable(c) => c.link_is_up(&mut probe, o),
                _ => true,
            };
            promoted && agreed && relinked
        });
    }

    fn view(&self, probe: &mut Probe, i: usize) -> Option<Vec<ClusterNodeEntry>> {
        let text: String = probe.query(self.nodes[i].port(), redis::cmd("CLUSTER").arg("NODES"))?;
        Some(parse_cluster_nodes(&text))
    }

    fn cluster_info(&self, probe: &mut Probe, i: usize) -> Option<String> {
        probe.query(self.nodes[i].port(), redis::cmd("CLUSTER").arg("INFO"))
    }

    fn link_is_up(&self, probe: &mut Probe, i: usize) -> bool {
        probe
            .info(self.nodes[i].port(), "replication")
            .is_some_and(|info| info_field(&info, "master_link_status") == Some("up"))
    }

    /// Polls `done` until it holds; panics after [`TOPOLOGY_TIMEOUT`] with [`describe`].
    ///
    /// [`describe`]: Self::describe
    fn settle(&self, what: &str, mut done: impl FnMut(&Self) -> bool) {
        settle_or_describe("cluster", what, || done(self), || self.describe());
    }

    /// Every node's port, pid, role, cluster state, own `CLUSTER NODES` line and log tail:
    /// what a timed-out wait prints.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            out.push_str(&format!(
                "--- node {i} (port {}, pid {}, id {}) ---\n",
                node.port(),
                node.pid(),
                self.ids[i]
            ));
            if !is_reachable(node) {
                out.push_str("not running or paused\n");
            } else {
                let port = node.port();
                let info = query_once::<String>(port, redis::cmd("INFO").arg("replication"));
                let cinfo = query_once::<String>(port, redis::cmd("CLUSTER").arg("INFO"));
                let nodes = query_once::<String>(port, redis::cmd("CLUSTER").arg("NODES"));
                match (info, cinfo) {
                    (Ok(info), Ok(cinfo)) => out.push_str(&format!(
                        "role {:?}, master_link_status {:?}, cluster_state {:?}, slots_ok {:?}\n",
                        info_field(&info, "role"),
                        info_field(&info, "master_link_status"),
                        info_field(&cinfo, "cluster_state"),
                        info_field(&cinfo, "cluster_slots_ok"),
                    )),
                    (Err(e), _) | (_, Err(e)) => out.push_str(&format!("{e}\n")),
                }
                match nodes {
                    Ok(text) => out.push_str(&format!("CLUSTER NODES:\n{text}")),
                    Err(e) => out.push_str(&format!("{e}\n")),
                }
            }
            out.push_str(&format!("log:\n{}\n", node.log_tail(LOG_LINES)));
        }
        out
    }
}

impl std::fmt::Debug for RedisClusterTopology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClusterTopology")
            .field(
                "ports",
                &self.nodes.iter().map(RedisServer::port).collect::<Vec<_>>(),
            )
            .field("masters", &self.masters)
            .finish()
    }
}

/// One `redis-server CONF --sentinel` process with its own temp dir holding its config
/// file (which Sentinel rewrites), its log and its stdout/stderr.
pub struct SentinelProcess {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    pid: u32,
}

impl SentinelProcess {
    /// Starts a sentinel monitoring `service` at `127.0.0.1:master_port` with `quorum`;
    /// returns once it announced the monitor in its log and answers PING.
    fn start(bin: &Path, service: &str, master_port: u16, quorum: usize) -> SentinelProcess {
        let mut errors = Vec::new();
        for _ in 0..START_TRIES {
            let mut sentinel = SentinelProcess {
                port: free_port(),
                dir: make_temp_dir(),
                child: None,
                pid: 0,
            };
            match sentinel.spawn_ready(bin, service, master_port, quorum) {
                Ok(()) => return sentinel,
                // `sentinel` is dropped: its temp dir is removed.
                Err(e) => errors.push(format!("port {}: {e}", sentinel.port)),
            }
        }
        panic!(
            "redis sentinel did not start after {START_TRIES} tries:\n{}",
            errors.join("\n")
        );
    }

    fn spawn_ready(
        &mut self,
        bin: &Path,
        service: &str,
        master_port: u16,
        quorum: usize,
    ) -> Result<(), String> {
        let log = self.dir.join(SENTINEL_LOG);
        let conf = format!(
            "port {port}\n\
             bind 127.0.0.1\n\
             daemonize no\n\
             dir {dir}\n\
             logfile {log}\n\
             sentinel monitor {service} 127.0.0.1 {master_port} {quorum}\n\
             sentinel down-after-milliseconds {service} {down}\n\
             sentinel failover-timeout {service} {failover}\n\
             sentinel parallel-syncs {service} 1\n",
            port = self.port,
            dir = self.dir.display(),
            log = log.display(),
            down = SENTINEL_DOWN_AFTER.as_millis(),
            failover = SENTINEL_FAILOVER_TIMEOUT.as_millis(),
        );
        fs::write(self.config_path(), conf).map_err(|e| format!("write sentinel.conf: {e}"))?;
        let stdio_path = self.dir.join(SENTINEL_STDIO);
        let stdio = fs::File::create(&stdio_path).map_err(|e| format!("create stdio file: {e}"))?;
        let stdio2 = stdio
            .try_clone()
            .map_err(|e| format!("clone stdio file: {e}"))?;
        let child = Command::new(bin)
            .arg(self.config_path())
            .arg("--sentinel")
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(stdio)
            .stderr(stdio2)
            .spawn()
            .map_err(|e| format!("spawn {} --sentinel: {e}", bin.display()))?;
        self.pid = child.id();
        let child = self.child.insert(child);
        // Our own log names the monitor (so this process owns the port) and PING works.
        let monitor = format!("+monitor master {service} ");
        let start = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.child = None;
                    return Err(format!(
                        "sentinel exited: {status}\n--- log ---\n{}\n--- stdout/stderr ---\n{}",
                        file_tail(&log, 15),
                        file_tail(&stdio_path, 15)
                    ));
                }
                Ok(None) => {}
                Err(e) => return Err(format!("try_wait: {e}")),
            }
            let logged = fs::read_to_string(&log).is_ok_and(|t| t.contains(&monitor));
            if logged
                && raw_ping(self.port, PROBE_TIMEOUT).is_ok_and(|reply| reply.starts_with("+PONG"))
            {
                return Ok(());
            }
            if start.elapsed() > super::READY_TIMEOUT {
                return Err(format!(
                    "not ready within {:?}\n--- log ---\n{}",
                    super::READY_TIMEOUT,
                    file_tail(&log, 15)
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The pid of the current (or last) process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The config file Sentinel rewrites as it learns the topology.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join(SENTINEL_CONF)
    }

    /// The process exists and has not exited.
    pub fn is_running(&mut self) -> bool {
        let exited = match self.child.as_mut() {
            None => return false,
            Some(child) => !matches!(child.try_wait(), Ok(None)),
        };
        if exited {
            self.child = None;
        }
        !exited
    }

    /// SIGKILL + wait(); idempotent.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    /// SIGSTOP, as a stalled VM: the sentinel accepts connections and answers nothing.
    /// Returns once the process is seen stopped.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP, "stop", |state| state == 'T');
    }

    /// SIGCONT; returns once the process is no longer seen stopped.
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT, "continue", |state| state != 'T');
    }

    fn signal(&self, signal: Signal, what: &str, done: impl Fn(char) -> bool) {
        let pid = self.pid;
        send_signal(Pid::from_raw(pid as i32), signal)
            .unwrap_or_else(|e| panic!("{signal} sentinel {pid}: {e}"));
        super::wait_until(
            Duration::from_secs(5),
            &format!("sentinel to {what}"),
            || super::proc_state(pid).is_none_or(&done),
        );
    }

    /// Sync connection with [`super::ADMIN_TIMEOUT`] timeouts.
    pub fn conn(&self) -> redis::Connection {
        let client = redis::Client::open(self.url()).expect("sentinel URL");
        let conn = client
            .get_connection_with_timeout(super::ADMIN_TIMEOUT)
            .unwrap_or_else(|e| panic!("connect to sentinel {}: {e}", self.url()));
        conn.set_read_timeout(Some(super::ADMIN_TIMEOUT))
            .expect("set_read_timeout");
        conn.set_write_timeout(Some(super::ADMIN_TIMEOUT))
            .expect("set_write_timeout");
        conn
    }

    /// Last `lines` lines of the sentinel's log.
    pub fn log_tail(&self, lines: usize) -> String {
        file_tail(&self.dir.join(SENTINEL_LOG), lines)
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "sentinel on port {} (dir {}), last log lines:\n{}",
                self.port,
                self.dir.display(),
                self.log_tail(10)
            );
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl std::fmt::Debug for SentinelProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelProcess")
            .field("port", &self.port)
            .field("pid", &self.pid)
            .finish()
    }
}

/// One master with replicas (`--replicaof`), monitored by sentinels with quorum
/// `sentinels / 2 + 1`, `down-after-milliseconds` [`SENTINEL_DOWN_AFTER`],
/// `failover-timeout` [`SENTINEL_FAILOVER_TIMEOUT`] and `parallel-syncs 1`.
///
/// Servers are addressed by index: server 0 is the first master, `1..=replicas` its
/// replicas; roles move with failovers (see [`master_index`](Self::master_index)).
pub struct SentinelTopology {
    // Sentinels first: dropped (killed) before the servers they watch.
    sentinels: Vec<SentinelProcess>,
    servers: Vec<RedisServer>,
    service: String,
}

impl SentinelTopology {
    /// The service name the sentinels monitor.
    pub const SERVICE: &'static str = "quorum-lock-test";

    /// Starts the master and its replicas, waits until every replica's link is up, then
    /// starts the sentinels; returns once every sentinel reports the master's address,
    /// every replica (linked, `master-link-status` ok) and every other sentinel.
    pub fn start(replicas: usize, sentinels: usize) -> SentinelTopology {
        Self::start_with_master_args(replicas, sentinels, &[])
    }

    /// [`start`](Self::start), with `master_args` added to the first master's command line
    /// (say `--rename-command REPLICAOF ""`, which keeps the sentinels from demoting it).
    pub fn start_with_master_args(
        replicas: usize,
        sentinels: usize,
        master_args: &[&str],
    ) -> SentinelTopology {
        assert!(sentinels >= 1, "a sentinel topology needs a sentinel");
        let bin = next_server_bin(false);
        let node_extras = |more: &[String]| ServerExtras {
            extra_args: REPLICATION_ARGS
                .iter()
                .map(|a| a.to_string())
                .chain(more.iter().cloned())
                .collect(),
            bin: Some(bin.clone()),
            ..ServerExtras::default()
        };
        let master_args: Vec<String> = master_args.iter().map(|a| a.to_string()).collect();
        let master =
            RedisServer::start_extended(ServerOptions::default(), node_extras(&master_args));
        let replicaof = [
            "--replicaof".to_string(),
            "127.0.0.1".to_string(),
            master.port().to_string(),
        ];
        let mut servers = vec![master];
        for _ in 0..replicas {
            servers.push(RedisServer::start_extended(
                ServerOptions::default(),
                node_extras(&replicaof),
            ));
        }
        let mut topology = SentinelTopology {
            sentinels: Vec::new(),
            servers,
            service: Self::SERVICE.to_string(),
        };
        let mut probe = Probe::default();
        // Sentinels learn the replicas from the master's INFO: attach them first.
        topology.settle("the replicas to link to the master", |t| {
            let master_port = t.servers[0].port();
            let attached = probe.info(master_port, "replication").is_some_and(|info| {
                info_field(&info, "connected_slaves") == Some(replicas.to_string().as_str())
            });
            attached
                && t.servers[1..].iter().all(|s| {
                    probe
                        .info(s.port(), "replication")
                        .is_some_and(|info| info_field(&info, "master_link_status") == Some("up"))
                })
        });

        let quorum = sentinels / 2 + 1;
        let master_port = topology.servers[0].port();
        topology.sentinels = (0..sentinels)
            .map(|_| SentinelProcess::start(&bin, &topology.service, master_port, quorum))
            .collect();
        let replica_ports: Vec<u16> = topology.servers[1..]
            .iter()
            .map(RedisServer::port)
            .collect();
        topology.settle("the sentinels to agree on the topology", |t| {
            t.sentinels.iter().all(|s| {
                let others: Vec<u16> = t
                    .sentinels
                    .iter()
                    .map(SentinelProcess::port)
                    .filter(|&p| p != s.port())
                    .collect();
                t.reported_master(&mut probe, s.port())
                    == Some(SocketAddr::from(([127, 0, 0, 1], t.servers[0].port())))
                    && t.known_replicas(&mut probe, s.port()).is_some_and(|known| {
                        same_ports(&known, &replica_ports)
                            && known.iter().all(|r| {
                                r.get("flags").map(String::as_str) == Some("slave")
                                    && r.get("master-link-status").map(String::as_str) == Some("ok")
                            })
                    })
                    && t.known_sentinels(&mut probe, s.port())
                        .is_some_and(|known| {
                            same_ports(&known, &others)
                                && known
                                    .iter()
                                    .all(|r| r.get("flags").map(String::as_str) == Some("sentinel"))
                        })
            })
        });
        topology
    }

    pub fn service(&self) -> &str {
        &self.service
    }

    /// Every sentinel's address.
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(SentinelProcess::addr).collect()
    }

    /// `redis://127.0.0.1:PORT` of every sentinel.
    /// The `redis+sentinel://` URL of this topology as one quorum member.
    pub fn member_url(&self) -> String {
        let sentinels: Vec<String> = (self.sentinel_addrs().iter())
            .map(|a| a.to_string())
            .collect();
        format!("redis+sentinel://{}/{}", sentinels.join(","), self.service)
    }

    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(SentinelProcess::url).collect()
    }

    pub fn sentinels(&self) -> &[SentinelProcess] {
        &self.sentinels
    }

    /// For `kill`.
    pub fn sentinel_mut(&mut self, i: usize) -> &mut SentinelProcess {
        &mut self.sentinels[i]
    }

    /// Every data node: 0 is the first master, then the replicas.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    pub fn server(&self, i: usize) -> &RedisServer {
        &self.servers[i]
    }

    /// For `kill` and `restart`.
    pub fn server_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.servers[i]
    }

    /// `SENTINEL get-master-addr-by-name` on the first sentinel that answers.
    pub fn master_addr(&self) -> SocketAddr {
        let mut probe = Probe::default();
        self.sentinels
            .iter()
            .find_map(|s| self.reported_master(&mut probe, s.port()))
            .unwrap_or_else(|| panic!("no sentinel reports a master\n{}", self.describe()))
    }

    /// The index of the server at [`master_addr`](Self::master_addr).
    pub fn master_index(&self) -> usize {
        let addr = self.master_addr();
        self.index_of_port(addr.port())
            .unwrap_or_else(|| panic!("the sentinels report a stranger as master: {addr}"))
    }

    fn index_of_port(&self, port: u16) -> Option<usize> {
        self.servers.iter().position(|s| s.port() == port)
    }

    /// `SENTINEL FAILOVER` on the first sentinel that answers, then waits until every
    /// sentinel that answers reports the same new master address and that server says
    /// `role:master`; returns the new master's index. The old master stays a master until
    /// a sentinel converts it to a replica, some seconds later.
    pub fn failover(&self) -> usize {
        let old = self.master_addr();
        // A sentinel that stalls after accepting (TILT mode, entered when its timers jump on
        // a loaded host, keeps it from acting for 30 s) does not fail over: after a while,
        // the next sentinel is asked, which forces a failover of its own.
        for first in 0..self.sentinels.len() {
            self.ask_failover(first);
            let mut probe = Probe::default();
            let mut new = None;
            if poll(FAILOVER_PATIENCE, || {
                new = self.moved_master(&mut probe, old);
                new.is_some()
            }) {
                return new.expect("polled until known");
            }
        }
        self.await_new_master(old)
    }

    /// Sends `SENTINEL FAILOVER` to the sentinels from index `first` on, until one accepts.
    fn ask_failover(&self, first: usize) {
        let mut errors = Vec::new();
        let accepted = (self.sentinels.iter().cycle().skip(first))
            .take(self.sentinels.len())
            .any(|s| {
                match query_once::<String>(
                    s.port(),
                    redis::cmd("SENTINEL").arg("FAILOVER").arg(&self.service),
                ) {
                    Ok(reply) => reply == "OK",
                    Err(e) => {
                        errors.push(e);
                        false
                    }
                }
            });
        assert!(
            accepted,
            "no sentinel accepted SENTINEL FAILOVER: {errors:?}"
        );
    }

    /// The new master's index once every sentinel that answers reports the same master
    /// address other than `old` and that server says `role:master`.
    fn moved_master(&self, probe: &mut Probe, old: SocketAddr) -> Option<usize> {
        let reports: Vec<Option<SocketAddr>> = (self.sentinels.iter())
            .map(|s| self.reported_master(probe, s.port()))
            .collect();
        let answered: Vec<SocketAddr> = reports.iter().flatten().copied().collect();
        let &addr = answered.first()?;
        if addr == old || answered.iter().any(|&a| a != addr) {
            return None;
        }
        let new = self.index_of_port(addr.port())?;
        probe
            .info(self.servers[new].port(), "replication")
            .is_some_and(|info| info_field(&info, "role") == Some("master"))
            .then_some(new)
    }

    /// Waits until every sentinel that answers reports the same master address other than
    /// `old` and that server says `role:master` (the sentinels failed over, asked to or
    /// because `old` stopped answering); returns the new master's index.
    pub fn await_new_master(&self, old: SocketAddr) -> usize {
        let mut probe = Probe::default();
        let mut new = None;
        self.settle(
            &format!("the sentinels to move the master away from {old}"),
            |t| {
                new = t.moved_master(&mut probe, old);
                new.is_some()
            },
        );
        new.expect("settled on a known server")
    }

    /// Waits until every sentinel reports a replica of the current master that is linked
    /// (`master-link-status` ok) and not the old master still acting alone: a next
    /// [`failover`](Self::failover) then has a replica to promote.
    pub fn wait_replicated(&self) {
        let mut probe = Probe::default();
        let master = self.master_addr();
        self.settle("a replica to follow the new master", |t| {
            t.sentinels.iter().all(|s| {
                t.reported_master(&mut probe, s.port()) == Some(master)
                    && t.known_replicas(&mut probe, s.port()).is_some_and(|known| {
                        known.iter().any(|r| {
                            r.get("flags").map(String::as_str) == Some("slave")
                                && r.get("master-link-status").map(String::as_str) == Some("ok")
                        })
                    })
            })
        });
    }

    fn reported_master(&self, probe: &mut Probe, sentinel_port: u16) -> Option<SocketAddr> {
        let reply: Option<Vec<String>> = probe.query(
            sentinel_port,
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&self.service),
        )?;
        match reply?.as_slice() {
            [ip, port] => format!("{ip}:{port}").parse().ok(),
            _ => None,
        }
    }

    fn known_replicas(
        &self,
        probe: &mut Probe,
        sentinel_port: u16,
    ) -> Option<Vec<HashMap<String, String>>> {
        probe.query(
            sentinel_port,
            redis::cmd("SENTINEL").arg("REPLICAS").arg(&self.service),
        )
    }

    fn known_sentinels(
        &self,
        probe: &mut Probe,
        sentinel_port: u16,
    ) -> Option<Vec<HashMap<String, String>>> {
        probe.query(
            sentinel_port,
            redis::cmd("SENTINEL").arg("SENTINELS").arg(&self.service),
        )
    }

    /// Polls `done` until it holds; panics after [`TOPOLOGY_TIMEOUT`] with [`describe`].
    ///
    /// [`describe`]: Self::describe
    fn settle(&self, what: &str, mut done: impl FnMut(&Self) -> bool) {
        settle_or_describe("sentinel", what, || done(self), || self.describe());
    }

    /// Every server's role and every sentinel's view, with log tails: what a timed-out
    /// wait prints.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (i, server) in self.servers.iter().enumerate() {
            out.push_str(&format!(
                "--- server {i} (port {}, pid {}) ---\n",
                server.port(),
                server.pid()
            ));
            if !is_reachable(server) {
                out.push_str("not running or paused\n");
            } else {
                match query_once::<String>(server.port(), redis::cmd("INFO").arg("replication")) {
                    Ok(info) => out.push_str(&format!(
                        "role {:?}, master_port {:?}, master_link_status {:?}, connected_slaves {:?}\n",
                        info_field(&info, "role"),
                        info_field(&info, "master_port"),
                        info_field(&info, "master_link_status"),
                        info_field(&info, "connected_slaves"),
                    )),
                    Err(e) => out.push_str(&format!("{e}\n")),
                }
            }
            out.push_str(&format!("log:\n{}\n", server.log_tail(LOG_LINES)));
        }
        let mut probe = Probe::default();
        for (i, s) in self.sentinels.iter().enumerate() {
            out.push_str(&format!(
                "--- sentinel {i} (port {}, pid {}) ---\nmaster {:?}\nreplicas {:?}\nsentinels {:?}\nlog:\n{}\n",
                s.port(),
                s.pid(),
                self.reported_master(&mut probe, s.port()),
                self.known_replicas(&mut probe, s.port()),
                self.known_sentinels(&mut probe, s.port()),
                s.log_tail(LOG_LINES)
            ));
        }
        out
    }
}

impl std::fmt::Debug for SentinelTopology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelTopology")
            .field("service", &self.service)
            .field(
                "servers",
                &self
                    .servers
                    .iter()
                    .map(RedisServer::port)
                    .collect::<Vec<_>>(),
            )
            .field("sentinels", &self.sentinels)
            .finish()
    }
}

/// The `port` fields of `entries` (a `SENTINEL REPLICAS`/`SENTINELS` reply) are exactly
/// `ports`, in any order.
fn same_ports(entries: &[HashMap<String, String>], ports: &[u16]) -> bool {
    let mut seen: Vec<u16> = entries
        .iter()
        .filter_map(|e| e.get("port")?.parse().ok())
        .collect();
    let mut want = ports.to_vec();
    seen.sort_unstable();
    want.sort_unstable();
    seen == want && seen.len() == entries.len()
}
