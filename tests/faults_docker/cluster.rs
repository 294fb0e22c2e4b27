//! Members that are Redis Clusters in containers: three members, each a cluster of three
//! masters, the first of which has a replica, on a private bridge network of their own.
//! The first master serves every slot but two (one each for the others, which makes them
//! voters of the cluster's failure detection), so the run's locks are on it. Two faults:
//! - [`Fault::Failover`], the one a stalled host makes: that master is frozen (`docker
//!   pause`) until the cluster, finding it silent, promotes its replica; healing thaws it,
//!   and the cluster turns it into the new master's replica, so the next fault on the
//!   member freezes the new master;
//! - [`Fault::SlotMove`], a reshard under load: every slot in which that master holds
//!   keys (the run's locks' slots: their lock keys, fencing counters, waiting lists, and
//!   the per-slot ensemble record and marker) moves to the member's second master the way
//!   `redis-cli --cluster reshard` moves it (`CLUSTER SETSLOT ... IMPORTING` and
//!   `MIGRATING`, `MIGRATE` of its keys, `CLUSTER SETSLOT ... NODE` on every master);
//!   healing moves it back the same way.
//!
//! With [`witness_moves`](DockerClusterMembers::witness_moves), long holders of every kind
//! (`LongHolders`) take their locks before each slot move and are checked once it is
//! undone and a TTL has passed (before the next fault): a held lock follows its slot, so
//! none may be lost, and each holder's lock key the two other members hold must be on the
//! moved member too (a copy left behind on the old owner would have expired by then).
//!
//! The containers run the tier's image (`docker/build-image.sh`); every container and the
//! network carry this run's name and are removed when the ensemble is dropped.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::docker_sentinel::{docker, query, settle_within, tear_down};
use crate::kit::ensemble::{Ensemble, Fault, admin_conn};
use crate::kit::history::Row;
use crate::kit::holders::LongHolders;
use crate::kit::worker::client_with_ceiling;
use crate::used_subnets;

const IMAGE: &str = "quorum-lock/redis:local";
const MEMBERS: usize = 3;
/// Per member: three masters and the first one's replica.
const SERVERS: usize = 4;
/// The clusters' `cluster-node-timeout`: a frozen master is found failed after it.
const NODE_TIMEOUT_MS: u64 = 1000;
/// The master a [`Fault::SlotMove`] moves slots to: the member's second one.
const RESHARD_TO: usize = 1;
/// Keys per `MIGRATE`, and its timeout in milliseconds.
const MIGRATE_BATCH: usize = 100;
const MIGRATE_TIMEOUT_MS: u64 = 5000;

/// The running containers of one set of members.
pub struct DockerClusterMembers {
    name: String,
    prefix: String,
    /// Per member, which of its servers its fault froze, while it lasts.
    frozen: Vec<Option<usize>>,
    /// Per member, the slots its fault moved, while it lasts.
    moved: Vec<Option<MovedSlots>>,
    /// Long holders across the slot moves, if asked for.
    witnesses: Option<MoveWitnesses>,
}

/// Moves slots of one member from one master to another, on one connection to each of its
/// masters: the new owner first, then the old one, then the others.
struct SlotMover {
    to_ip: String,
    from_id: String,
    to_id: String,
    masters: Vec<redis::Connection>,
}

impl SlotMover {
    /// Moves `slot`: the new owner imports it, the old one migrates it, its keys go over
    /// with `MIGRATE`, and right after the last batch every master is told the new owner.
    /// Between the last batch and the old owner's `NODE` it answers `ASK` for the slot's
    /// keys (a request there does not vote): three round trips on these connections.
    fn move_slot(&mut self, slot: u16) {
        let (from_id, to_id) = (self.from_id.clone(), self.to_id.clone());
        self.set_slot(0, slot, &["IMPORTING", &from_id]);
        self.set_slot(1, slot, &["MIGRATING", &to_id]);
        while self.migrate_batch(slot) {}
        for k in 0..self.masters.len() {
            self.set_slot(k, slot, &["NODE", &to_id]);
        }
    }

