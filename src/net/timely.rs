//! A request bounded by a deadline, whose answer counts only when read before it.
//!
//! `tokio::time::timeout_at` polls its future before its timer: a client that runs late (a
//! stall, a throttled cgroup) and wakes after the deadline with the answer ready would take
//! it as in time. A round counts only answers that arrive within one node timeout of its
//! start (docs/safety.md, timing assumptions), so here an answer read at the deadline or later is
//! dropped, as if the timer had fired first.

use tokio::time::Instant;

use crate::rules::deadline::is_in_time;

/// `request`'s output when it is read before `deadline`; `None` once the deadline has come
/// (`request` then dropped, or its late output discarded).
pub(crate) async fn within<F: Future>(deadline: Instant, request: F) -> Option<F::Output> {
    let answer = tokio::time::timeout_at(deadline, request).await.ok()?;
    is_in_time(Instant::now(), deadline).then_some(answer)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn an_answer_ready_only_at_the_deadline_is_dropped() {
        let later = Instant::now() + Duration::from_secs(3600);
        assert_eq!(within(later, async { 7 }).await, Some(7));
        // Ready at once, but read at the deadline or after it: late.
        assert_eq!(within(Instant::now(), async { 7 }).await, None);
        let pending = std::future::pending::<u8>();
        assert_eq!(within(Instant::now(), pending).await, None);
    }
}
