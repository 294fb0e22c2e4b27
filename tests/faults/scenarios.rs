//! Deterministic scenarios for the narrow windows random runs rarely hit.
//!
//! **Bare majority**: of five nodes, n4 and n5 hold a foreign value for the resource, so
//! client A's lock lands on exactly n1–n3; the foreign keys are then deleted. One of A's
//! nodes (n3) is paused, killed and restarted (with or without its data), or has its clock
//! jumped forward; then client B tries. Both then do a read-modify-write of the counter (A
//! read before the fault and writes last, as late as its validity allows), and the checker
//! judges the history.
//!
//! **Paused holder**: A holds, reads the counter, and stalls (a GC or VM pause) past its
//! validity; B acquires once A's keys expired and increments; A wakes and writes what it
//! computed before the stall.
//!
//! Both clients live in the test process and record their holds on the same clock as the
//! workers do.

use std::time::{Duration, Instant};

use quorum_lock::Redlock;
use tokio::runtime::Runtime;

use crate::common::{RedisServer, unique};

use super::clock;
use super::ensemble::{Ensemble, Fault};
use super::history::{self, History, Hold, Row, Verdict, Write};
use super::worker::{acquire, client, read_counter, release_kind, store_conn, write_counter};

/// The fault applied to n3 while A holds n1–n3.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hit {
    /// Paused while B tries, resumed afterwards.
    Pause,
    /// Killed and started again before B tries (its data survives only if it persists).
    KillRestart,
    /// Its wall clock jumps forward by this much before B tries (set back afterwards).
    ClockJump(Duration),
}

/// One bare-majority scenario.
#[derive(Clone, Debug)]
pub struct BareMajority {
    pub name: String,
    pub hit: Hit,
    /// Restart quarantine for client B.
    pub b_quarantine: bool,
    /// Fencing tokens for both clients (the counter is then written with `fenced_set`).
    pub fencing: bool,
    /// Whether B must get the lock (the documented unsafe cases) or be refused.
    pub b_acquires: bool,
    pub want: Verdict,
}

/// TTL of the deterministic scenarios: long enough that A is still valid when it writes,
/// however slow a restart is on a loaded machine.
pub const TTL: Duration = Duration::from_secs(8);
const NODE_TIMEOUT: Duration = Duration::from_millis(250);
/// How long B keeps trying.
const B_WAIT: Duration = Duration::from_millis(2500);
/// The node that is hit (n3), part of A's bare majority n1–n3.
const HIT: usize = 2;
const FOREIGN: &str = "foreign-owner";

fn lock_client(ens: &dyn Ensemble, quarantine: bool, ttl: Duration) -> Redlock {
    client(&ens.client_urls(), ttl, NODE_TIMEOUT, quarantine)
}

fn get(ens: &dyn Ensemble, i: usize, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut ens.admin(i))
        .expect("GET")
}

