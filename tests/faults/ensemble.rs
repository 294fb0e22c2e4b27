//! The nodes under test and the faults that can be applied to one of them.
//!
//! [`Ensemble`] is implemented by [`LocalEnsemble`] (local `redis-server` processes, each
//! behind a [`FaultProxy`]) and by the Docker tier's ensemble in `tests/faults_docker.rs`
//! (containers driven through `docker/fault.sh`), so the nemesis and the deterministic
//! scenarios run unchanged on both.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::{
    CLOCKSHIFT_REFRESH, ClockFile, RedisServer, ServerExtras, ServerOptions,
    server_clock_offset_ms, wait_until,
};

use super::proxy::{FaultProxy, Link};

/// How a partition shows itself to clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Nothing arrives, nothing is refused: requests hang until the client's timeout.
    Silent,
    /// Connections are closed and refused: requests fail at once.
    Reset,
}

/// One fault on one node. `inject` starts it, `heal` ends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGSTOP / `docker pause`; healed by SIGCONT / `docker unpause`.
    Pause,
    /// SIGKILL / `docker kill`; healed by starting the node again (with its data if it
    /// persists, empty otherwise).
    Kill,
    /// Cut the node off (proxy, or `docker network disconnect`); healed by reconnecting
    /// (with the same address).
    Partition(Cut),
    /// Packets to the node dropped inside its network namespace (`iptables DROP`, Docker
    /// tier, root only).
    Drop,
    /// Replies delayed by this much (proxy).
    Delay(Duration),
    /// The node's wall clock jumps forward by this much (clock shim); healed by setting it
    /// back.
    ClockJump(Duration),
    /// A member under Sentinel fails over (`SENTINEL FAILOVER`): a replica becomes its
    /// master. Healed once a replica follows the new master again.
    Failover,
    /// The host of a member's master stalls with everything on it (Docker tier: the
    /// master's container, with the sentinel that runs beside it, is frozen) until the
    /// member fails over; healed by thawing it.
    HostStall,
    /// The slots a Cluster member's locks use move to another of its shard masters with
    /// their keys (`MIGRATE`, Docker tier); healed by moving them back.
    SlotMove,
}

impl Fault {
    pub fn label(&self) -> String {
        match self {
            Fault::Pause => "pause".into(),
            Fault::Kill => "kill".into(),
            Fault::Partition(Cut::Silent) => "cut(silent)".into(),
            Fault::Partition(Cut::Reset) => "cut(reset)".into(),
            Fault::Drop => "drop".into(),
            Fault::Delay(d) => format!("delay {}ms", d.as_millis()),
            Fault::ClockJump(d) => format!("clock +{}ms", d.as_millis()),
            Fault::Failover => "failover".into(),
            Fault::HostStall => "host-stall".into(),
            Fault::SlotMove => "slot-move".into(),
        }
    }
}

/// N Redis nodes that faults can be applied to.
pub trait Ensemble {
    fn size(&self) -> usize;
    /// The URLs lock clients use (through proxies where the ensemble has them).
    fn client_urls(&self) -> Vec<String>;
    /// A direct URL of node `i` for administration (never through a proxy).
    fn admin_url(&self, i: usize) -> String;
    /// Starts `fault` on node `i`; returns once it is in place.
    fn inject(&mut self, i: usize, fault: &Fault);
    /// Ends `fault` on node `i`; returns once the node serves again.
    fn heal(&mut self, i: usize, fault: &Fault);
    /// Whether this ensemble can apply `fault` at all.
    fn supports(&self, fault: &Fault) -> bool;

    /// A sync connection to node `i` with 5 s timeouts.
    fn admin(&self, i: usize) -> redis::Connection {
        admin_conn(&self.admin_url(i))
    }

    /// Whether a lock client has admitted node `i` in its current life: the node's marker
    /// (`quorum-lock:node:marker` = `<run_id>:<complete>`, written by the client that
    /// admits it, DESIGN.md section 7) names the `run_id` the node reports now. A node
    /// restarted empty has no marker until its quarantine is over and a client counted it.
    fn admitted(&self, i: usize) -> bool {
        let mut conn = self.admin(i);
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("INFO on node {}: {e}", i + 1));
        let run_id = info
            .lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .map(str::trim)
            .expect("run_id in INFO");
        let marker: Option<String> = redis::cmd("GET")
            .arg(MARKER)
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("GET marker on node {}: {e}", i + 1));
        marker.is_some_and(|m| m.split(':').next() == Some(run_id))
    }

    /// `uptime_in_seconds` of node `i`.
    fn uptime_secs(&self, i: usize) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut self.admin(i))
            .unwrap_or_else(|e| panic!("INFO on node {}: {e}", i + 1));
        info.lines()
            .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("uptime_in_seconds in INFO")
    }
}

/// The node marker's key, for clients without a key prefix (all of this suite's).
pub const MARKER: &str = "quorum-lock:node:marker";

/// A sync admin connection with 5 s connect, read and write timeouts.
pub fn admin_conn(url: &str) -> redis::Connection {
    let timeout = Duration::from_secs(5);
    let client = redis::Client::open(url).unwrap_or_else(|e| panic!("client {url}: {e}"));
    let conn = client
        .get_connection_with_timeout(timeout)
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    conn.set_read_timeout(Some(timeout)).expect("read timeout");
    conn.set_write_timeout(Some(timeout))
        .expect("write timeout");
    conn
}

