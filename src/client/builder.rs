//! Configuration: a by-value builder that validates everything at [`RedlockBuilder::build`].

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::io::tcp::TcpSettings;
use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::client::Redlock;
use crate::client::cluster_url::{ClusterUrl, cluster_member};
use crate::client::sentinel_url::{SentinelUrl, sentinel_member};
use crate::ensemble::Ensemble;
use crate::ensemble::config::{Config, MAX_TTL, check_ceiling, check_ttl};
use crate::error::{Error, Result};
use crate::net::cluster::ClusterMember;
use crate::net::coalesce::Yield;
use crate::net::member::{Member, PlainServer};
use crate::net::node::Node;
use crate::net::replica_acks::ReplicaAcks;
use crate::net::shard::{ShardCluster, ShardMaster};
use crate::protocol::{holder, slots};
use crate::rules::retry::RetryPolicy;

/// The highest [`RedlockBuilder::fence_floor`]: tokens stay at most 2^53, the largest
/// integer the nodes' Lua numbers hold exactly.
const MAX_FENCE_FLOOR: u64 = (1 << 53) - 1;

/// Builds a [`Redlock`]. Setters never fail; [`build`](Self::build) reports the first
/// problem with a message that says what to fix.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build()` is called"]
pub struct RedlockBuilder {
    nodes: Vec<NodeSpec>,
    /// The first bad input of a setter, returned by `build()`.
    error: Option<String>,
    key_prefix: String,
    drift_factor: f64,
    node_timeout: Duration,
    connect_timeout: Duration,
    retry: RetryPolicy,
    wait: Duration,
    max_attempts: Option<u32>,
    default_ttl: Duration,
    ttl_ceiling: Duration,
    tls_root_cert: Option<Vec<u8>>,
    notifications: bool,
    quarantine: bool,
    native_commands: bool,
    fence_floor: Option<u64>,
    holder_info: bool,
    holder_program: Option<String>,
    tcp_nodelay: bool,
    replica_acks: Option<ReplicaAcks>,
}

impl Default for RedlockBuilder {
    fn default() -> Self {
        RedlockBuilder {
            nodes: Vec::new(),
            error: None,
            key_prefix: String::new(),
            drift_factor: Self::DEFAULT_DRIFT_FACTOR,
            node_timeout: Self::DEFAULT_NODE_TIMEOUT,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            retry: RetryPolicy::default(),
            wait: Self::DEFAULT_WAIT,
            max_attempts: None,
            default_ttl: Self::DEFAULT_TTL,
            ttl_ceiling: Self::DEFAULT_TTL_CEILING,
            tls_root_cert: None,
            notifications: true,
            quarantine: true,
            native_commands: true,
            fence_floor: None,
            holder_info: true,
            holder_program: None,
            tcp_nodelay: true,
            replica_acks: None,
        }
    }
}