    fn set_slot(&mut self, k: usize, slot: u16, how: &[&str]) {
        let cmd = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .clone();
        let _: () = (cmd.query(&mut self.masters[k]))
            .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {how:?}: {e}"));
    }

    /// `MIGRATE`s the next batch of `slot`'s keys from the old owner; false when it had
    /// none left.
    fn migrate_batch(&mut self, slot: u16) -> bool {
        let batch: Vec<String> = (redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot))
            .arg(MIGRATE_BATCH)
            .query(&mut self.masters[1])
            .unwrap_or_else(|e| panic!("CLUSTER GETKEYSINSLOT {slot}: {e}"));
        if batch.is_empty() {
            return false;
        }
        let migrate = redis::cmd("MIGRATE")
            .arg(&self.to_ip)
            .arg(6379)
            .arg("")
            .arg(0)
            .arg(MIGRATE_TIMEOUT_MS)
            .arg("KEYS")
            .arg(&batch)
            .clone();
        // `NOKEY` when the batch expired or was released meanwhile.
        let _: redis::Value = (migrate.query(&mut self.masters[1]))
            .unwrap_or_else(|e| panic!("MIGRATE of slot {slot}: {e}"));
        true
    }
}

/// Long holders across slot moves, and what their checks found.
struct MoveWitnesses {
    /// The holders' TTL, and the node timeout of their client.
    ttl: Duration,
    node_timeout: Duration,
    /// The holders of the latest move, until they are checked.
    current: Option<Witness>,
    /// Holders taken, and holders that lost their lock, over every move.
    taken: usize,
    lost: usize,
    problems: Vec<String>,
}

impl MoveWitnesses {
    /// Records what the check of a move on `member` found: the kinds of holder that lost
    /// their lock, and those whose copy stayed behind.
    fn record(&mut self, member: usize, lost: &[&str], behind: &[String]) {
        let n = member + 1;
        self.lost += lost.len();
        if !lost.is_empty() {
            self.problems.push(format!(
                "slot move on n{n}: long holders lost their locks: {}",
                lost.join(", ")
            ));
        }
        if !behind.is_empty() {
            self.problems.push(format!(
                "slot move on n{n}: held locks did not follow their slot (no copy on n{n}, \
                 a copy on each other member): {}",
                behind.join(", ")
            ));
        }
    }
}

/// The long holders of one slot move on `member`, and when the move was undone.
struct Witness {
    member: usize,
    holders: LongHolders,
    undone: Option<Instant>,
}

/// Slots moved from one master of a member to another.
#[derive(Clone, Debug)]
struct MovedSlots {
    slots: Vec<u16>,
    from: usize,
    to: usize,
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
            moved: vec![None; MEMBERS],
            witnesses: None,
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

    /// `cmd` on member `m`'s server `k`, or a panic saying what failed.
    fn must<T: redis::FromRedisValue>(&self, m: usize, k: usize, cmd: &redis::Cmd) -> T {
        query(&self.addr(m, k), cmd).unwrap_or_else(|e| panic!("{e}"))
    }

    fn node_id(&self, m: usize, k: usize) -> String {
        self.must(m, k, redis::cmd("CLUSTER").arg("MYID"))
    }

    /// Member `m`'s masters: the big one and the two others.
    fn masters(&self, m: usize) -> Vec<usize> {
        let big = self.big_master(m).expect("a big master");
        vec![big, 1, 2]
    }

