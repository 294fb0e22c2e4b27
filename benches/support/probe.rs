//! The correctness probe every contender passes before it is timed, so that no one wins by
//! doing less: it acquires (the key is then on a majority of the nodes), a second
//! acquisition of the same resource is refused while it is held, and after the release the
//! key is gone from every node.

use std::sync::Arc;
use std::time::Duration;

use crate::TTL;
use crate::common::unique;
use crate::support::contender::{Contender, Subject};
use crate::support::stats::ms;

/// How long a second acquisition may try before it counts as refused (the waiting
/// contenders would wait for the whole TTL).
const REFUSED_AFTER: Duration = Duration::from_millis(300);

/// On how many of `urls` the key `res` exists (a fresh connection to each).
async fn holding(urls: &[String], res: &str) -> Result<usize, String> {
    let (urls, res) = (urls.to_vec(), res.to_string());
    tokio::task::spawn_blocking(move || {
        let mut n = 0;
        for url in &urls {
            let mut conn = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
                .map_err(|e| format!("probe connection to {url}: {e}"))?;
            let exists: usize = redis::cmd("EXISTS")
                .arg(&res)
                .query(&mut conn)
                .map_err(|e| format!("probe EXISTS on {url}: {e}"))?;
            n += exists;
        }
        Ok(n)
    })
    .await
    .map_err(|e| format!("probe task: {e}"))?
}

/// The probe for an async contender, on a fresh resource.
async fn probe_async(c: &Contender, urls: &[String]) -> Result<(), String> {
    let res = unique("probe");
    let held = c.acquire(&res).await?;
    let on = holding(urls, &res).await?;
    if on <= urls.len() / 2 {
        return Err(format!(
            "held, but the key is on {on} of {} nodes",
            urls.len()
        ));
    }
    if let Ok(Ok(_)) = tokio::time::timeout(REFUSED_AFTER, c.acquire(&res)).await {
        return Err("a second acquisition succeeded while held".into());
    }
    c.release(held).await?;
    match holding(urls, &res).await? {
        0 => Ok(()),
        on => Err(format!("released, but the key is still on {on} nodes")),
    }
}

/// The probe for the synchronous redlock crate, on a blocking thread.
async fn probe_redlock(rl: &Arc<redlock::RedLock>, urls: &[String]) -> Result<(), String> {
    let res = unique("probe");
    let rl = Arc::clone(rl);
    let ttl = usize::try_from(ms(TTL)).unwrap_or(usize::MAX);
    let (lock_res, handle) = (res.clone(), tokio::runtime::Handle::current());
    let urls_owned = urls.to_vec();
    tokio::task::spawn_blocking(move || {
        let held = |r: &str| handle.block_on(holding(&urls_owned, r));
        let lock = rl
            .lock(lock_res.as_bytes(), ttl)
            .map_err(|e| format!("lock: {e}"))?
            .ok_or("not acquired")?;
        let on = held(&lock_res)?;
        if on <= urls_owned.len() / 2 {
            return Err(format!("held, but the key is on {on} nodes"));
        }
        if let Ok(Some(_)) = rl.lock(lock_res.as_bytes(), ttl) {
            return Err("a second acquisition succeeded while held".into());
        }
        rl.unlock(&lock);
        match held(&lock_res)? {
            0 => Ok(()),
            on => Err(format!("released, but the key is still on {on} nodes")),
        }
    })
    .await
    .map_err(|e| format!("probe thread: {e}"))?
}

/// Probes every subject that is a lock (the "1 round trip" reference is not) and returns
/// the table note saying what passed and what did not.
pub async fn probe_all(subjects: &[(&str, Subject)], urls: &[String]) -> String {
    let mut failed = Vec::new();
    let mut passed = 0;
    for (name, s) in subjects {
        let result = match s {
            Subject::Async(Contender::OneTrip(_)) => continue,
            Subject::Async(c) => probe_async(c, urls).await,
            Subject::Sync(rl) => probe_redlock(rl, urls).await,
        };
        match result {
            Ok(()) => passed += 1,
            Err(e) => failed.push(format!("{name} FAILED: {e}")),
        }
    }
    let what = "probe before timing (acquire: key on a majority; a second acquire refused \
                while held; key gone from every node after release)";
    if failed.is_empty() {
        format!("{what}: passed by all {passed} locks")
    } else {
        format!("{what}: {}", failed.join("; "))
    }
}
