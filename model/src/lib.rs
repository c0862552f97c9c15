//! Stateright models of pgtenure's protocols (issue 36, `DESIGN.md` "Testing": model checking).
//!
//! Each model's actions are the statements pgtenure sends, one statement one atomic step, and the
//! local steps between them, in an environment that delays or drops answers, loses the connection
//! after a commit, pauses processes and kills and restarts them. `tests/` checks every reachable
//! state within the bounds, and runs each step function's statement against PostgreSQL
//! (`tests/differential*.rs`). Models: `leases`, `elector`, `ticks` (tick claims and the scheduler),
//! `membership`.

pub mod elector;
pub mod leases;
pub mod membership;
pub mod ticks;
