//! What the stateright model checks share: a model's [`Tick`] (ticks to durations and back,
//! and the validity a won attempt leaves in whole ticks), [`bits`] of a node mask, and one
//! way to run a checker and judge it: [`check`] explores a model in a [`Search`] order,
//! optionally until one property is discovered, and prints how many states it saw;
//! [`Explored::assert_safe`] asserts that `always` properties hold and `sometimes` ones are
//! reached; [`Explored::assert_caught`] asserts that an `always` property is broken and
//! prints the steps that break it.
//!
//! Each model file includes it with `#[path = "common/model_check.rs"] mod model_check;`.
#![allow(dead_code)] // Each model file uses what it needs.

use std::fmt::Debug;
use std::hash::Hash;
use std::time::{Duration, Instant};

use quorum_lock::safety;
use stateright::{Checker, HasDiscoveries, Model};

/// A model's unit of time.
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    millis: u64,
}

impl Tick {
    /// A tick of `millis` milliseconds.
    pub const fn from_millis(millis: u64) -> Self {
        Self { millis }
    }

    /// The tick's length in milliseconds.
    pub const fn as_millis(self) -> u64 {
        self.millis
    }

    /// The duration of `n` ticks.
    pub fn times(self, n: u8) -> Duration {
        Duration::from_millis(u64::from(n) * self.millis)
    }

    /// Whole ticks in `d`, rounded down (the safe side for a validity).
    pub fn ticks_down(self, d: Duration) -> u8 {
        u8::try_from(d.as_millis() / u128::from(self.millis)).unwrap_or(u8::MAX)
    }

    /// Whole ticks in `d`, rounded up (the safe side for a wait).
    pub fn ticks_up(self, d: Duration) -> u8 {
        u8::try_from(d.as_millis().div_ceil(u128::from(self.millis))).unwrap_or(u8::MAX)
    }

    /// The validity a won attempt with a TTL of `ttl` ticks leaves one tick after it began,
    /// in whole ticks rounded down (the crate's `safety::lease_validity`, drift factor 0).
    pub fn validity(self, ttl: u8) -> u8 {
        let left = safety::lease_validity(self.times(ttl), self.times(1), 0.0);
        self.ticks_down(left.unwrap_or_default())
    }
}

/// The indices of the bits set in `mask` (the nodes of a node mask), lowest first.
pub fn bits(mask: u8) -> impl Iterator<Item = usize> {
    (0..8).filter(move |i| mask & (1 << i) != 0)
}

/// The order in which [`check`] explores the states.
pub enum Search<S> {
    /// Breadth first: the shortest path to each discovery.
    BreadthFirst,
    /// Depth first.
    DepthFirst,
    /// Depth first, visiting one state per class of states with the same futures: the
    /// function maps a state to its class's representative. Stateright's breadth-first
    /// checker ignores such a function, so a reduction by symmetry is depth first.
    Symmetric(fn(&S) -> S),
}

/// A finished exploration, named by the label it was printed with.
pub struct Explored<M: Model> {
    label: String,
    checker: Box<dyn Checker<M>>,
}

/// Explores `model` in the `search` order, to the end or, with `stop_at`, until that
/// property has a discovery (a discovery of another property does not stop it). Prints
/// `label`, the number of unique states and the time taken.
pub fn check<M>(
    label: &str,
    model: M,
    search: Search<M::State>,
    stop_at: Option<&'static str>,
) -> Explored<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    let started = Instant::now();
    let builder = model.checker();
    let builder = match stop_at {
        Some(property) => builder.finish_when(HasDiscoveries::AnyOf([property].into())),
        None => builder,
    };
    let checker: Box<dyn Checker<M>> = match search {
        Search::BreadthFirst => Box::new(builder.spawn_bfs().join()),
        Search::DepthFirst => Box::new(builder.spawn_dfs().join()),
        Search::Symmetric(representative) => {
            Box::new(builder.symmetry_fn(representative).spawn_dfs().join())
        }
    };
    eprintln!(
        "{label}: {} states in {:.2?}",
        checker.unique_state_count(),
        started.elapsed()
    );
    let label = label.to_owned();
    Explored { label, checker }
}

impl<M> Explored<M>
where
    M: Model,
    M::State: Clone + PartialEq,
    M::Action: Clone + PartialEq + Debug,
{
    /// No counterexample to any of the `always` properties in `holds`, and an example of
    /// each `sometimes` property in `reached` (its length printed).
    #[track_caller]
    pub fn assert_safe(&self, holds: &[&'static str], reached: &[&'static str]) {
        let label = &self.label;
        for &property in holds {
            if let Some(path) = self.checker.discovery(property) {
                let steps = path.into_actions();
                panic!("{label}: counterexample to {property}: {steps:?}");
            }
        }
        for &property in reached {
            let Some(path) = self.checker.discovery(property) else {
                panic!("{label}: {property} never reached");
            };
            let steps = path.into_actions().len();
            eprintln!("{label}: {property}: after {steps} steps");
        }
    }

    /// A counterexample to the `always` property `property`: prints and returns its steps
    /// up to the first state that breaks it.
    #[track_caller]
    pub fn assert_caught(&self, property: &'static str) -> Vec<M::Action> {
        let label = &self.label;
        let Some(path) = self.checker.discovery(property) else {
            panic!("{label} must break {property}");
        };
        let steps = self.steps_until_broken(path.into(), property);
        eprintln!(
            "{label} breaks {property} in {} steps: {steps:?}",
            steps.len()
        );
        steps
    }

    /// The actions of `path` up to the first state where `property`'s condition fails.
    fn steps_until_broken(
        &self,
        path: Vec<(M::State, Option<M::Action>)>,
        property: &'static str,
    ) -> Vec<M::Action> {
        let model = self.checker.model();
        let holds = (model.properties().into_iter())
            .find(|p| p.name == property)
            .map(|p| p.condition)
            .expect("a property of the model");
        (path.into_iter())
            .take_while(|(state, _)| holds(model, state))
            .filter_map(|(_, action)| action)
            .collect()
    }
}