impl RedlockBuilder {
    /// Default [`drift_factor`](Self::drift_factor): 0.01.
    pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
    /// Default [`node_timeout`](Self::node_timeout): 50 ms.
    pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);

    /// The largest [`node_timeout`](Self::node_timeout) accepted: 500 ms.
    pub const MAX_NODE_TIMEOUT: Duration = Duration::from_millis(500);
    /// Default [`connect_timeout`](Self::connect_timeout): 500 ms.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
    /// Default [`wait`](Self::wait): 10 s.
    pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);
    /// Default [`default_ttl`](Self::default_ttl): 30 s.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
    /// Default [`ttl_ceiling`](Self::ttl_ceiling): 60 s.
    pub const DEFAULT_TTL_CEILING: Duration = Duration::from_secs(60);

    /// Adds Redis nodes by URL: `redis://[user:password@]host[:port][/db]` or `rediss://…`
    /// for TLS. Each must be an independent master; listing one server twice is rejected
    /// because it would let one server cast two votes.
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.nodes
            .extend((urls.into_iter()).map(|u| NodeSpec::Url(u.as_ref().trim().to_owned())));
        self
    }

    /// The environment variable [`nodes_from_env`](Self::nodes_from_env) reads, as the CLI
    /// does: `QUORUM_LOCK_NODES`.
    pub const NODES_ENV: &'static str = "QUORUM_LOCK_NODES";

    /// Splits a comma-separated node list (`redis://a:6379, redis://b:6379`) into URLs,
    /// trimmed, empty entries dropped: the format of [`NODES_ENV`](Self::NODES_ENV) and of
    /// the CLI's `--nodes`. A Sentinel member's URL lists its sentinels with commas
    /// (`redis+sentinel://s1:26379,s2:26379/service`), a Cluster member's its seeds
    /// (`redis+cluster://h1:7000,h2:7000`): an entry without a scheme that follows one
    /// continues it.
    pub fn parse_node_list(list: &str) -> Vec<String> {
        let mut urls: Vec<String> = Vec::new();
        for entry in (list.split(',').map(str::trim)).filter(|u| !u.is_empty()) {
            match urls.last_mut() {
                Some(last)
                    if !entry.contains("://")
                        && (SentinelUrl::is_sentinel(last) || ClusterUrl::is_cluster(last)) =>
                {
                    last.push(',');
                    last.push_str(entry);
                }
                _ => urls.push(entry.to_owned()),
            }
        }
        urls
    }

    /// Adds the nodes listed in the environment variable `QUORUM_LOCK_NODES` (see
    /// [`parse_node_list`](Self::parse_node_list)). A variable that is unset, empty or not
    /// UTF-8 makes [`build`](Self::build) fail, saying so.
    pub fn nodes_from_env(mut self) -> Self {
        match std::env::var(Self::NODES_ENV) {
            Ok(list) if !Self::parse_node_list(&list).is_empty() => {
                self.nodes(Self::parse_node_list(&list))
            }
            Ok(_) => {
                self.fail(format!("{} lists no node", Self::NODES_ENV));
                self
            }
            Err(std::env::VarError::NotPresent) => {
                self.fail(format!("{} is not set", Self::NODES_ENV));
                self
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                self.fail(format!("{} is not valid UTF-8", Self::NODES_ENV));
                self
            }
        }
    }

    /// Adds a node from an existing [`redis::Client`] (its connection info: address,
    /// credentials, database, TLS), for applications that already configure one. The
    /// builder's own TCP settings (no Nagle, a user timeout) and TLS root still apply.
    pub fn node_client(self, client: &Client) -> Self {
        self.node_connection_info(client.get_connection_info().clone())
    }

    /// Adds a node from a [`redis::ConnectionInfo`]; see [`node_client`](Self::node_client).
    pub fn node_connection_info(mut self, info: ConnectionInfo) -> Self {
        self.nodes.push(NodeSpec::Info(Box::new(info)));
        self
    }

    /// Keeps the first problem for `build()`.
    fn fail(&mut self, msg: String) {
        self.error.get_or_insert(msg);
    }

    /// Adds one node by URL. See [`nodes`](Self::nodes).
    pub fn node(self, url: impl AsRef<str>) -> Self {
        self.nodes([url])
    }

    /// A prefix put in front of every resource name to form its key. Default: none, so the
    /// key of resource `R` is exactly `R` and the lock excludes other Redlock clients
    /// (redsync, node-redlock, redis-py) that lock the same name.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Fraction of the TTL set aside for clock drift between nodes; the allowance is
    /// `ttl * drift_factor + 2 ms`. Must lie in `[0, 1)`. Default: 0.01.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// Upper bound on one request to one node, including any wait for its connection.
    /// A node that does not answer in time counts as a failed vote for that attempt; keep
    /// it small against the TTL: a TTL not above it is a configuration error. With restart
    /// quarantine on (the default), at most 500 ms
    /// ([`MAX_NODE_TIMEOUT`](Self::MAX_NODE_TIMEOUT)): the quarantine relies on two
    /// clients' rounds together lasting less than its shortest period, a second.
    /// Default: 50 ms.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Upper bound on establishing one node's connection (TCP, TLS, authentication).
    /// Connecting runs in the background, so a slow connect delays only that node's vote.
    /// `Duration::MAX` sets no limit. Default: 500 ms.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Delay before the first retry of a failed attempt; later retries double it up to
    /// [`max_retry_delay`](Self::max_retry_delay), each drawn at random from `[d/2, d]`.
    /// Zero retries immediately. Default: 10 ms.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry.base_delay = delay;
        self
    }

    /// Cap on any single retry delay. Default: 200 ms.
    pub fn max_retry_delay(mut self, delay: Duration) -> Self {
        self.retry.max_delay = delay;
        self
    }

    /// How long [`Redlock::lock`] keeps retrying before it gives up with
    /// [`Error::Timeout`]. It bounds when new attempts may start; the last attempt can
    /// take up to one [`node_timeout`](Self::node_timeout) more. Zero makes one attempt;
    /// `Duration::MAX` waits for ever.
    /// Can be changed per call with [`LockRequest::wait`](crate::LockRequest::wait).
    /// Default: 10 s.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Caps the number of attempts [`Redlock::lock`] makes (at least 1). Default: no cap;
    /// only [`wait`](Self::wait) bounds it.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// The TTL used by operations that take none explicitly. Validated at build against
    /// the drift allowance and the node timeout. Default: 30 s.
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.default_ttl = ttl;
        self
    }

    /// Release notifications. When on (the default), a waiting [`Redlock::lock`] joins the
    /// key's waiting list from its first refused attempt on (a lock nobody else holds
    /// costs nothing more), and a release wakes the client at its head alone, through
    /// pub/sub (`<prefix>quorum-lock:wake:<client id>`, one connection per node, opened on the
    /// client's first contended wait), and gives it the turn: the other waiters' polls
    /// leave the lock to it. Polling with backoff remains the fallback (expiry announces
    /// nothing, messages can be lost); a waiter known to be in the list polls from four
    /// times the [retry delay](Self::retry_delay) on. Off: releases announce nothing,
    /// waiters only poll.
    /// Clients sharing resources should agree on this setting.
    pub fn notifications(mut self, on: bool) -> Self {
        self.notifications = on;
        self
    }

    /// The longest TTL any client of these nodes uses (default 60 s): a lock or extension
    /// with a longer TTL fails with [`Error::Config`](crate::Error::Config), and so does
    /// [`build`](Self::build) when [`default_ttl`](Self::default_ttl) is longer. Restart
    /// quarantine needs a bound on the TTL of a lease it cannot see: when a node's history
    /// cannot be read (a new deployment with a node down, most nodes restarted), a node
    /// that may have lost its memory votes once it has run for the ceiling plus drift.
    /// Every client of the same nodes must use the same ceiling (no TTL above any client's
    /// ceiling: a client with a larger one could outlive another's quarantine); long
    /// critical sections keep a short TTL and extend it (`LockRequest::auto_extend`).
    pub fn ttl_ceiling(mut self, ceiling: Duration) -> Self {
        self.ttl_ceiling = ceiling;
        self
    }

    /// Restart quarantine (on by default): a node that may have lost locks still in force
    /// does not vote until they have all ended. Every acquisition keeps, on every node, the
    /// ensemble's longest TTL (raised with the `SET NX`), and each node carries a marker
    /// naming the process (`run_id`) in which a client admitted it. A node whose marker is
    /// gone or names another process (it restarted without `appendfsync always`) is kept
    /// out until it has run for the ensemble's longest TTL plus drift, whichever client
    /// used that TTL; its uptime is rounded down. Fresh nodes of a new ensemble (no node
    /// has a record or marker, and all answered) and nodes that did not restart vote at
    /// once. A node whose `run_id` or uptime is unknown (`INFO` refused) does not vote.
    /// The report shows a vote kept out as [`NodeOutcome::Quarantined`], with why and for
    /// how long. Cost: once every node was seen admitted with a record covering the TTL,
    /// an acquisition is the plain `SET NX PX`; before that (per node and process, and per
    /// larger TTL) it is a script. Turn this off only where every node persists with
    /// `appendfsync always`; a client with it off neither raises the record nor reads it.
    ///
    /// [`NodeOutcome::Quarantined`]: crate::NodeOutcome::Quarantined
    pub fn restart_quarantine(mut self, on: bool) -> Self {
        self.quarantine = on;
        self
    }

    /// Native compare-and-delete and compare-and-set (on by default). On every (re)connect
    /// the client asks each node whether it has `DELIFEQ` (`COMMAND INFO`) and
    /// `SET ... IFEQ` (`COMMAND DOCS SET`), as Valkey 9 does, and uses them in place of the
    /// Lua scripts where they have exactly the scripts' effect: `DELIFEQ` for a release of
    /// a single-resource lock that wakes nobody (notifications off, or the clean-up of a
    /// failed attempt), `SET ... IFEQ ... PX` for extending a single-resource lock. Other
    /// nodes, multi-resource locks and releases that wake waiters keep the scripts, so a
    /// mixed ensemble uses each node's best path. A node whose ACL refuses `DELIFEQ` gets
    /// the script right after the refusal. Off: the scripts everywhere (saves that extra
    /// round trip under such an ACL).
    pub fn native_commands(mut self, on: bool) -> Self {
        self.native_commands = on;
        self
    }

    /// Every fencing token this client mints is above `floor` (default: none). Tokens are
    /// at least the client's wall clock in microseconds since the Unix epoch (about 1.8 ×
    /// 10^15), so a floor matters only to continue a sequence of larger numbers (a store
    /// that fenced on them before): set it to the highest token that store accepted. Below
    /// 2^53: tokens stay at most 2^53, the largest integer the nodes' scripts count
    /// exactly.
    pub fn fence_floor(mut self, floor: u64) -> Self {
        self.fence_floor = Some(floor);
        self
    }

    /// Votes of Sentinel and Cluster members confirmed on replicas (off by default): a
    /// write that a vote rests on (an acquisition, an extension, a fencing token's commit)
    /// counts only once `WAIT replicas timeout` reports that at least `replicas` of its
    /// master's replicas acknowledged it. A failover that promotes one of those replicas
    /// then keeps the holder's copy, so the lock's holder keeps its majority through it.
    /// Plain members are unaffected: nothing promotes their replicas.
    ///
    /// What it does not cover: replication stays asynchronous. A write that `WAIT` did not
    /// confirm in time still ran on the master (its vote only does not count), and a
    /// failover may promote a replica that had not acknowledged yet (one of several, or
    /// one that lags); so a promoted master still sits out its restart quarantine before
    /// it votes for a new holder. While `WAIT` waits, the server holds back the
    /// connection's other requests, so a master whose replicas are all down delays every
    /// request to it by `timeout` and gives no vote: the timeout must be shorter than the
    /// [`node_timeout`](Self::node_timeout) (checked by [`build`](Self::build)), and a
    /// few milliseconds suffice on a local network. Cost: one more round trip to the
    /// master, plus its replicas' acknowledgement, per vote.
    pub fn replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_acks = Some(ReplicaAcks { replicas, timeout });
        self
    }

    /// Whether the value of every lock key this client sets describes the holder for
    /// operators: host name, process id and program (see [`HolderInfo`](crate::HolderInfo), shown by
    /// [`Redlock::status`] and `quorum-lock status`). Default: on. Off leaves those three
    /// out (for hosts whose names should not be readable by everyone who can read the
    /// keys); the time the lock was taken stays. Either way the value begins with the
    /// random token and every compare-and-delete compares the whole value.
    pub fn holder_info(mut self, on: bool) -> Self {
        self.holder_info = on;
        self
    }

    /// The program named in the holder description (see [`holder_info`](Self::holder_info)).
    /// Default: the file name of this process's executable. The CLI sets the command it
    /// runs. At most 40 characters are kept.
    pub fn holder_program(mut self, program: impl Into<String>) -> Self {
        self.holder_program = Some(program.into());
        self
    }

    /// Whether the node connections set `TCP_NODELAY`. Default: on, so every command is sent
    /// the moment it is written: a lock's latency is then the round trips alone.
    ///
    /// Off lets the kernel's Nagle algorithm hold a small command back while an earlier one
    /// on the same connection is unacknowledged, and send the held ones together. With many
    /// tasks sharing one client and small locks, that coalesces their commands into fewer
    /// packets and fewer wake-ups on both sides (measured here: 1.3-1.8x the lock + release
    /// rate of 16 tasks on one node, and 0.5-0.7x the client CPU per cycle), at a cost in
    /// latency: a command queued behind another waits up to a round trip, and with 16 tasks
    /// whose commands span several segments of a 1 500-byte MTU, lock + release took 1.5x
    /// longer at the median and 2-2.3x at p99 (no wait for a delayed acknowledgement was
    /// seen on Linux, which holds a short segment only while an earlier short one is
    /// unacknowledged; other kernels may wait tens of milliseconds). Latency comes off the
    /// lock's validity, so the default favours it; turn this off for throughput-bound
    /// clients with small locks, after measuring on your load.
    pub fn tcp_nodelay(mut self, on: bool) -> Self {
        self.tcp_nodelay = on;
        self
    }

    /// A PEM certificate (or bundle) to trust for `rediss://` nodes instead of the
    /// platform's roots, e.g. a private CA.
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_cert = Some(pem.into());
        self
    }

    /// Validates the configuration and creates the client. Cheap: no connection is made
    /// until the first request, and unreachable nodes never make this fail.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the first problem: no nodes, a malformed URL, a node listed
    /// twice, a drift factor outside `[0, 1)`, a zero timeout, a TTL too short to leave
    /// any validity, or zero attempts.
    pub fn build(self) -> Result<Redlock> {
        self.validate()?;
        let (nodes, clusters) = self.make_nodes()?;
        let holder = Arc::from(self.holder_description());
        let slotted = clusters.iter().any(Option::is_some);
        let config = Config {
            slotted,
            key_prefix: self.key_prefix,
            drift_factor: self.drift_factor,
            node_timeout: self.node_timeout,
            retry: self.retry,
            wait: self.wait,
            max_attempts: self.max_attempts,
            default_ttl: self.default_ttl,
            ttl_ceiling: self.ttl_ceiling,
            // Off with a Cluster member (see `RedlockBuilder::notifications`).
            notifications: self.notifications && !slotted,
            quarantine: self.quarantine,
            native_commands: self.native_commands,
            fence_floor: self.fence_floor,
            holder,
        };
        Ok(Redlock::from_ensemble(Ensemble::new(
            nodes,
            clusters,
            config,
            self.connect_timeout,
        )))
    }

    /// The first problem of the settings, as [`build`](Self::build) reports it.
    fn validate(&self) -> Result<()> {
        if let Some(msg) = &self.error {
            return Err(config(msg.clone()));
        }
        if self.nodes.is_empty() {
            return Err(config("no nodes given: add at least one redis:// URL"));
        }
        if !(self.drift_factor.is_finite() && (0.0..1.0).contains(&self.drift_factor)) {
            return Err(config(format!(
                "drift factor {} is outside [0, 1); the usual value is 0.01",
                self.drift_factor
            )));
        }
        if self.node_timeout.is_zero() {
            return Err(config(
                "node timeout is zero; use a few milliseconds or more",
            ));
        }
        if self.quarantine && self.node_timeout > Self::MAX_NODE_TIMEOUT {
            return Err(config(format!(
                "node timeout {:?} is above {:?}: restart quarantine relies on \
                 two clients' rounds together lasting less than a second",
                self.node_timeout,
                Self::MAX_NODE_TIMEOUT
            )));
        }
        if self.connect_timeout.is_zero() {
            return Err(config("connect timeout is zero; use 100 ms or more"));
        }
        if self.max_attempts == Some(0) {
            return Err(config("max attempts is zero; use at least 1"));
        }
        check_ttl(self.default_ttl, self.drift_factor, self.node_timeout)?;
        if self.ttl_ceiling.is_zero() || self.ttl_ceiling > MAX_TTL {
            return Err(config(format!(
                "ttl ceiling {:?} is outside (0, {MAX_TTL:?}]",
                self.ttl_ceiling
            )));
        }
        check_ceiling(self.default_ttl, self.ttl_ceiling)?;
        if let Some(acks) = self.replica_acks {
            self.check_replica_acks(acks)?;
        }
        if let Some(floor) = self.fence_floor.filter(|f| *f > MAX_FENCE_FLOOR) {
            return Err(config(format!(
                "fence floor {floor} is not below 2^53: tokens stay at most 2^53, the largest \
                 integer the nodes count exactly"
            )));
        }
        Ok(())
    }

    /// Whether [`replica_acks`](Self::replica_acks) can ever confirm a vote here.
    fn check_replica_acks(&self, acks: ReplicaAcks) -> Result<()> {
        if acks.replicas == 0 {
            return Err(config(
                "replica acks of 0 replicas confirm nothing; ask for at least 1",
            ));
        }
        if acks.timeout < Duration::from_millis(1) || acks.timeout >= self.node_timeout {
            return Err(config(format!(
                "replica ack timeout {:?} is outside [1ms, node timeout {:?}): a vote is \
                 read within the node timeout, and WAIT counts whole milliseconds",
                acks.timeout, self.node_timeout
            )));
        }
        let promotable = |spec: &NodeSpec| {
            matches!(spec, NodeSpec::Url(url)
                if SentinelUrl::is_sentinel(url) || ClusterUrl::is_cluster(url))
        };
        if !self.nodes.iter().any(promotable) {
            return Err(config(
                "replica acks apply to Sentinel and Cluster members, and no node is one: \
                 nothing promotes a plain node's replica",
            ));
        }
        Ok(())
    }

    /// One node per listed member, refusing a member listed twice; for a Cluster member
    /// also the member itself (its node is at its first seed).
    fn make_nodes(&self) -> Result<Members> {
        let mut seen = HashSet::new();
        let mut nodes = Vec::with_capacity(self.nodes.len());
        let mut clusters = Vec::with_capacity(self.nodes.len());
        let coalescing = Yield::for_nodes(self.nodes.len());
        for spec in &self.nodes {
            let mut cluster = None;
            let (name, member) = match spec {
                NodeSpec::Url(url) if SentinelUrl::is_sentinel(url) => self.sentinel_for(url)?,
                NodeSpec::Url(url) if ClusterUrl::is_cluster(url) => {
                    let (name, member, made) = self.cluster_for(url, coalescing)?;
                    cluster = Some(made);
                    (name, member)
                }
                NodeSpec::Url(url) => self.client_for(url).map(server)?,
                NodeSpec::Info(info) => {
                    let shown = info.addr().to_string();
                    self.client_for_info((**info).clone(), &shown).map(server)?
                }
            };
            if !seen.insert(name.clone()) {
                return Err(config(format!(
                    "node {name} is listed twice; each node must be a distinct Redis \
                     master or it would vote twice"
                )));
            }
            let acks = self.replica_acks.filter(|_| member.fails_over());
            nodes.push(Arc::new(
                Node::new(
                    name,
                    member,
                    self.connect_timeout,
                    coalescing,
                    Arc::from(self.key_prefix.as_str()),
                )
                .with_replica_acks(acks),
            ));
            clusters.push(cluster);
        }
        Ok((nodes, clusters))
    }

    /// A display name, the member's node (at its first seed) and the member for one
    /// `redis+cluster://` URL.
    fn cluster_for(
        &self,
        url: &str,
        coalescing: Yield,
    ) -> Result<(String, Member, Arc<ClusterMember>)> {
        let shown = redact(url);
        let parsed = ClusterUrl::parse(url)
            .map_err(|e| config(format!("malformed Cluster member URL {shown:?}: {e}")))?;
        if !self.quarantine {
            return Err(config(format!(
                "Cluster member {shown:?} needs restart quarantine: a failover puts a \
                 replica that may lack locks in a shard master's place"
            )));
        }
        if slots::has_open_brace(&self.key_prefix) {
            return Err(config(format!(
                "key prefix {:?} has a {{ that opens no hash tag: with a Cluster member \
                 every name must keep its lock key's hash slot; use a prefix without \
                 braces, or one with a whole tag such as {{app}}:",
                self.key_prefix
            )));
        }
        let name = parsed.name();
        let (host, port) = parsed.seeds.first().cloned().unwrap_or_default();
        let cluster = cluster_member(
            parsed,
            self.tcp_settings(),
            self.connect_timeout,
            coalescing,
            Arc::from(self.key_prefix.as_str()),
            self.replica_acks,
        )
        .map_err(|e| config(format!("Cluster member {shown:?}: {e}")))?;
        let seed = cluster
            .client_at(&host, port)
            .map_err(|e| config(format!("Cluster member {shown:?}: {e}")))?;
        let cluster_of_seed = Arc::downgrade(&cluster) as Weak<dyn ShardCluster>;
        let member: Member = Box::new(ShardMaster::new(seed, cluster_of_seed));
        Ok((name, member, cluster))
    }

    /// The fixed part of every lock value (see [`holder_info`](Self::holder_info)). Reads
    /// the host name once per client.
    fn holder_description(&self) -> String {
        if !self.holder_info {
            return String::new();
        }
        let program = (self.holder_program.clone()).or_else(|| {
            let exe = std::env::args_os().next()?;
            let name = std::path::Path::new(&exe).file_name()?;
            Some(name.to_string_lossy().into_owned())
        });
        holder::describe(
            host_name().as_deref(),
            Some(std::process::id()),
            program.as_deref(),
        )
    }

    /// Parses one URL into a display name (`host:port[/db]`, no credentials) and a client.
    fn client_for(&self, url: &str) -> Result<(String, Client)> {
        if url.is_empty() {
            return Err(config("empty node URL; expected redis://host:port"));
        }
        let shown = redact(url);
        let info: ConnectionInfo = url
            .into_connection_info()
            .map_err(|e| config(format!("malformed node URL {shown:?}: {e}")))?;
        self.client_for_info(info, &shown)
    }

    /// A display name and the member for one `redis+sentinel://` URL.
    fn sentinel_for(&self, url: &str) -> Result<(String, Member)> {
        let shown = redact(url);
        let parsed = SentinelUrl::parse(url)
            .map_err(|e| config(format!("malformed Sentinel member URL {shown:?}: {e}")))?;
        if !self.quarantine {
            return Err(config(format!(
                "Sentinel member {shown:?} needs restart quarantine: a failover puts a \
                 replica that may lack locks in its master's place"
            )));
        }
        let name = parsed.name();
        let member = sentinel_member(parsed, self.tcp_settings())
            .map_err(|e| config(format!("Sentinel member {shown:?}: {e}")))?;
        Ok((name, Box::new(Arc::new(member))))
    }

    /// The TCP settings of every node connection (see [`tcp_nodelay`](Self::tcp_nodelay)).
    fn tcp_settings(&self) -> TcpSettings {
        TcpSettings::default()
            .set_nodelay(self.tcp_nodelay)
            .set_user_timeout(TCP_USER_TIMEOUT)
    }

    /// A display name and a client for one node's connection info; `shown` names the node
    /// in errors.
    fn client_for_info(&self, info: ConnectionInfo, shown: &str) -> Result<(String, Client)> {
        let tls = match info.addr() {
            ConnectionAddr::Tcp(..) => false,
            ConnectionAddr::TcpTls { .. } => true,
            _ => {
                return Err(config(format!(
                    "node URL {shown:?} is not a TCP address; use redis:// or rediss://"
                )));
            }
        };
        let name = match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                let db = info.redis_settings().db();
                let host = host.to_ascii_lowercase();
                if db == 0 {
                    format!("{host}:{port}")
                } else {
                    format!("{host}:{port}/{db}")
                }
            }
            other => other.to_string(),
        };
        // Lock traffic is small request/response pairs: by default never let Nagle hold
        // them back (see `tcp_nodelay`). The user timeout makes the kernel abort a
        // connection whose data stays unacknowledged (a partition) instead of retransmitting
        // it for minutes: a lock request can then not be delivered long after its attempt
        // gave up.
        let info = info.set_tcp_settings(self.tcp_settings());
        let client = if tls {
            tls_client(info, self.tls_root_cert.clone(), shown)?
        } else {
            Client::open(info)
                .map_err(|e| config(format!("node URL {shown:?} is unusable: {e}")))?
        };
        Ok((name, client))
    }
}