/// Connects `client` to every node, retrying for a while on a loaded machine.
fn connect(rt: &Runtime, client: &Redlock) {
    let start = Instant::now();
    loop {
        match rt.block_on(client.connect()) {
            Ok(_) => return,
            Err(e) if start.elapsed() > Duration::from_secs(15) => panic!("connect: {e:?}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Waits until every node but `except` has been up for `secs` whole seconds, so a client
/// with restart quarantine counts their votes.
pub fn wait_aged(ens: &dyn Ensemble, except: usize, secs: u64) {
    let start = Instant::now();
    loop {
        let youngest = (0..ens.size())
            .filter(|&i| i != except)
            .map(|i| ens.uptime_secs(i))
            .min()
            .unwrap_or(secs);
        if youngest >= secs {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs + 15),
            "nodes did not age past the quarantine period"
        );
        // Uptime counts whole seconds: sleep most of the difference, then look again.
        std::thread::sleep(Duration::from_millis((secs - youngest) * 1000 - 500));
    }
}

/// Runs one bare-majority scenario on a five-node `ens`.
pub fn bare_majority(
    rt: &Runtime,
    ens: &mut dyn Ensemble,
    store: &RedisServer,
    sc: &BareMajority,
) -> Row {
    assert_eq!(ens.size(), 5, "bare-majority scenarios need five nodes");
    let began = Instant::now();
    let resource = unique("bare-majority");
    let counter = unique("bare-counter");
    if sc.b_quarantine {
        // Quarantine period: TTL plus drift, rounded up, plus a second for the whole-second
        // uptime: only n3's restart may keep B's votes from counting.
        wait_aged(ens, HIT, TTL.as_secs() + 2);
    }
    // Fencing needs restart quarantine on nodes without `appendfsync always` (a client with
    // it off is refused a token); it changes nothing else here: n3 is not restarted in the
    // fenced cases, and every node was fresh when A marked it.
    let a = lock_client(ens, sc.fencing, TTL);
    let b = lock_client(ens, sc.b_quarantine || sc.fencing, TTL);
    let mut store_a = rt.block_on(store_conn(&store.url()));
    let mut store_b = rt.block_on(store_conn(&store.url()));
    // Both clients are up and connected before anything happens.
    connect(rt, &a);
    connect(rt, &b);

    let mut notes = Vec::new();
    let mut problems = Vec::new();
    for i in 3..5 {
        let () = redis::cmd("SET")
            .arg(&resource)
            .arg(FOREIGN)
            .arg("PX")
            .arg(60_000)
            .query(&mut ens.admin(i))
            .expect("SET foreign key");
    }
    let a_start = clock::now();
    // Only n1-n3 can grant it; retries (on a loaded machine) land on the same three.
    let request = a.lock(&resource, TTL).wait(Duration::from_secs(10));
    let (guard_a, a_token) = rt
        .block_on(acquire(request, sc.fencing))
        .expect("A acquires the bare majority n1-n3");
    let a_acquired = clock::now();
    let a_deadline = clock::at_tokio(guard_a.deadline());
    let holders: Vec<bool> = (0..5)
        .map(|i| get(ens, i, &resource).as_deref() == Some(guard_a.token()))
        .collect();
    assert_eq!(
        holders,
        [true, true, true, false, false],
        "A holds exactly n1-n3"
    );
    let a_read = clock::now();
    let a_value = rt.block_on(read_counter(&mut store_a, &counter));
    for i in 3..5 {
        let _: i64 = redis::cmd("DEL")
            .arg(&resource)
            .query(&mut ens.admin(i))
            .expect("DEL foreign key");
    }

    // The fault on n3.
    match &sc.hit {
        Hit::Pause => ens.inject(HIT, &Fault::Pause),
        Hit::KillRestart => {
            ens.inject(HIT, &Fault::Kill);
            ens.heal(HIT, &Fault::Kill);
            let kept = get(ens, HIT, &resource).as_deref() == Some(guard_a.token());
            notes.push(if kept {
                "n3 restarted with A's key".to_owned()
            } else {
                "n3 restarted empty".to_owned()
            });
        }
        Hit::ClockJump(d) => ens.inject(HIT, &Fault::ClockJump(*d)),
    }

    let mut holds = Vec::new();
    let b_start = clock::now();
    let request = b.lock(&resource, TTL).wait(B_WAIT);
    match rt.block_on(acquire(request, sc.fencing)) {
        Ok((guard_b, token)) => {
            let acquired = clock::now();
            let deadline = clock::at_tokio(guard_b.deadline());
            let read = clock::now();
            let v = rt.block_on(read_counter(&mut store_b, &counter));
            let sent = clock::now();
            let accepted = rt.block_on(write_counter(
                &mut store_b,
                &resource,
                &counter,
                token,
                v + 1,
            ));
            let acked = clock::now();
            let end = clock::now();
            let release = release_kind(&rt.block_on(guard_b.release()));
            holds.push(Hold {
                worker: 2,
                seq: 1,
                start: b_start,
                acquired,
                deadline,
                read: Some(read),
                write: Some(Write {
                    sent,
                    acked,
                    accepted,
                    value: v + 1,
                }),
                end,
                released: clock::now(),
                token,
                release: release.into(),
            });
            notes.push("B acquired".into());
            if !sc.b_acquires {
                problems.push("B acquired the lock A still held".to_owned());
            }
        }
        Err(e) => {
            let report = e.report().map(ToString::to_string).unwrap_or_default();
            let quarantined = e.report().map_or(0, |r| r.quarantined());
            notes.push(if quarantined > 0 {
                format!("B refused ({quarantined} vote quarantined)")
            } else {
                format!("B refused ({})", super::worker::failure_kind(&e))
            });
            if sc.b_acquires {
                problems.push(format!("B was refused: {e} [{report}]"));
            }
            if sc.b_quarantine && quarantined == 0 {
                problems.push(format!(
                    "B's refusal did not involve quarantine: [{report}]"
                ));
            }
        }
    }
    match &sc.hit {
        Hit::Pause => ens.heal(HIT, &Fault::Pause),
        Hit::ClockJump(d) => ens.heal(HIT, &Fault::ClockJump(*d)),
        Hit::KillRestart => {}
    }

    // A, still within its validity, writes what it read before the fault.
    let sent = clock::now();
    let accepted = rt.block_on(write_counter(
        &mut store_a,
        &resource,
        &counter,
        a_token,
        a_value + 1,
    ));
    let acked = clock::now();
    if acked >= a_deadline {
        problems.push("A's validity ran out before its write: the scenario ran too slowly".into());
    }
    let end = clock::now();
    let release = release_kind(&rt.block_on(guard_a.release()));
    holds.push(Hold {
        worker: 1,
        seq: 1,
        start: a_start,
        acquired: a_acquired,
        deadline: a_deadline,
        read: Some(a_read),
        write: Some(Write {
            sent,
            acked,
            accepted,
            value: a_value + 1,
        }),
        end,
        released: clock::now(),
        token: a_token,
        release: release.into(),
    });
    if !accepted {
        notes.push("A's stale write rejected".into());
    }
    finish(
        rt, store, &counter, holds, sc.fencing, &sc.name, sc.want, notes, problems, began,
    )
}

#[allow(clippy::too_many_arguments)]
fn finish(
    rt: &Runtime,
    store: &RedisServer,
    counter: &str,
    holds: Vec<Hold>,
    fencing: bool,
    name: &str,
    want: Verdict,
    notes: Vec<String>,
    problems: Vec<String>,
    began: Instant,
) -> Row {
    let mut conn = rt.block_on(store_conn(&store.url()));
    let value = rt.block_on(read_counter(&mut conn, counter));
    let history = History {
        holds,
        ..History::default()
    };
    let check = history::check(&history, value, clock::uncertainty_ns());
    let mut row = Row::from_check(name, &check, fencing, want);
    row.notes = notes.join("; ");
    row.problems = problems;
    row.secs = began.elapsed().as_secs_f64();
    row
}

/// The paused-holder scenario: A stalls past its validity between reading and writing.
pub fn paused_holder(
    rt: &Runtime,
    ens: &mut dyn Ensemble,
    store: &RedisServer,
    name: &str,
    fencing: bool,
    want: Verdict,
) -> Row {
    let began = Instant::now();
    let ttl = Duration::from_secs(1);
    let resource = unique("paused-holder");
    let counter = unique("paused-counter");
    // Fencing needs restart quarantine on nodes without `appendfsync always`.
    let a = lock_client(ens, fencing, ttl);
    let b = lock_client(ens, fencing, ttl);
    let mut store_a = rt.block_on(store_conn(&store.url()));
    let mut store_b = rt.block_on(store_conn(&store.url()));
    let mut problems = Vec::new();
    let mut notes = Vec::new();

    let a_start = clock::now();
    let request = a.lock(&resource, ttl);
    let (guard_a, a_token) = rt.block_on(acquire(request, fencing)).expect("A acquires");
    let a_acquired = clock::now();
    let a_deadline = clock::at_tokio(guard_a.deadline());
    let a_read = clock::now();
    let a_value = rt.block_on(read_counter(&mut store_a, &counter));

    // A stalls here. B waits for A's keys to expire, then takes over and increments.
    let b_start = clock::now();
    let request = b.lock(&resource, ttl).wait(Duration::from_secs(10));
    let (guard_b, b_token) = rt
        .block_on(acquire(request, fencing))
        .expect("B acquires after A's TTL");
    let b_acquired = clock::now();
    let b_deadline = clock::at_tokio(guard_b.deadline());
    let b_read = clock::now();
    let v = rt.block_on(read_counter(&mut store_b, &counter));
    let sent = clock::now();
    let accepted = rt.block_on(write_counter(
        &mut store_b,
        &resource,
        &counter,
        b_token,
        v + 1,
    ));
    let acked = clock::now();
    let b_end = clock::now();
    let b_release = release_kind(&rt.block_on(guard_b.release()));
    let b_hold = Hold {
        worker: 2,
        seq: 1,
        start: b_start,
        acquired: b_acquired,
        deadline: b_deadline,
        read: Some(b_read),
        write: Some(Write {
            sent,
            acked,
            accepted,
            value: v + 1,
        }),
        end: b_end,
        released: clock::now(),
        token: b_token,
        release: b_release.into(),
    };

    // A wakes up, past its deadline, and writes.
    let sent = clock::now();
    if sent <= a_deadline {
        problems.push("A woke before its deadline: the stall was too short".into());
    }
    let accepted = rt.block_on(write_counter(
        &mut store_a,
        &resource,
        &counter,
        a_token,
        a_value + 1,
    ));
    let acked = clock::now();
    let end = clock::now();
    let a_release = release_kind(&rt.block_on(guard_a.release()));
    notes.push(format!(
        "A stalled {} ms past its deadline; A's late write {}; A's release: {a_release}",
        sent.saturating_sub(a_deadline) / 1_000_000,
        if accepted { "accepted" } else { "rejected" }
    ));
    let a_hold = Hold {
        worker: 1,
        seq: 1,
        start: a_start,
        acquired: a_acquired,
        deadline: a_deadline,
        read: Some(a_read),
        write: Some(Write {
            sent,
            acked,
            accepted,
            value: a_value + 1,
        }),
        end,
        released: clock::now(),
        token: a_token,
        release: a_release.into(),
    };
    finish(
        rt,
        store,
        &counter,
        vec![a_hold, b_hold],
        fencing,
        name,
        want,
        notes,
        problems,
        began,
    )
}
