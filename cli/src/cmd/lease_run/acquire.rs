//! Acquiring lease-run's lease (or permit): tried again while `--wait` lasts, each statement sent
//! from a thread of its own so that a signal is heard while it is on its way; and releasing it.

use std::thread;
use std::time::{Duration, Instant};

use pgtenure::crossbeam_channel::{bounded, never, select};
use pgtenure::postgres::error::SqlState;

use super::held::{describe, Held, Refused, Source};
use crate::signals::{signal_name, Signals};
use crate::Failure;

/// How often an acquire is tried again while `--wait` lasts.
const RETRY: Duration = Duration::from_millis(250);

/// Acquires the lease `key` (or a permit of it) for `ttl`, trying again while `wait` (`--wait`)
/// lasts: `None` when not acquired in time (said on stderr), `Some(Err(signal))` when a signal
/// came first.
pub(super) fn acquire(
    source: &Source,
    key: &str,
    ttl: Duration,
    wait: Duration,
    signals: &Signals,
) -> Result<Option<Result<Held, i32>>, Failure> {
    // `--wait` is at most 100 years, yet a far `Instant` may not exist: then it waits without end.
    let until = Instant::now().checked_add(wait);
    let mut created = false;
    // A release elsewhere (with handover notifications on) wakes the wait at once. Only for a
    // wait: the listener connects at its first waiter.
    let freed = match wait.is_zero() {
        true => None,
        false => source.watch_released(key)?,
    };
    let never = never();
    let woken = freed.as_ref().map_or(&never, |f| f.receiver());
    loop {
        let left = until.map_or(wait, |until| {
            until.saturating_duration_since(Instant::now())
        });
        if let Some(signal) = signals.first() {
            return Ok(Some(Err(signal)));
        }
        let outcome = match attempt(source, key, ttl, signals)? {
            Ok(outcome) => outcome,
            Err(signal) => return Ok(Some(Err(signal))),
        };
        let refusal = match outcome {
            Ok(Ok(held)) => return Ok(Some(Ok(held))),
            Ok(Err(refusal)) => refusal,
            // A first lease in this database: make its table (idempotent, safe from every
            // instance at once) and try again at once.
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) && !created => {
                source.create_table()?;
                created = true;
                continue;
            }
            // A database that is briefly unreachable, or a statement its statement_timeout
            // cancelled, while we wait anyway: try again.
            Err(e) if (e.is_connection() || e.is_timeout()) && !left.is_zero() => {
                say!(
                    "pgtenure: acquiring {} failed ({e}); trying again",
                    source.what(key)
                );
                Refused::Failed
            }
            Err(e) => return Err(e.into()),
        };
        if left.is_zero() {
            say!(
                "pgtenure: {} not acquired: {}",
                source.what(key),
                describe(&refusal)
            );
            return Ok(None);
        }
        select! {
            recv(signals.received) -> signal => {
                if let Ok(signal) = signal {
                    return Ok(Some(Err(signal)));
                }
            }
            recv(woken) -> _ => {}
            default(left.min(RETRY)) => {}
        }
    }
}

/// One acquire statement, sent from a thread of its own while this thread watches for signals:
/// `Err(signal)` when one came while the statement was on its way (waiting on a row lock, or on a
/// slow database).
///
/// A signal does not abandon the statement at once: a lease it grants is released here, rather
/// than left to block the key until its TTL with nobody running CMD. A second signal stops the
/// wait; the statement's thread is then left behind (pgtenure exits), and a lease it is granted
/// lapses at its TTL, unrenewed. Otherwise the thread is joined before this returns.
fn attempt(
    source: &Source,
    key: &str,
    ttl: Duration,
    signals: &Signals,
) -> Result<Result<pgtenure::Result<Result<Held, Refused>>, i32>, Failure> {
    let (tx, done) = bounded(1);
    let thread = {
        let source = source.clone();
        let key = key.to_owned();
        thread::Builder::new()
            .name("pgtenure-acquire".into())
            .spawn(move || {
                // Unsent when pgtenure stopped waiting: the lease, if any, is dropped (released).
                let _ = tx.send(source.acquire(&key, ttl));
            })?
    };
    let finished = |outcome: Result<_, _>| -> Result<_, Failure> {
        let _ = thread.join();
        outcome.map_err(|_| "the acquire's thread ended without an answer".into())
    };
    let signal = select! {
        recv(done) -> outcome => return finished(outcome).map(Ok),
        recv(signals.received) -> signal => match signal {
            Ok(signal) => signal,
            // The signal thread is gone: only the statement is left to wait for.
            Err(_) => return finished(done.recv()).map(Ok),
        },
    };
    say!(
        "pgtenure: got {} while acquiring {}; CMD will not run. Waiting for the acquire \
         statement to return, to release it if it was granted (another signal exits at once)",
        signal_name(signal),
        source.what(key)
    );
    let outcome = select! {
        recv(done) -> outcome => outcome,
        recv(signals.received) -> second => match second {
            Ok(_) => {
                say!(
                    "pgtenure: exiting without waiting; a lease granted to the acquire still on \
                     its way lapses at its TTL"
                );
                return Ok(Err(signal));
            }
            Err(_) => done.recv(),
        },
    };
    if let Ok(Ok(Ok(held))) = finished(outcome) {
        release(key, held);
    }
    Ok(Err(signal))
}

/// Releases the lease (or permit) after CMD ended; a failure is said, and the row lapses at its TTL.
pub(super) fn release(key: &str, held: Held) {
    if let Err(e) = held.release() {
        say!("pgtenure: could not release lease {key:?} ({e}); it lapses at its TTL");
    }
}
