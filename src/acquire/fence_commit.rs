//! The fencing commit: the second round of a fencing acquisition, which mints the token
//! from the counters the ballot trusts and commits it on a majority of voting nodes.

use crate::acquire::ballot::{self, Read};
use crate::acquire::plan::Plan;
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::net::answers::{self, Collected, Stop};
use crate::net::call::Call;
use crate::net::fanout::Round;
use crate::protocol::{reply, scripts};
use crate::report::NodeOutcome;
use crate::rules::quorum::{self};
use crate::rules::safety::NextToken;

/// Second round of a fencing acquisition: the new token is one above the highest counter
/// that can be trusted ([`ballot::token`]: a majority of them is needed), and is committed
/// next to the lock on a majority of voting nodes before the guard exists: nodes whose
/// vote counted in `acquired` and that are still vouched for ([`ballot::fence_outcome`]).
/// Any two majorities share a node, so the next holder reads a counter at least this high
/// and mints a larger one.
pub(super) async fn commit_fence(
    ensemble: &Ensemble,
    plan: &Plan,
    token: &str,
    reads: &[Option<Read>],
    acquired: &Collected,
) -> Result<FencingToken> {
    ensemble.refuse_unfenced()?;
    let config = &ensemble.config;
    let fence = match ballot::token(reads, config.fence_floor, clock_us()) {
        // Past 2^53 the nodes cannot count exactly: refuse rather than risk a repeated
        // token.
        NextToken::Mint(fence) => {
            FencingToken::try_from(fence).map_err(|e| Error::Config(e.to_string()))?
        }
        NextToken::Exhausted => {
            return Err(Error::Config(
                "a fencing counter is at u64::MAX: no larger token exists".into(),
            ));
        }
    };
    let call = Call::script(&scripts::FENCE, config.space(), &plan.keys)
        .vote_write()
        .arg(token)
        .arg(fence.get());
    let mut round = Round::everywhere(ensemble.round_scope(), call);
    let collected = answers::collect(
        &ensemble.nodes,
        &mut round,
        |i, answer| {
            let committed = reply::one_or(answer, NodeOutcome::Acquired, NodeOutcome::NotHeld);
            let voted = acquired
                .outcomes
                .get(i)
                .map_or(&NodeOutcome::Pending, |(o, _)| o);
            ballot::fence_outcome(committed, voted, ensemble.vouches(i))
        },
        NodeOutcome::is_acquired,
        Stop::WhenCertain,
    )
    .await;
    round.finish_in_background(ensemble.round_scope());
    let votes = quorum::votes(&collected.outcomes, &NodeOutcome::Acquired);
    quorum::decide_reach(&votes)
        .into_result(|| collected.report(&ensemble.nodes))
        .map(|_| fence)
}

/// The wall clock in microseconds since the Unix epoch: the clock component of fencing
/// tokens ([`crate::rules::safety::next_token`]); 0 for a clock before the epoch.
pub(super) fn clock_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}
