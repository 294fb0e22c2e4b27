//! The client set-up most tests share: one place for the settings that suit throw-away
//! test servers on a loaded machine.

use std::time::Duration;

use quorum_lock::{Redlock, RedlockBuilder};

/// Generous per-node timeout: tests share two cores with many servers.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// A builder on `urls` with restart quarantine off (fresh test servers would hold every
/// vote for one TTL, and these tests count every vote; quarantine has its own tests) and
/// [`NODE_TIMEOUT`].
pub fn builder(urls: &[String]) -> RedlockBuilder {
    Redlock::builder()
        .restart_quarantine(false)
        .nodes(urls)
        .node_timeout(NODE_TIMEOUT)
}

/// [`builder`] retrying every 2 ms, backing off to 20 ms, built.
pub fn client(urls: &[String]) -> Redlock {
    builder(urls)
        .retry_delay(Duration::from_millis(2))
        .max_retry_delay(Duration::from_millis(20))
        .build()
        .expect("valid configuration")
}

/// Locks `resource` for `ttl` on `redlock` and releases it, panicking on any error: a
/// warm-up, or a check that the client works.
pub async fn lock_and_release(redlock: &Redlock, resource: &str, ttl: Duration) {
    let guard = redlock.lock(resource, ttl).await.unwrap();
    guard.release().await.unwrap();
}

/// The safety tests' client: a 200 ms node timeout, retries every 2 ms backing off to
/// 20 ms, `ttl` by default, restart quarantine as given.
pub fn safety_client(urls: &[String], quarantine: bool, ttl: Duration) -> Redlock {
    Redlock::builder()
        .nodes(urls)
        .node_timeout(Duration::from_millis(200))
        .retry_delay(Duration::from_millis(2))
        .max_retry_delay(Duration::from_millis(20))
        .default_ttl(ttl)
        .restart_quarantine(quarantine)
        .build()
        .unwrap()
}

/// A client of the one member at `url`, as a process run from cron builds it (restart
/// quarantine on): TTLs of 2 s under a 3 s ceiling.
pub fn cron_client(url: &str) -> Redlock {
    Redlock::builder()
        .nodes([url])
        .retry_delay(Duration::from_millis(20))
        .max_retry_delay(Duration::from_millis(100))
        .ttl_ceiling(Duration::from_secs(3))
        .default_ttl(Duration::from_secs(2))
        .build()
        .expect("valid configuration")
}

/// Runs new processes ([`cron_client`]s, each waiting 1 s for `resource`) one after
/// another until one gets the lock, and releases it; panics when none does within 15 s of
/// `learnt` (when the first client learnt the member's promoted master).
pub async fn new_processes_until_one_locks(url: &str, resource: &str, learnt: std::time::Instant) {
    loop {
        let cron = cron_client(url);
        let run = (cron.lock(resource, Duration::from_secs(2)))
            .wait(Duration::from_secs(1))
            .await;
        if let Ok(guard) = run {
            println!(
                "a new process voted {:?} after the first learnt",
                learnt.elapsed()
            );
            guard.release().await.expect("released");
            cron.shutdown().await;
            return;
        }
        cron.shutdown().await;
        assert!(
            learnt.elapsed() < Duration::from_secs(15),
            "no new process got the promoted master's vote within 15 s: {run:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
