//! Members that are Redis Clusters in containers: three members, each a cluster of three
//! masters, the first of which has a replica, on a private bridge network of their own.
//! The first master serves every slot but two (one each for the others, which makes them
//! voters of the cluster's failure detection), so the run's lock is on it. The fault is the
//! one a stalled host makes: that master is frozen (`docker pause`) until the cluster,
//! finding it silent, promotes its replica; healing thaws it, and the cluster turns it
//! into the new master's replica, so the next fault on the member freezes the new master.
//!
//! The containers run the tier's image (`docker/build-image.sh`); every container and the
//! network carry this run's name and are removed when the ensemble is dropped.

use crate::docker_sentinel::{docker, query, settle_within, tear_down};
use crate::kit::ensemble::{Ensemble, Fault};
use crate::used_subnets;

const IMAGE: &str = "quorum-lock/redis:local";
const MEMBERS: usize = 3;
/// Per member: three masters and the first one's replica.
const SERVERS: usize = 4;
/// The clusters' `cluster-node-timeout`: a frozen master is found failed after it.
const NODE_TIMEOUT_MS: u64 = 1000;

/// The running containers of one set of members.
pub struct DockerClusterMembers {
    name: String,
    prefix: String,
    /// Per member, which of its servers its fault froze, while it lasts.
    frozen: Vec<Option<usize>>,
}

impl DockerClusterMembers {
    /// Creates the network and the containers on a free subnet, forms each cluster, and
    /// waits until every node of every cluster sees it whole with its replica linked.
    pub fn up() -> Result<DockerClusterMembers, String> {
        let name = format!("qlcluster{}", std::process::id());
        let used = used_subnets();
        let prefix = (0..100u32)
            .map(|k| format!("172.31.{}", 100 + (std::process::id() + k) % 100))
            .find(|p| !used.contains(&format!("{p}.")))
            .ok_or("no free 172.31.x.0/24 subnet")?;
        let members = DockerClusterMembers {
            name,
            prefix,
            frozen: vec![None; MEMBERS],
        };
        docker(&[
            "network",
            "create",
            "--subnet",
            &format!("{}.0/24", members.prefix),
            &members.name,
        ])?;
        for m in 0..MEMBERS {
            for k in 0..SERVERS {
                members.run_server(m, k)?;
            }
        }
        for m in 0..MEMBERS {
            members.form(m)?;
        }
        Ok(members)
    }

    fn run_server(&self, m: usize, k: usize) -> Result<(), String> {
        let (container, ip) = (self.server(m, k), self.ip(m, k));
        let timeout = NODE_TIMEOUT_MS.to_string();
        docker(&[
            "run",
            "-d",
            "--name",
            &container,
            "--label",
            &self.name,
            "--network",
            &self.name,
            "--ip",
            &ip,
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
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "/tmp/nodes.conf",
            "--cluster-node-timeout",
            &timeout,
            "--repl-diskless-sync-delay",
            "0",
        ])
        .map(|_| ())
    }

    /// Forms member `m`'s cluster: epochs, slots, `MEET`, the replica, then waits.
    fn form(&self, m: usize) -> Result<(), String> {
        let addr = |k| format!("{}:6379", self.ip(m, k));
        self.settle("the servers to answer", |t| {
            (0..SERVERS).all(|k| query::<String>(&t.addr(m, k), &redis::cmd("PING")).is_ok())
        })?;
        for k in 0..SERVERS {
            let epoch = redis::cmd("CLUSTER")
                .arg("SET-CONFIG-EPOCH")
                .arg(k + 1)
                .clone();
            query::<String>(&addr(k), &epoch)?;
        }
        let slots: [Vec<u16>; 3] = [(2..16384).collect(), vec![0], vec![1]];
        for (k, slots) in slots.iter().enumerate() {
            query::<String>(&addr(k), redis::cmd("CLUSTER").arg("ADDSLOTS").arg(slots))?;
        }
        for k in 1..SERVERS {
            let meet = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg(self.ip(m, k))
                .arg(6379)
                .clone();
            query::<String>(&addr(0), &meet)?;
        }
        self.settle("every node to know every other one", |t| {
            (0..SERVERS).all(|k| t.known_nodes(m, k) == SERVERS)
        })?;
        let first: String = query(&addr(0), redis::cmd("CLUSTER").arg("MYID"))?;
        query::<String>(&addr(3), redis::cmd("CLUSTER").arg("REPLICATE").arg(&first))?;
        self.settle("the cluster to come up with its replica linked", |t| {
            t.replica_linked(m) && (0..SERVERS).all(|k| t.state_ok(m, k))
        })
    }

