//! The shard masters of a Redis Cluster as the bench reads them: each master's slots, and
//! its own counts (`INFO commandstats`, `INFO cpu`) around a run, on a connection kept
//! open for the readings.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::topology::RedisClusterTopology;
use crate::support::stats::{commandstats_all, delta, info_cpu};

/// `INFO` calls of one reading ([`ShardProbe::read`]): `INFO cpu`, then `INFO commandstats`.
const INFO_PER_READING: u64 = 2;

/// One shard master of a cluster, with an open connection for readings.
pub struct ShardProbe {
    /// The master's index in its [`RedisClusterTopology`].
    pub index: usize,
    pub port: u16,
    /// The inclusive slot ranges it serves.
    pub ranges: Vec<(u16, u16)>,
    conn: redis::Connection,
}

/// What a shard master had done so far, or between two readings ([`ShardReading::since`]).
#[derive(Clone, Default)]
pub struct ShardReading {
    /// `calls=` per command (commands a script runs included); between two readings, less
    /// the readings' own `INFO` calls.
    pub calls: BTreeMap<String, u64>,
    /// `usec=` of `EVALSHA` and `EVAL`: the time spent running scripts, their own
    /// commands included (which `INFO commandstats` also counts, and times, apart).
    pub script_time: Duration,
    /// `used_cpu_sys` + `used_cpu_user`.
    pub cpu: Duration,
}

impl ShardProbe {
    /// Every master of `topology` serving slots, as node 0 sees them, in index order.
    pub fn masters(topology: &RedisClusterTopology) -> Vec<ShardProbe> {
        let view = topology.cluster_nodes(0);
        let mut probes: Vec<ShardProbe> = (0..topology.nodes().len())
            .filter_map(|index| {
                let id = topology.node_id(index);
                let entry = view.iter().find(|e| e.id == id)?;
                (entry.is_master() && !entry.slots.is_empty()).then(|| ShardProbe {
                    index,
                    port: topology.node(index).port(),
                    ranges: entry.slots.clone(),
                    conn: topology.node(index).conn(),
                })
            })
            .collect();
        probes.sort_by_key(|p| p.index);
        probes
    }

    /// How many slots the master serves.
    pub fn slot_count(&self) -> u32 {
        (self.ranges.iter())
            .map(|&(lo, hi)| u32::from(hi) - u32::from(lo) + 1)
            .sum()
    }

    /// Whether the master serves `slot`.
    pub fn owns(&self, slot: u16) -> bool {
        self.ranges
            .iter()
            .any(|&(lo, hi)| (lo..=hi).contains(&slot))
    }

    /// The master's CPU time and command counts so far.
    pub fn read(&mut self) -> ShardReading {
        let cpu = info_cpu(&mut self.conn);
        let stats = commandstats_all(&mut self.conn);
        let usec: u64 = (stats.iter())
            .filter(|(name, _)| *name == "evalsha" || *name == "eval")
            .map(|(_, &(_, usec))| usec)
            .sum();
        ShardReading {
            calls: stats
                .into_iter()
                .map(|(name, (calls, _))| (name, calls))
                .collect(),
            script_time: Duration::from_micros(usec),
            cpu,
        }
    }

    /// How many keys of the master match `pattern` (`KEYS`: for a bench's small data set).
    pub fn count_keys(&mut self, pattern: &str) -> usize {
        let keys: Vec<String> = (redis::cmd("KEYS").arg(pattern))
            .query(&mut self.conn)
            .expect("KEYS");
        keys.len()
    }

    /// `DBSIZE`: the keys the master holds.
    pub fn dbsize(&mut self) -> u64 {
        redis::cmd("DBSIZE").query(&mut self.conn).expect("DBSIZE")
    }
}

impl ShardReading {
    /// What the master did between `earlier` and this reading, less the `INFO` calls of
    /// the readings themselves: a command is counted once it has run, so the span holds
    /// `earlier`'s `INFO commandstats` and this reading's `INFO cpu`.
    pub fn since(&self, earlier: &ShardReading) -> ShardReading {
        let mut calls = delta(&earlier.calls, &self.calls);
        if let Some(info) = calls.get_mut("info") {
            *info = info.saturating_sub(INFO_PER_READING);
            if *info == 0 {
                calls.remove("info");
            }
        }
        ShardReading {
            calls,
            script_time: self.script_time.saturating_sub(earlier.script_time),
            cpu: self.cpu.saturating_sub(earlier.cpu),
        }
    }

    /// Every command call, summed.
    pub fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }

    /// Adds `other`'s counts and times to these.
    pub fn add(&mut self, other: &ShardReading) {
        for (name, calls) in &other.calls {
            *self.calls.entry(name.clone()).or_insert(0) += calls;
        }
        self.script_time += other.script_time;
        self.cpu += other.cpu;
    }
}

/// The `redis+cluster://` URL of a member that is `topology`, its first two nodes (or its
/// only one) as seeds.
pub fn cluster_member_url(topology: &RedisClusterTopology) -> String {
    let seeds: Vec<String> = (topology.nodes().iter().take(2))
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    format!("redis+cluster://{}", seeds.join(","))
}

/// The hash slot of each of `keys`, asked of node 0 in one pipeline of `CLUSTER KEYSLOT`.
pub fn key_slots(topology: &RedisClusterTopology, keys: &[String]) -> Vec<u16> {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("CLUSTER").arg("KEYSLOT").arg(key);
    }
    pipe.query(&mut topology.node(0).conn())
        .expect("CLUSTER KEYSLOT")
}
