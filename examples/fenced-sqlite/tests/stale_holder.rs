//! A holder paused past its lock's validity, a newer holder, and one SQLite row: with the
//! claim-on-read pattern the stale read-modify-write is rejected in every interleaving;
//! with `WHERE fence <= $t` the same schedule loses an update. Real `redis-server` nodes,
//! a real SQLite file in a temporary directory; the pause ends on a condition (the lock
//! status shows the first holder's lock gone), not after a fixed sleep.

use std::time::Duration;

use quorum_lock::{FencingToken, LockGuard, Redlock};
use quorum_lock_fenced_sqlite::{Ledger, Nodes, Pattern, client, fencing_token, until_not_held_by};

const ROW: &str = "account";
const RESOURCE: &str = "fenced-sqlite:account";

/// Nodes, a client, and two connections to a ledger file whose row is at 0 (A's and B's).
/// `_nodes` is declared last so it outlives the connections opened in its directory.
struct Setup {
    redlock: Redlock,
    a_db: Ledger,
    b_db: Ledger,
    _nodes: Nodes,
}

impl Setup {
    fn new() -> Setup {
        let nodes = Nodes::start(3).unwrap();
        let redlock = client(&nodes.urls()).unwrap();
        let path = nodes.dir().join("ledger.sqlite3");
        let (a_db, b_db) = (Ledger::open(&path).unwrap(), Ledger::open(&path).unwrap());
        a_db.create(ROW).unwrap();
        Setup {
            redlock,
            a_db,
            b_db,
            _nodes: nodes,
        }
    }

    async fn acquire(&self, ttl: Duration) -> (LockGuard, FencingToken) {
        let guard = self
            .redlock
            .lock(RESOURCE, ttl)
            .fencing()
            .wait(Duration::from_secs(30))
            .await
            .unwrap();
        let token = fencing_token(&guard).unwrap();
        (guard, token)
    }

    /// A "pauses": returns once A's lock is no longer held on a majority.
    async fn pause_until_expired(&self, a: &LockGuard) {
        until_not_held_by(&self.redlock, RESOURCE, a.token(), Duration::from_secs(30))
            .await
            .unwrap();
    }
}

/// A claims and reads, is paused past its validity; B acquires, claims, reads and writes;
/// A resumes and writes its stale increment: 0 rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_write_after_the_newer_holders_write_is_rejected() {
    let s = Setup::new();
    let (a, a_token) = s.acquire(Duration::from_millis(300)).await;
    let a_seen = s.a_db.read(Pattern::ClaimOnRead, ROW, a_token).unwrap();
    assert_eq!(a_seen, Some(0));
    s.pause_until_expired(&a).await;

    let (b, b_token) = s.acquire(Duration::from_secs(2)).await;
    assert!(b_token > a_token, "{b_token} after {a_token}");
    let b_seen = s.b_db.read(Pattern::ClaimOnRead, ROW, b_token).unwrap();
    assert_eq!(b_seen, Some(0));
    assert!(s.b_db.write(Pattern::ClaimOnRead, ROW, b_token, 1).unwrap());

    // A resumes: its write matches no row.
    assert!(!s.a_db.write(Pattern::ClaimOnRead, ROW, a_token, 1).unwrap());
    assert_eq!(s.a_db.peek(ROW).unwrap(), (1, b_token.as_i64()));
    b.release().await.unwrap();
    drop(a);
}

/// The interleaving that `WHERE fence <= $t` gets wrong: A's stale write lands after B
/// read but before B wrote. With the claim it is rejected, and B's write lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_write_between_the_newer_holders_read_and_write_is_rejected() {
    let s = Setup::new();
    let (a, a_token) = s.acquire(Duration::from_millis(300)).await;
    let a_seen = s.a_db.read(Pattern::ClaimOnRead, ROW, a_token).unwrap();
    s.pause_until_expired(&a).await;

    let (b, b_token) = s.acquire(Duration::from_secs(2)).await;
    let b_seen = s.b_db.read(Pattern::ClaimOnRead, ROW, b_token).unwrap();
    assert_eq!((a_seen, b_seen), (Some(0), Some(0)));
    // A resumes now, between B's read and B's write.
    assert!(!s.a_db.write(Pattern::ClaimOnRead, ROW, a_token, 1).unwrap());
    assert!(s.b_db.write(Pattern::ClaimOnRead, ROW, b_token, 1).unwrap());
    assert_eq!(s.a_db.peek(ROW).unwrap(), (1, b_token.as_i64()));
    b.release().await.unwrap();
    drop(a);
}

/// The same schedule with a plain read and `UPDATE ... WHERE fence <= $t`: both writes are
/// accepted and the row shows one increment for two: A's update is lost. This is why the
/// holder must claim the row when it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_fence_at_most_the_same_schedule_loses_an_update() {
    let s = Setup::new();
    let (a, a_token) = s.acquire(Duration::from_millis(300)).await;
    let a_seen = s.a_db.read(Pattern::FenceAtMost, ROW, a_token).unwrap();
    s.pause_until_expired(&a).await;

    let (b, b_token) = s.acquire(Duration::from_secs(2)).await;
    let b_seen = s.b_db.read(Pattern::FenceAtMost, ROW, b_token).unwrap();
    assert_eq!((a_seen, b_seen), (Some(0), Some(0)));
    let a_wrote = s.a_db.write(Pattern::FenceAtMost, ROW, a_token, 1).unwrap();
    let b_wrote = s.b_db.write(Pattern::FenceAtMost, ROW, b_token, 1).unwrap();
    assert_eq!(
        (a_wrote, b_wrote),
        (true, true),
        "both writes pass the fence check"
    );
    let (value, fence) = s.a_db.peek(ROW).unwrap();
    assert_eq!(
        (value, fence),
        (1, b_token.as_i64()),
        "two accepted increments, one counted: an update was lost"
    );
    b.release().await.unwrap();
    drop(a);
}

/// A paused before it even read: by then B has claimed the row, so A's claim returns
/// nothing and A never computes from a value it could not write back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_cannot_claim_a_row_a_newer_holder_claimed() {
    let s = Setup::new();
    let (a, a_token) = s.acquire(Duration::from_millis(300)).await;
    s.pause_until_expired(&a).await;

    let (b, b_token) = s.acquire(Duration::from_secs(2)).await;
    assert_eq!(
        s.b_db.read(Pattern::ClaimOnRead, ROW, b_token).unwrap(),
        Some(0)
    );
    assert_eq!(
        s.a_db.read(Pattern::ClaimOnRead, ROW, a_token).unwrap(),
        None
    );
    assert!(s.b_db.write(Pattern::ClaimOnRead, ROW, b_token, 1).unwrap());
    assert_eq!(
        s.a_db.read(Pattern::ClaimOnRead, ROW, a_token).unwrap(),
        None
    );
    // B's own claim holds once: a second claim with the same token matches nothing.
    assert_eq!(
        s.b_db.read(Pattern::ClaimOnRead, ROW, b_token).unwrap(),
        None
    );
    assert_eq!(s.a_db.peek(ROW).unwrap(), (1, b_token.as_i64()));
    b.release().await.unwrap();
    drop(a);
}