    /// The slots in which member `m`'s server `k` holds keys, sorted.
    fn slots_with_keys(&self, m: usize, k: usize) -> Vec<u16> {
        let mut slots = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) =
                self.must(m, k, redis::cmd("SCAN").arg(cursor).arg("COUNT").arg(1000));
            for key in keys {
                slots.push(self.must(m, k, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)));
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        slots.sort_unstable();
        slots.dedup();
        slots
    }

    /// Moves `moved.slots` of member `m` with their keys, as a reshard does, one slot after
    /// the other (see [`SlotMover`]); returns once every master names the new owner.
    fn move_slots(&self, m: usize, moved: &MovedSlots) {
        let to_id = self.node_id(m, moved.to);
        let mut told = vec![moved.to, moved.from];
        let others: Vec<usize> = (self.masters(m).into_iter())
            .filter(|k| !told.contains(k))
            .collect();
        told.extend(others);
        let mut mover = SlotMover {
            to_ip: self.ip(m, moved.to),
            from_id: self.node_id(m, moved.from),
            to_id: to_id.clone(),
            masters: (told.iter())
                .map(|&k| admin_conn(&format!("redis://{}", self.addr(m, k))))
                .collect(),
        };
        for &slot in &moved.slots {
            mover.move_slot(slot);
        }
        self.must_settle("every master to name the slots' new owner", |t| {
            told.iter().all(|&k| {
                let owners = t.slot_owners(m, k);
                (moved.slots.iter()).all(|s| owners.get(s) == Some(&to_id))
            })
        });
    }

    /// The owner (node ID) of every slot in member `m`'s server `k`'s view, from `CLUSTER
    /// NODES` (slots being imported or migrated are listed there in brackets, and left
    /// out here).
    fn slot_owners(&self, m: usize, k: usize) -> std::collections::HashMap<u16, String> {
        let Ok(text) = query::<String>(&self.addr(m, k), redis::cmd("CLUSTER").arg("NODES")) else {
            return Default::default();
        };
        let mut owners = std::collections::HashMap::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            for range in fields.iter().skip(8).filter(|r| !r.starts_with('[')) {
                let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                let (Ok(lo), Ok(hi)) = (lo.parse::<u16>(), hi.parse::<u16>()) else {
                    continue;
                };
                for slot in lo..=hi {
                    owners.insert(slot, fields[0].to_owned());
                }
            }
        }
        owners
    }

    /// Freezes member `i`'s big master and returns once the cluster has promoted its
    /// replica.
    fn fail_over(&mut self, i: usize) {
        let old = self.big_master(i).expect("a big master");
        docker(&["pause", &self.server(i, old)]).unwrap_or_else(|e| panic!("{e}"));
        self.frozen[i] = Some(old);
        let replica = if old == 0 { 3 } else { 0 };
        self.must_settle("the cluster to promote the replica", |t| {
            t.info(i, replica, "replication")
                .is_some_and(|info| info.contains("role:master"))
        });
    }

    /// Thaws the frozen master, if any, and returns once it answers.
    fn thaw(&mut self, i: usize) {
        let Some(k) = self.frozen[i].take() else {
            return;
        };
        docker(&["unpause", &self.server(i, k)]).unwrap_or_else(|e| panic!("{e}"));
        let addr = self.addr(i, k);
        self.must_settle("the thawed master to answer", |_| {
            query::<String>(&addr, &redis::cmd("PING")).is_ok()
        });
    }

    /// Moves every slot in which member `i`'s big master holds keys to [`RESHARD_TO`].
    fn reshard(&mut self, i: usize) {
        let from = self.big_master(i).expect("a big master");
        let moved = MovedSlots {
            slots: self.slots_with_keys(i, from),
            from,
            to: RESHARD_TO,
        };
        self.move_slots(i, &moved);
        self.moved[i] = Some(moved);
    }

    /// Moves the slots [`reshard`](Self::reshard) moved back, if any.
    fn reshard_back(&mut self, i: usize) {
        let Some(moved) = self.moved[i].take() else {
            return;
        };
        let back = MovedSlots {
            slots: moved.slots,
            from: moved.to,
            to: moved.from,
        };
        self.move_slots(i, &back);
    }
}

impl DockerClusterMembers {
    /// Long holders of TTL `ttl`, through a client with node timeout `node_timeout`, take
    /// their locks before each slot move, and are checked once it is undone (see the
    /// module docs); [`report_witnesses`](Self::report_witnesses) puts what they found in
    /// a row.
    pub fn witness_moves(mut self, ttl: Duration, node_timeout: Duration) -> Self {
        self.witnesses = Some(MoveWitnesses {
            ttl,
            node_timeout,
            current: None,
            taken: 0,
            lost: 0,
            problems: Vec::new(),
        });
        self
    }

