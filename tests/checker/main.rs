//! The mutual-exclusion checker: many workers (threads and separate processes) contend for a few
//! keys with short TTLs while faults are injected at random; every tenure writes to a ledger through
//! a fence. Afterwards the ledger and the lease rows must prove that no two tenures of a key
//! overlapped, tokens only grew in ledger order, and no write by a token landed after a higher token
//! wrote. The same for the elector (term-fenced writes) and for membership (no unit worked on by two
//! processes at once).
//!
//! Faults: network cuts, blackholes, latency, backends killed, idle backends ended, connections
//! closed right after the server's answer (the statement committed, the answer is lost), new
//! connections delayed (so deadline cancels land late), paused worker processes; some pools end idle
//! sessions themselves (`idle_session_timeout`). Every test also runs busy threads that load the
//! CPUs in bursts (`PGTENURE_CHECKER_LOAD` of them, default 2), so ordering races show on two cores.
//! Leases add short TTLs (renewals finishing at their deadline race the watcher's cancel: any
//! application statement cancelled is a failure), two threads of one family contending for a key
//! (no lease may still say `is_held` after another lease of its key was granted); membership adds a
//! slow reconciler and an operator who moves units between live processes with plain `UPDATE`s,
//! and a fleet of eight beside one slot crash-looping under new ids (healthy processes shed none to
//! it, never more than its share without a working owner for longer than a TTL).
//!
//! Length: `PGTENURE_CHECKER_SECS` seconds (default 12), e.g. an hour:
//! `PGTENURE_CHECKER_SECS=3600 cargo test --release --test checker -- --nocapture --test-threads 6`
//! (every subject side by side).
//!
//! One file per primitive (`leases`, `elector`, `membership`, `schedule`, `semaphores`), `rolling` for a
//! membership fleet of the previous release and this one on migrated tables, and `campaign` for the
//! leadership loop (requested resignations, stops and slow answers: never two members leading at
//! once, events in decision order); what they share is in `harness`.

#[path = "../common/mod.rs"]
mod common;

mod campaign;
mod crash_loops;
mod elector;
mod harness;
mod leases;
mod membership;
mod rolling;
#[path = "../common/rolling.rs"]
mod rolling_fleet;
mod schedule;
mod semaphores;
