//! How late `quorum-lock`'s own timers fire: on a starved host (busy cores, `nice`, a
//! throttled cgroup) a SIGKILL timed for 100 ms before the lock's validity ends can land
//! after it. The supervisor wakes on a short tick and records how late each wake-up was;
//! the kill margin grows with the worst lateness seen recently. Pure: times come in as
//! arguments.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// How often the supervisor measures its lateness.
pub(crate) const TICK: Duration = Duration::from_millis(50);

/// How long a measured lateness keeps widening the margin.
const MEMORY: Duration = Duration::from_secs(10);

/// The margin is the base plus this many times the worst recent lateness: the kill itself
/// may be as late again, and the starvation may worsen before it.
const LATENESS_FACTOR: u32 = 3;

/// The recent wake-up lateness of one process.
#[derive(Debug)]
pub(crate) struct LagMeter {
    /// (when measured, how late), oldest first; only the ones that may still be the worst.
    samples: VecDeque<(Instant, Duration)>,
    /// When the next tick is due.
    due: Instant,
}

impl LagMeter {
    /// A meter whose first tick is due a [`TICK`] after `now`.
    pub(crate) fn new(now: Instant) -> Self {
        LagMeter {
            samples: VecDeque::new(),
            due: now + TICK,
        }
    }

    /// When the next tick is due: the caller sleeps until then and calls
    /// [`ticked`](Self::ticked).
    pub(crate) fn next_tick(&self) -> Instant {
        self.due
    }

    /// The tick due at [`next_tick`](Self::next_tick) woke at `woke`: records its
    /// lateness, and the next is due a [`TICK`] later.
    pub(crate) fn ticked(&mut self, woke: Instant) {
        self.record(self.due, woke);
        self.due = woke + TICK;
    }

    /// Records a wake-up due at `due` that happened at `woke`.
    fn record(&mut self, due: Instant, woke: Instant) {
        let late = woke.saturating_duration_since(due);
        // A sample no larger than a newer one can never be the worst again.
        while self.samples.back().is_some_and(|&(_, l)| l <= late) {
            self.samples.pop_back();
        }
        self.samples.push_back((woke, late));
        while self
            .samples
            .front()
            .is_some_and(|&(at, _)| woke.saturating_duration_since(at) > MEMORY)
        {
            self.samples.pop_front();
        }
    }

    /// The worst lateness measured within the last [`MEMORY`] before `now`.
    pub(crate) fn worst(&self, now: Instant) -> Duration {
        self.samples
            .iter()
            .find(|&&(at, _)| now.saturating_duration_since(at) <= MEMORY)
            .map_or(Duration::ZERO, |&(_, late)| late)
    }

    /// The kill margin: `base` plus [`LATENESS_FACTOR`] times the worst recent lateness.
    pub(crate) fn margin(&self, base: Duration, now: Instant) -> Duration {
        base.saturating_add(self.worst(now).saturating_mul(LATENESS_FACTOR))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn the_margin_grows_with_the_worst_recent_lateness_and_forgets_it() {
        let start = Instant::now();
        let mut meter = LagMeter::new(start);
        assert_eq!(meter.margin(MS(100), start), MS(100));
        meter.record(start, start + MS(2));
        meter.record(start + MS(20), start + MS(60));
        meter.record(start + MS(80), start + MS(85));
        let now = start + MS(100);
        assert_eq!(meter.worst(now), MS(40));
        assert_eq!(meter.margin(MS(100), now), MS(220));
        // Ten seconds later the 40 ms is forgotten, the 5 ms of the last wake-up too.
        assert_eq!(meter.worst(start + MS(60) + MEMORY), MS(40));
        assert_eq!(meter.worst(start + MS(61) + MEMORY), MS(5));
        assert_eq!(meter.worst(start + MS(86) + MEMORY), Duration::ZERO);
        // An early wake-up counts as no lateness.
        meter.record(start + MS(200), start + MS(150));
        assert_eq!(meter.worst(start + MS(200)), MS(40));
    }

    #[test]
    fn a_tick_records_its_lateness_and_schedules_the_next() {
        let start = Instant::now();
        let mut meter = LagMeter::new(start);
        assert_eq!(meter.next_tick(), start + TICK);
        meter.ticked(start + TICK + MS(30));
        assert_eq!(meter.worst(start + TICK + MS(30)), MS(30));
        assert_eq!(meter.next_tick(), start + TICK * 2 + MS(30));
    }

    #[test]
    fn the_meter_keeps_few_samples_under_steady_lateness() {
        let start = Instant::now();
        let mut meter = LagMeter::new(start);
        for i in 0..10_000u32 {
            let due = start + TICK * i;
            meter.record(due, due + MS(1));
        }
        assert!(meter.samples.len() <= 2, "{}", meter.samples.len());
        assert_eq!(meter.margin(MS(100), start + TICK * 10_000), MS(103));
    }
}