/// Each member's node, and per member its Redis Cluster (`None`: a member with one node).
type Members = (Vec<Arc<Node>>, Vec<Option<Arc<ClusterMember>>>);

/// One node as given to the builder.
#[derive(Debug, Clone)]
enum NodeSpec {
    Url(String),
    Info(Box<ConnectionInfo>),
}

/// See [`RedlockBuilder::build`]'s use: bounds how long unacknowledged data may linger.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(5);

/// A node at a fixed address.
fn server((name, client): (String, Client)) -> (String, Member) {
    (name, Box::new(PlainServer(client)))
}

fn config(msg: impl Into<String>) -> Error {
    Error::Config(msg.into())
}

/// The URL with any password replaced, for error messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}://{user}:***@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(feature = "tls")]
fn tls_client(info: ConnectionInfo, root_cert: Option<Vec<u8>>, shown: &str) -> Result<Client> {
    // rustls needs a process-wide crypto provider; install ours only when the application
    // has not chosen one, so TLS never panics for want of a provider.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer is fine: some provider is then in place.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let result = match root_cert {
        Some(pem) => Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            },
        ),
        None => Client::open(info),
    };
    result.map_err(|e| config(format!("TLS node {shown:?} is unusable: {e}")))
}

#[cfg(not(feature = "tls"))]
fn tls_client(_: ConnectionInfo, _: Option<Vec<u8>>, shown: &str) -> Result<Client> {
    Err(config(format!(
        "node URL {shown:?} uses TLS but quorum-lock was built without the `tls` feature"
    )))
}

