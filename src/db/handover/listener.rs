//! The handover listener's thread: connects outside the pool, proves the connection direct,
//! `LISTEN`s on the channels that have waiters and wakes them; reconnects with back-off.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{bounded, select, Receiver, TryRecvError};
use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;

use super::registry::{Handover, Registry};
use crate::db::conn::MakeTls;
use crate::error::{Error, Result};
use crate::statement::{proven_direct, Targets};

/// How often the listener looks up from the connection: for a stop, and for a channel that gained
/// its first waiter. It bounds how long dropping the last `Db` clone waits for the thread.
pub(super) const TICK: Duration = Duration::from_millis(100);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

const LISTEN: &str = include_str!("../../../sql/db/listen.sql");

type Connect = Box<dyn Fn() -> std::result::Result<Client, postgres::Error> + Send>;

/// Starts the listener of a `Db` built from `config` (its own connection, under the application
/// name with ` (listener)` added). Without `trust_direct` (the statement mode `protocol` says the
/// connection is direct or in a pooler's session mode), it listens only once its session proves it
/// reaches the server directly: a transaction pooler would lose the `LISTEN`.
pub(crate) fn start<T: MakeTls>(
    config: &postgres::Config,
    tls: T,
    trust_direct: bool,
) -> Result<Arc<Handover>> {
    let mut config = config.clone();
    config.application_name(&listener_name(config.get_application_name()));
    let targets = Targets::of(&config);
    let join_bound = config.get_connect_timeout().copied().unwrap_or(TICK) + 2 * TICK;
    let connect: Connect = Box::new(move || config.connect(tls.clone()));
    let registry = Arc::new(Registry::default());
    let (stop, stopped) = bounded::<()>(0);
    // Disconnected when the thread ends (its sender is dropped then, on a panic too).
    let (ended, done) = bounded::<()>(0);
    let thread = {
        let registry = Arc::clone(&registry);
        std::thread::Builder::new()
            .name("pgtenure-listen".into())
            .spawn(move || {
                let _ended = ended;
                let proof = (!trust_direct).then_some(targets);
                run(&connect, proof.as_ref(), &registry, &stopped);
                registry.set_listening(false);
            })
            .map_err(|e| Error::setup("could not start the handover listener").with_source(e))?
    };
    Ok(Arc::new(Handover {
        registry,
        stop: Some(stop),
        thread: Some(thread),
        done,
        join_bound,
    }))
}

/// The application name with ` (listener)`, cut to the 63 bytes the server keeps.
fn listener_name(name: Option<&str>) -> String {
    const SUFFIX: &str = " (listener)";
    let mut name = name.unwrap_or("pgtenure").to_owned();
    while name.len() + SUFFIX.len() > 63 {
        name.pop();
    }
    name + SUFFIX
}

/// Connects, listens and reconnects until stopped, or until a connection is not proven direct.
fn run(connect: &Connect, proof: Option<&Targets>, registry: &Registry, stopped: &Receiver<()>) {
    // No connection until a first waiter: a process that only frees keys sends notifications
    // and listens for none.
    while registry.is_empty() {
        if !continue_after(TICK, stopped) {
            return;
        }
    }
    let mut backoff = FIRST_BACKOFF;
    let mut told = false;
    loop {
        if stopped.try_recv() != Err(TryRecvError::Empty) {
            return;
        }
        let failure = match connect() {
            Ok(mut client) => match proof.map(|t| proven_direct(&mut client, t)) {
                Some(Ok((false, why))) => {
                    log::warn!(target: "pgtenure::db", "handover notifications: the listener's connection is not proven to reach the server directly ({why}); a transaction pooler would lose its LISTEN, so waiters poll as without notifications (statement_mode=protocol asserts a direct connection)");
                    return;
                }
                Some(Err(e)) => format!("asking the session where it runs failed: {e}"),
                None | Some(Ok((true, _))) => {
                    backoff = FIRST_BACKOFF;
                    match listen(&mut client, registry, stopped, &mut told) {
                        None => return,
                        Some(e) => e,
                    }
                }
            },
            Err(e) => format!("connecting failed: {e}"),
        };
        registry.set_listening(false);
        if told {
            log::debug!(target: "pgtenure::db", "handover listener: {failure}");
        } else {
            log::warn!(target: "pgtenure::db", "handover notifications: the listener lost its connection or could not open one ({failure}); waiters poll until it reconnects");
            told = true;
        }
        if !continue_after(backoff, stopped) {
            return;
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Waits `backoff` unless stopped first: whether to go on.
fn continue_after(backoff: Duration, stopped: &Receiver<()>) -> bool {
    select! {
        recv(stopped) -> _ => false,
        default(backoff) => true,
    }
}

/// Listens on `client` until stopped (`None`) or its connection fails (why); once listening,
/// clears `told` (a later loss is logged again).
fn listen(
    client: &mut Client,
    registry: &Registry,
    stopped: &Receiver<()>,
    told: &mut bool,
) -> Option<String> {
    let mut first = true;
    loop {
        if stopped.try_recv() != Err(TryRecvError::Empty) {
            return None;
        }
        if let Some(channels) = registry.channels(first) {
            for channel in &channels {
                let quoted = postgres_protocol::escape::escape_identifier(channel);
                if let Err(e) = client.batch_execute(&LISTEN.replace("{channel}", &quoted)) {
                    return Some(format!("LISTEN failed: {e}"));
                }
            }
            if first {
                registry.set_listening(true);
                if std::mem::take(told) {
                    log::info!(target: "pgtenure::db", "handover notifications: the listener is connected again");
                }
            }
            // What was freed before these LISTENs took effect was missed: poll now.
            registry.wake_all((!first).then_some(&channels[..]));
            first = false;
        }
        {
            let mut notifications = client.notifications();
            let mut waiting = notifications.timeout_iter(TICK);
            // Until TICK passes without one (a stop is checked between notifications too).
            while stopped.try_recv() == Err(TryRecvError::Empty) {
                match waiting.next() {
                    Ok(Some(n)) => registry.wake(n.channel(), n.payload()),
                    Ok(None) => break,
                    Err(e) => return Some(format!("the connection failed: {e}")),
                }
            }
        }
        if client.is_closed() {
            return Some("the connection closed".to_owned());
        }
    }
}
