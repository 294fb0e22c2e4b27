//! Several workers increment one SQLite counter under the lock, each with its own client
//! and its own database connection; three of the holders are paused past their validity
//! between their read and their write, until a newer holder has read the row. With the
//! claim-on-read pattern every paused holder's write is rejected and the counter equals
//! exactly the number of accepted increments, each of which wrote the next value. With
//! `WHERE fence <= $t`, the same schedule loses exactly the three paused increments.
//!
//! The schedule is fixed by a shared board, not by timing: a paused holder resumes when a
//! newer holder has read the row, and that newer holder writes only after every older
//! paused holder has written. Real `redis-server` nodes, a real SQLite file.

use std::collections::BTreeSet;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorum_lock::FencingToken;
use quorum_lock_fenced_sqlite::{Ledger, Nodes, Pattern, client, fencing_token};

const WORKERS: usize = 4;
const PER_WORKER: usize = 5;
/// Acquisitions (counted from 1 over all workers) whose holder pauses after reading.
const PAUSE_AT: [usize; 3] = [2, 7, 12];
const TTL: Duration = Duration::from_secs(1);
const RESOURCE: &str = "fenced-sqlite:counter";
const ROW: &str = "counter";

/// What the workers did, recorded as they go.
#[derive(Debug, Default)]
struct Board {
    acquisitions: usize,
    /// Acquisitions each worker has still to start.
    left: Vec<usize>,
    /// Paused holders that have not written yet.
    waiting: BTreeSet<FencingToken>,
    /// The largest token that has read the row.
    latest_read: Option<FencingToken>,
    paused: Vec<FencingToken>,
    accepted: Vec<i64>,
    rejected: Vec<FencingToken>,
}

impl Board {
    /// Worker `w` acquired with `token`: whether it pauses. Only while another worker has
    /// acquisitions left, so that a newer holder will come and read the row.
    fn acquired(&mut self, w: usize, token: FencingToken) -> bool {
        self.acquisitions += 1;
        self.left[w] -= 1;
        let others_left = self.left.iter().enumerate().any(|(i, n)| i != w && *n > 0);
        let pause = PAUSE_AT.contains(&self.acquisitions) && others_left;
        if pause {
            self.waiting.insert(token);
            self.paused.push(token);
        }
        pause
    }

    fn read(&mut self, token: FencingToken) {
        self.latest_read = self.latest_read.max(Some(token));
    }

    fn wrote(&mut self, token: FencingToken, accepted: bool, value: i64) {
        self.waiting.remove(&token);
        if accepted {
            self.accepted.push(value);
        } else {
            self.rejected.push(token);
        }
    }
}

/// Polls the board until `ready` holds (a condition, not a duration); panics after 60 s.
async fn until(board: &Mutex<Board>, what: &str, ready: impl Fn(&Board) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready(&board.lock().unwrap()) {
        assert!(Instant::now() < deadline, "waited 60 s for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn worker(
    w: usize,
    urls: Vec<String>,
    db: Ledger,
    pattern: Pattern,
    board: Arc<Mutex<Board>>,
) {
    let redlock = client(&urls).unwrap();
    for _ in 0..PER_WORKER {
        let guard = redlock
            .lock(RESOURCE, TTL)
            .fencing()
            .wait(Duration::from_secs(60))
            .await
            .unwrap();
        let token = fencing_token(&guard).unwrap();
        let pause = board.lock().unwrap().acquired(w, token);
        let seen = db
            .read(pattern, ROW, token)
            .unwrap()
            .expect("the newest holder can always claim the row");
        board.lock().unwrap().read(token);
        if pause {
            // Paused past its validity: until a newer holder, which could only acquire
            // after this lock expired, has read the row.
            until(&board, "a newer reader", |b| b.latest_read > Some(token)).await;
            assert_eq!(guard.validity(), Duration::ZERO, "paused past its validity");
        } else {
            // Let every older paused holder write first: its write lands between this
            // holder's read and write, the window `fence <= $t` leaves open.
            until(&board, "older paused holders", |b| {
                b.waiting.range(..token).next().is_none()
            })
            .await;
        }
        let accepted = db.write(pattern, ROW, token, seen + 1).unwrap();
        board.lock().unwrap().wrote(token, accepted, seen + 1);
        // A paused holder's lock is gone; the release then finds nothing of ours.
        let _ = guard.release().await;
    }
}

/// Runs the workers with `pattern`; returns the board and the counter's final value.
async fn run(pattern: Pattern) -> (Board, i64) {
    let nodes = Nodes::start(3).unwrap();
    let path = nodes.dir().join("counter.sqlite3");
    let setup = Ledger::open(&path).unwrap();
    setup.create(ROW).unwrap();
    let board = Arc::new(Mutex::new(Board {
        left: vec![PER_WORKER; WORKERS],
        ..Board::default()
    }));
    let tasks: Vec<_> = (0..WORKERS)
        .map(|w| {
            let db = Ledger::open(&path).unwrap();
            tokio::spawn(worker(w, nodes.urls(), db, pattern, Arc::clone(&board)))
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let (value, _) = setup.peek(ROW).unwrap();
    let board = std::mem::take(&mut *board.lock().unwrap());
    (board, value)
}

fn one_to(n: usize) -> Vec<i64> {
    RangeInclusive::new(1, n as i64).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_on_read_rejects_every_paused_increment_and_loses_none() {
    let (board, value) = run(Pattern::ClaimOnRead).await;
    let total = WORKERS * PER_WORKER;
    assert_eq!(board.acquisitions, total);
    assert_eq!(board.paused.len(), PAUSE_AT.len(), "{board:?}");
    // Exactly the paused holders were refused, and nobody else.
    assert_eq!(board.rejected, board.paused, "{board:?}");
    let accepted = total - PAUSE_AT.len();
    assert_eq!(board.accepted.len(), accepted, "{board:?}");
    assert_eq!(
        value, accepted as i64,
        "the counter equals the accepted increments"
    );
    // Each accepted increment wrote the next value: none overwrote another.
    let mut written = board.accepted.clone();
    written.sort_unstable();
    assert_eq!(written, one_to(accepted), "{board:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_at_most_accepts_the_paused_increments_and_loses_them() {
    let (board, value) = run(Pattern::FenceAtMost).await;
    let total = WORKERS * PER_WORKER;
    assert_eq!(board.paused.len(), PAUSE_AT.len(), "{board:?}");
    assert_eq!(board.rejected, [], "every write passed `fence <= $t`");
    assert_eq!(board.accepted.len(), total);
    // Each paused holder's write landed and was then overwritten by a newer holder that
    // had read the value before it: one increment lost per pause.
    assert_eq!(value, (total - PAUSE_AT.len()) as i64, "{board:?}");
}