/// This machine's host name: the kernel's on Linux, else `$HOSTNAME` / `$COMPUTERNAME`;
/// `None` when none is known (the value then names no host).
fn host_name() -> Option<String> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    kernel
        .map(|h| h.trim().to_owned())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .filter(|h| !h.is_empty())
}

// The builder's bound is the one restart quarantine's rules rely on.
const _: () = assert!(
    RedlockBuilder::MAX_NODE_TIMEOUT.as_nanos()
        == crate::rules::safety::MAX_NODE_TIMEOUT.as_nanos()
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_passwords_only() {
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact("redis://:pw@h:1/2"), "redis://:***@h:1/2");
        assert_eq!(redact("rediss://u:pw@h"), "rediss://u:***@h");
        assert_eq!(redact("no scheme"), "no scheme");
    }

    #[test]
    fn tcp_nodelay_reaches_every_node_connection() {
        let nodelay = |b: RedlockBuilder| {
            let (_, client) = b.client_for("redis://127.0.0.1:6379").unwrap();
            let info = client.get_connection_info();
            (
                info.tcp_settings().nodelay(),
                info.tcp_settings().user_timeout(),
            )
        };
        let default = nodelay(RedlockBuilder::default());
        assert_eq!(default, (true, Some(TCP_USER_TIMEOUT)));
        let nagle = nodelay(RedlockBuilder::default().tcp_nodelay(false));
        assert_eq!(nagle, (false, Some(TCP_USER_TIMEOUT)));
    }
}