    /// Checks the last move's holders, then puts every move's in `row`: the `lost` column
    /// and a problem for each lock lost or copy left behind.
    pub fn report_witnesses(&mut self, row: &mut Row) {
        self.check_witness();
        if let Some(w) = &mut self.witnesses {
            row.holders_lost = Some((w.lost, w.taken));
            row.problems.append(&mut w.problems);
        }
    }

    /// Long holders for a slot move on member `i`, if witnesses were asked for.
    fn take_witness(&mut self, i: usize) {
        let urls = self.client_urls();
        let Some(w) = &mut self.witnesses else {
            return;
        };
        let client = client_with_ceiling(&urls, w.ttl, w.node_timeout, true, None);
        let holders = LongHolders::take_with_ttl(client, w.ttl);
        w.taken += holders.count();
        w.current = Some(Witness {
            member: i,
            holders,
            undone: None,
        });
    }

    /// Notes when the witnessed move was undone.
    fn witness_undone(&mut self) {
        if let Some(Witness { undone, .. }) =
            self.witnesses.as_mut().and_then(|w| w.current.as_mut())
        {
            *undone = Some(Instant::now());
        }
    }

    /// Checks the holders of the latest move, a TTL after it was undone, and releases
    /// them.
    fn check_witness(&mut self) {
        let Some(w) = self.witnesses.as_mut() else {
            return;
        };
        let Some(witness) = w.current.take() else {
            return;
        };
        let ttl = w.ttl;
        if let Some(undone) = witness.undone {
            std::thread::sleep((undone + ttl).saturating_duration_since(Instant::now()));
        }
        let lost = witness.holders.lost();
        let behind = self.copies_left_behind(witness.member);
        witness.holders.release();
        if let Some(w) = self.witnesses.as_mut() {
            w.record(witness.member, &lost, &behind);
        }
    }

    /// The kinds of long holder whose lock key both other members hold and member `m`
    /// does not.
    fn copies_left_behind(&self, m: usize) -> Vec<String> {
        let held = |j: usize| -> BTreeSet<String> {
            let k = self.big_master(j).unwrap_or(0);
            query::<Vec<String>>(&self.addr(j, k), redis::cmd("KEYS").arg("long-*"))
                .unwrap_or_else(|e| panic!("{e}"))
                .into_iter()
                .collect()
        };
        let mut others = (0..MEMBERS).filter(|&j| j != m).map(held);
        let first = others.next().unwrap_or_default();
        let on_both: BTreeSet<String> = others.fold(first, |a, b| &a & &b);
        let here = held(m);
        (on_both.difference(&here))
            .map(|key| key.split('-').nth(1).unwrap_or(key).to_owned())
            .collect()
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
        matches!(fault, Fault::Failover | Fault::SlotMove)
    }

    /// [`Fault::Failover`]: freezes member `i`'s big master and returns once the cluster
    /// has promoted its replica. [`Fault::SlotMove`]: moves the slots its big master holds
    /// keys in to another master and returns once every master names it. Either first
    /// waits until a master failed over before is the new one's linked replica: one the
    /// cluster can promote, and no longer a master that names itself owner of the slots.
    fn inject(&mut self, i: usize, fault: &Fault) {
        assert!(self.supports(fault), "these members fail over or reshard");
        self.check_witness();
        self.must_settle("a linked replica the cluster can promote", |t| {
            t.replica_linked(i)
        });
        match fault {
            Fault::SlotMove => {
                self.take_witness(i);
                self.reshard(i);
            }
            _ => self.fail_over(i),
        }
    }

    /// [`Fault::Failover`]: thaws the frozen master and returns once it answers: it is
    /// still a master, and accepts what reaches it, until it hears of the promotion; any
    /// vote it gives then must not count. [`Fault::SlotMove`]: moves the slots back.
    fn heal(&mut self, i: usize, fault: &Fault) {
        match fault {
            Fault::SlotMove => {
                self.reshard_back(i);
                self.witness_undone();
            }
            _ => self.thaw(i),
        }
    }
}