/// Node `url`'s wall clock minus ours, in milliseconds, from one `TIME` round trip
/// (assuming the node read its clock halfway through), and the round trip.
pub fn clock_offset_ms(url: &str) -> (f64, Duration) {
    let mut conn = admin_conn(url);
    let sent = std::time::SystemTime::now();
    let start = std::time::Instant::now();
    let (secs, micros): (i64, i64) = redis::cmd("TIME")
        .query(&mut conn)
        .unwrap_or_else(|e| panic!("TIME on {url}: {e}"));
    let rtt = start.elapsed();
    let local = sent
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
        + rtt.as_secs_f64() / 2.0;
    let remote = secs as f64 + micros as f64 / 1e6;
    ((remote - local) * 1e3, rtt)
}

/// Whether node `url`'s clock is `want_ms` off ours, give or take 100 ms plus the round
/// trip.
pub fn clock_near(url: &str, want_ms: f64) -> bool {
    let (got, rtt) = clock_offset_ms(url);
    (got - want_ms).abs() < 100.0 + rtt.as_secs_f64() * 1e3
}

/// What kind of local node to start.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeKind {
    /// `appendonly yes` + `appendfsync always`: keys survive SIGKILL.
    pub appendonly: bool,
    /// Run under the clockshift shim, so [`Fault::ClockJump`] works on it.
    pub shifted_clock: bool,
}

/// Local `redis-server` processes, optionally each behind a [`FaultProxy`].
pub struct LocalEnsemble {
    pub nodes: Vec<RedisServer>,
    /// When each node first served (common clock, taken once its start returned).
    pub started: Vec<u64>,
    proxies: Vec<FaultProxy>,
    clocks: Vec<Option<ClockFile>>,
}

impl LocalEnsemble {
    /// Starts one node per entry of `kinds`; with `proxies`, clients reach each node
    /// through its own proxy (needed for partitions and latency).
    pub fn start(kinds: &[NodeKind], proxies: bool) -> LocalEnsemble {
        let mut nodes = Vec::new();
        let mut started = Vec::new();
        let mut clocks = Vec::new();
        for kind in kinds {
            let clock = kind.shifted_clock.then(|| ClockFile::new(0));
            let extras = ServerExtras {
                clock_offset_file: clock.as_ref().map(|c| c.path().to_owned()),
                ..ServerExtras::default()
            };
            let opts = ServerOptions {
                appendonly: kind.appendonly,
                ..ServerOptions::default()
            };
            nodes.push(RedisServer::start_extended(opts, extras));
            started.push(super::clock::now());
            clocks.push(clock);
        }
        let proxies = if proxies {
            nodes
                .iter()
                .map(|n| FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], n.port()))))
                .collect()
        } else {
            Vec::new()
        };
        LocalEnsemble {
            nodes,
            started,
            proxies,
            clocks,
        }
    }

    /// `n` nodes of one kind.
    pub fn uniform(n: usize, kind: NodeKind, proxies: bool) -> LocalEnsemble {
        Self::start(&vec![kind; n], proxies)
    }

    fn proxy(&self, i: usize) -> &FaultProxy {
        self.proxies
            .get(i)
            .expect("this fault needs the ensemble started with proxies")
    }

    fn set_clock(&self, i: usize, offset: Duration) {
        let file = self.clocks[i]
            .as_ref()
            .expect("clock faults need a node started with shifted_clock");
        let ms = offset.as_millis() as i64;
        file.set(ms);
        let node = &self.nodes[i];
        wait_until(CLOCKSHIFT_REFRESH * 30, "the node's clock to move", || {
            let (got, rtt) = server_clock_offset_ms(node);
            (got - ms as f64).abs() < 100.0 + rtt.as_secs_f64() * 1e3
        });
    }
}

impl Ensemble for LocalEnsemble {
    fn size(&self) -> usize {
        self.nodes.len()
    }

    fn client_urls(&self) -> Vec<String> {
        if self.proxies.is_empty() {
            self.nodes.iter().map(RedisServer::url).collect()
        } else {
            self.proxies.iter().map(FaultProxy::url).collect()
        }
    }

    fn admin_url(&self, i: usize) -> String {
        self.nodes[i].url()
    }

    fn supports(&self, fault: &Fault) -> bool {
        match fault {
            Fault::Pause | Fault::Kill => true,
            Fault::Partition(_) | Fault::Delay(_) => !self.proxies.is_empty(),
            Fault::Drop | Fault::Failover | Fault::HostStall | Fault::SlotMove => false,
            Fault::ClockJump(_) => self.clocks.iter().any(Option::is_some),
        }
    }

    fn inject(&mut self, i: usize, fault: &Fault) {
        match fault {
            Fault::Pause => self.nodes[i].pause(),
            Fault::Kill => self.nodes[i].kill(),
            Fault::Partition(Cut::Silent) => self.proxy(i).set_link(Link::Blackhole),
            Fault::Partition(Cut::Reset) => self.proxy(i).set_link(Link::Reset),
            Fault::Delay(d) => self.proxy(i).set_delay(*d),
            Fault::ClockJump(d) => self.set_clock(i, *d),
            Fault::Drop => panic!("packet drops need the Docker tier"),
            Fault::Failover => panic!("failovers need members under Sentinel"),
            Fault::HostStall | Fault::SlotMove => panic!("{} needs the Docker tier", fault.label()),
        }
    }

    fn heal(&mut self, i: usize, fault: &Fault) {
        match fault {
            Fault::Pause => {
                if self.nodes[i].is_paused() {
                    self.nodes[i].resume();
                }
            }
            Fault::Kill => self.nodes[i].restart(),
            Fault::Partition(_) => self.proxy(i).set_link(Link::Up),
            Fault::Delay(_) => self.proxy(i).set_delay(Duration::ZERO),
            Fault::ClockJump(_) => self.set_clock(i, Duration::ZERO),
            Fault::Drop | Fault::Failover | Fault::HostStall | Fault::SlotMove => {}
        }
    }
}