    fn server(&self, m: usize, k: usize) -> String {
        format!("{}_m{m}_{k}", self.name)
    }

    fn ip(&self, m: usize, k: usize) -> String {
        format!("{}.{}", self.prefix, 21 + SERVERS * m + k)
    }

    fn addr(&self, m: usize, k: usize) -> String {
        format!("{}:6379", self.ip(m, k))
    }

    fn info(&self, m: usize, k: usize, section: &str) -> Option<String> {
        query::<String>(&self.addr(m, k), redis::cmd("INFO").arg(section)).ok()
    }

    /// Member `m`'s server that is a master with a replica's pair: the first master or the
    /// replica (whichever is a master now and not frozen).
    fn big_master(&self, m: usize) -> Option<usize> {
        [0, 3].into_iter().find(|&k| {
            self.frozen[m] != Some(k)
                && self
                    .info(m, k, "replication")
                    .is_some_and(|i| i.contains("role:master"))
        })
    }

    /// Whether the big master's partner is its replica with the link up.
    fn replica_linked(&self, m: usize) -> bool {
        let Some(master) = self.big_master(m) else {
            return false;
        };
        let replica = if master == 0 { 3 } else { 0 };
        self.info(m, replica, "replication")
            .is_some_and(|i| i.contains("role:slave") && i.contains("master_link_status:up"))
    }

    fn known_nodes(&self, m: usize, k: usize) -> usize {
        query::<String>(&self.addr(m, k), redis::cmd("CLUSTER").arg("NODES")).map_or(0, |text| {
            text.lines().filter(|l| !l.contains("fail")).count()
        })
    }

    fn state_ok(&self, m: usize, k: usize) -> bool {
        query::<String>(&self.addr(m, k), redis::cmd("CLUSTER").arg("INFO"))
            .is_ok_and(|i| i.contains("cluster_state:ok"))
    }

    fn settle(&self, what: &str, done: impl Fn(&Self) -> bool) -> Result<(), String> {
        settle_within(what, || done(self))
    }

    fn must_settle(&self, what: &str, done: impl Fn(&Self) -> bool) {
        if let Err(e) = self.settle(what, done) {
            panic!("{e}");
        }
    }
}

impl Drop for DockerClusterMembers {
    fn drop(&mut self) {
        tear_down(&self.name);
    }
}

impl Ensemble for DockerClusterMembers {
    fn size(&self) -> usize {
        MEMBERS
    }

    fn client_urls(&self) -> Vec<String> {
        (0..MEMBERS)
            .map(|m| format!("redis+cluster://{},{}", self.addr(m, 1), self.addr(m, 2)))
            .collect()
    }

    /// The member's big master.
    fn admin_url(&self, i: usize) -> String {
        let k = self.big_master(i).unwrap_or(0);
        format!("redis://{}", self.addr(i, k))
    }

    fn supports(&self, fault: &Fault) -> bool {
        *fault == Fault::Failover
    }

    /// Freezes member `i`'s big master and returns once the cluster has promoted its
    /// replica. A member failed over before first waits until its thawed master is the
    /// new one's linked replica, one the cluster can promote.
    fn inject(&mut self, i: usize, fault: &Fault) {
        assert_eq!(*fault, Fault::Failover, "these members only fail over");
        self.must_settle("a linked replica the cluster can promote", |t| {
            t.replica_linked(i)
        });
        let old = self.big_master(i).expect("a big master");
        docker(&["pause", &self.server(i, old)]).unwrap_or_else(|e| panic!("{e}"));
        self.frozen[i] = Some(old);
        let replica = if old == 0 { 3 } else { 0 };
        self.must_settle("the cluster to promote the replica", |t| {
            t.info(i, replica, "replication")
                .is_some_and(|info| info.contains("role:master"))
        });
    }

    /// Thaws the frozen master and returns once it answers: it is still a master, and
    /// accepts what reaches it, until it hears of the promotion; any vote it gives then
    /// must not count.
    fn heal(&mut self, i: usize, _: &Fault) {
        let Some(k) = self.frozen[i].take() else {
            return;
        };
        docker(&["unpause", &self.server(i, k)]).unwrap_or_else(|e| panic!("{e}"));
        let addr = self.addr(i, k);
        self.must_settle("the thawed master to answer", |_| {
            query::<String>(&addr, &redis::cmd("PING")).is_ok()
        });
    }
}
