//! Scenario 11: a member under Sentinel against the same master listed plainly, N = 1,
//! uncontended lock + unlock, one task, both with restart quarantine on (a Sentinel member
//! needs it), and the floor (2 rounds) on the master: what the sentinels' confirmation of
//! the master costs a cycle, with the CPU of the master and the three sentinels; and the
//! same member with its votes confirmed on the replica (`replica_acks(1, 20 ms)`): what a
//! `WAIT` per vote costs.

use crate::common::topology::SentinelTopology;
use crate::support::contender::{
    Contender, Kind, Subject, Tune, lock_contenders, quarantined, quorum,
};
use crate::support::measure::{Servers, interleaved, latency_table};
use crate::{Cfg, FLOOR_2ROUNDS, ROUNDS};

const PLAIN_MEMBER: &str = "quorum-lock, the master as a plain member";
const SENTINEL_MEMBER: &str = "quorum-lock, a member under Sentinel";
const ACKED_MEMBER: &str = "quorum-lock, under Sentinel, replica acks";

/// Restart quarantine on, and every vote confirmed by the master's replica.
fn acked(b: quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder {
    quarantined(b).replica_acks(1, std::time::Duration::from_millis(20))
}

pub async fn run(cfg: Cfg) {
    let warm = cfg.n(300);
    let iters = cfg.n(3000);
    let topology = SentinelTopology::start(1, 3);
    let master = format!("redis://{}", topology.master_addr());
    let member = topology.member_url();
    let mut subjects = lock_contenders(std::slice::from_ref(&master), &[Kind::TwoRounds]).await;
    let members: [(_, _, Tune); 3] = [
        (PLAIN_MEMBER, &master, quarantined),
        (SENTINEL_MEMBER, &member, quarantined),
        (ACKED_MEMBER, &member, acked),
    ];
    for (name, url, tune) in members {
        let client = quorum(std::slice::from_ref(url), tune).await;
        subjects.push((name, Subject::Async(Contender::Quorum(client))));
    }
    let list: Vec<Subject> = subjects.iter().map(|(_, s)| s.clone()).collect();
    let servers: Servers = (topology.servers().iter().map(|s| s.pid()))
        .chain(topology.sentinels().iter().map(|s| s.pid()))
        .collect();
    let runs = interleaved(&list, warm, iters, &servers).await;
    let title = format!(
        "Scenario 11: a member under Sentinel, N = 1, uncontended lock + unlock ({iters} \
         timed cycles each in {ROUNDS} interleaved rounds, after {warm} warm-up)"
    );
    let mut t = latency_table(title, &subjects, &runs);
    t.ratios(&[
        (0, PLAIN_MEMBER, "p50/plain"),
        (0, FLOOR_2ROUNDS, "p50/floor"),
        (0, SENTINEL_MEMBER, "p50/sentinel"),
        (3, PLAIN_MEMBER, "server cpu/plain"),
    ]);
    t.note("server cpu counts the master, its replica and the three sentinels");
    t.note(
        "the Sentinel member asks every sentinel for the master once its last confirmation \
         is 250 ms old, in the background of a cycle (awaited only after 500 ms idle)",
    );
    print!("{}", t.render());
    println!();
}
