//! Long holders for the liveness rows: one lock of every kind (a mutex, a fenced mutex, a
//! reader, a writer, a semaphore permit), each on a resource of its own, held by this
//! process with background extension for a whole row while its nodes restart. A holder
//! the ensemble survives must survive too: the row counts the holders that lost their lock.

use std::time::{Duration, Instant};

use quorum_lock::{AutoExtend, LockGuard, LostSignal, Redlock, Result};

use crate::common::unique;

/// The holders' TTL: extensions every few hundred milliseconds.
const HOLD_TTL: Duration = Duration::from_secs(1);
/// How long the holders try to take their locks (fresh nodes sit out their first second).
const TAKE_WITHIN: Duration = Duration::from_secs(20);

/// The five holders, their guards and lost signals, on a runtime of their own.
pub struct LongHolders {
    runtime: tokio::runtime::Runtime,
    held: Vec<(&'static str, LockGuard, LostSignal)>,
}

impl LongHolders {
    /// Takes one lock of every kind through `client` (built with the row's settings) and
    /// extends each in the background.
    pub fn take(client: Redlock) -> LongHolders {
        Self::take_with_ttl(client, HOLD_TTL)
    }

    /// [`take`](Self::take) with locks of TTL `ttl`.
    pub fn take_with_ttl(client: Redlock, ttl: Duration) -> LongHolders {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("holders' runtime");
        let held = runtime.block_on(take_all(&client, ttl));
        LongHolders { runtime, held }
    }

    /// The kinds whose lock was lost so far.
    pub fn lost(&self) -> Vec<&'static str> {
        (self.held.iter())
            .filter(|(_, _, lost)| lost.is_lost())
            .map(|(kind, _, _)| *kind)
            .collect()
    }

    /// How many holders there are.
    pub fn count(&self) -> usize {
        self.held.len()
    }

    /// Releases every lock (best effort: a lost one has nothing to release).
    pub fn release(self) {
        let LongHolders { runtime, held } = self;
        runtime.block_on(async {
            for (_, guard, _) in held {
                let _ = guard.release().await;
            }
        });
    }
}

/// Each kind's lock with TTL `ttl`, extended in the background.
async fn take_all(client: &Redlock, ttl: Duration) -> Vec<(&'static str, LockGuard, LostSignal)> {
    let names = ["mutex", "fenced", "reader", "writer", "permit"];
    let mut held = Vec::new();
    for kind in names {
        let resource = unique(&format!("long-{kind}"));
        let mut guard = retry(|| take(client, kind, &resource, ttl)).await;
        guard.auto_extend(AutoExtend::new());
        let lost = guard.lost_signal();
        held.push((kind, guard, lost));
    }
    held
}

/// One lock of `kind` on `resource`, of TTL `ttl`.
async fn take(client: &Redlock, kind: &str, resource: &str, ttl: Duration) -> Result<LockGuard> {
    Ok(match kind {
        "mutex" => client.lock(resource, ttl).await?,
        "fenced" => client.lock(resource, ttl).fenced().await?.into_parts().0,
        "reader" => client.rwlock(resource)?.read(ttl).await?.into_guard(),
        "writer" => client.rwlock(resource)?.write(ttl).await?,
        _ => client
            .semaphore(resource, 2)?
            .acquire(ttl)
            .await?
            .into_guard(),
    })
}

/// `attempt` until it succeeds, at most [`TAKE_WITHIN`].
async fn retry<F, Fut>(mut attempt: F) -> LockGuard
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<LockGuard>>,
{
    let start = Instant::now();
    loop {
        match attempt().await {
            Ok(guard) => return guard,
            Err(e) if start.elapsed() < TAKE_WITHIN => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("a long holder got no lock within {TAKE_WITHIN:?}: {e}"),
        }
    }
}
