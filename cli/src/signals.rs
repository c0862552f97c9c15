//! The signals that end the command's long runs (SIGINT, SIGTERM, SIGHUP, SIGQUIT), caught with
//! `signal-hook` and delivered on a channel: `lease-run` passes them to CMD's tree (and disarms job
//! control, which would stop it alone), the exporter and `--watch` stop on them.
//!
//! Catching replaces any inherited disposition: a command started in the background by a
//! non-interactive shell inherits SIG_IGN for SIGINT and SIGQUIT, and would otherwise ignore them.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use pgtenure::crossbeam_channel::{bounded, Receiver};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGTSTP};

/// A forwarded signal's name, for messages.
pub(crate) fn signal_name(signal: i32) -> String {
    match signal {
        SIGINT => "SIGINT".into(),
        SIGTERM => "SIGTERM".into(),
        SIGHUP => "SIGHUP".into(),
        SIGQUIT => "SIGQUIT".into(),
        other => format!("signal {other}"),
    }
}

/// The signals pgtenure catches (lease-run passes them to CMD's tree; any other signal
/// that ends pgtenure ends CMD through the parent-death signal).
const FORWARDED: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

/// The signals of [`FORWARDED`], caught and delivered on a channel.
#[derive(Debug)]
pub(crate) struct Signals {
    pub(crate) received: Receiver<i32>,
    /// A signal caught (0 until one is): set by the handler itself, so it is seen at once, before
    /// the signal thread has passed the signal on.
    caught: Arc<AtomicUsize>,
}

impl Signals {
    /// A signal caught since [`Signals::install`], if any (the latest, when several were).
    pub(crate) fn first(&self) -> Option<i32> {
        match self.caught.load(Ordering::SeqCst) {
            0 => None,
            signal => i32::try_from(signal).ok(),
        }
    }

    pub(crate) fn install() -> io::Result<Signals> {
        let caught = Arc::new(AtomicUsize::new(0));
        for number in FORWARDED {
            // Non-negative signal numbers.
            let value = usize::try_from(number).unwrap_or_default();
            signal_hook::flag::register_usize(number, caught.clone(), value)?;
        }
        let mut iterator = signal_hook::iterator::Signals::new(FORWARDED)?;
        let (tx, received) = bounded(16);
        thread::Builder::new()
            .name("pgtenure-signals".into())
            .spawn(move || {
                for signal in iterator.forever() {
                    if tx.send(signal).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Signals { received, caught })
    }
}

/// Disarms job control, which would stop lease-run alone (CMD has a process group of its own) and
/// let its lease lapse while CMD runs on: Ctrl-Z (SIGTSTP) is caught and does nothing, and writing
/// to the terminal from the background with `stty tostop` (SIGTTOU) is allowed.
pub(crate) fn disarm_job_control() -> io::Result<()> {
    signal_hook::flag::register(SIGTSTP, Arc::new(AtomicBool::new(false)))?;
    // SIGTTOU must be ignored, not caught: a caught SIGTTOU fails the write (or, restarted, sends
    // it again), an ignored one lets it through. signal-hook sets handlers only.
    // SAFETY: setting a signal's disposition to SIG_IGN has no handler to run.
    if unsafe { libc::signal(libc::SIGTTOU, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
