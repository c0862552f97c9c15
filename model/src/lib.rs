//! Stateright models of pgtenure's protocols (issue 36, `DESIGN.md` "Testing": model checking).
//!
//! Each model's actions are the statements pgtenure sends, one statement one atomic step, and the
//! local steps between them, in an environment that delays or drops answers, loses the connection
//! after a commit, pauses processes and kills and restarts them, and (leases, the elector) fails
//! over to a standby that lost the last commits (`failover`). `tests/` checks every reachable
//! state within the bounds, and runs each step function's statement against PostgreSQL
//! (`tests/differential*.rs`). Models: `leases`, `elector`, `ticks` (tick claims and the scheduler),
//! `membership`, `semaphores`.

pub mod elector;
pub mod failover;
pub mod leases;
pub mod membership;
pub mod semaphores;
pub mod ticks;

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model};

/// Checks `model` breadth-first on one thread, to the end or, with `property`, until that property
/// is found broken; prints the states visited, the distinct states, the depth and the time under
/// `what`.
pub fn check<M>(model: M, what: &str, property: Option<&'static str>) -> impl Checker<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq,
{
    let started = Instant::now();
    let finish = match property {
        Some(property) => HasDiscoveries::AnyOf([property].into()),
        None => HasDiscoveries::All,
    };
    let checker = model
        .checker()
        .threads(1)
        .finish_when(finish)
        .spawn_bfs()
        .join();
    println!(
        "{what}: {} states ({} unique), depth {}, {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker
}

/// The shortest counterexample to `property` in `model` (a hole reintroduced, `what` naming it),
/// printed and returned as its trace.
///
/// # Panics
///
/// When the checker finds none: the hole went unnoticed.
pub fn counterexample<M>(model: M, what: &str, property: &'static str) -> String
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq,
{
    let checker = check(model, what, Some(property));
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("{what}: no counterexample to {property:?}"));
    let trace = format!("{path}");
    println!("{what} breaks {property:?}:\n{trace}");
    trace
}
