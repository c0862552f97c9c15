//! The signals that end the command's long runs (SIGINT, SIGTERM, SIGHUP, SIGQUIT), caught and
//! delivered on a channel: `lease-run` passes them to CMD's tree (and disarms job control,
//! which would stop it alone), the exporter shuts down on them.

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread;

use pgtenure::crossbeam_channel::{bounded, Receiver};

/// A forwarded signal's name, for messages.
pub(crate) fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        other => format!("signal {other}"),
    }
}

/// The signals pgtenure catches (lease-run passes them to CMD's tree; any other signal
/// that ends pgtenure ends CMD through the parent-death signal).
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// The signals of [`FORWARDED`], caught and delivered on a channel (through a pipe the handler
/// writes to).
#[derive(Debug)]
pub(crate) struct Signals {
    pub(crate) received: Receiver<i32>,
}

/// The pipe's write end, for the handler (-1 until installed).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

/// The first signal caught (0 until one is): set by the handler itself, so it is seen at once,
/// before the signal thread has passed the signal on.
static FIRST_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(number: libc::c_int) {
    // Only async-signal-safe calls here: write(2) one byte, keep errno.
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    // An atomic compare-exchange is async-signal-safe.
    let _ = FIRST_SIGNAL.compare_exchange(0, number, Ordering::SeqCst, Ordering::SeqCst);
    let saved = errno();
    let message = [number as u8];
    // SAFETY: write from a valid one-byte buffer to the pipe; a full pipe drops the signal.
    unsafe {
        libc::write(fd, message.as_ptr().cast(), message.len());
    }
    set_errno(saved);
}

extern "C" fn do_nothing(_: libc::c_int) {}

/// Sets `number`'s handler (or `SIG_IGN`).
fn set_disposition(number: libc::c_int, handler: libc::sighandler_t) -> io::Result<()> {
    // SAFETY: a zeroed sigaction with a valid handler, an empty mask and valid flags.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(number, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn errno() -> libc::c_int {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() }
}

#[cfg(target_os = "linux")]
fn set_errno(value: libc::c_int) {
    // SAFETY: as in errno().
    unsafe { *libc::__errno_location() = value }
}

#[cfg(not(target_os = "linux"))]
fn errno() -> libc::c_int {
    0
}

#[cfg(not(target_os = "linux"))]
fn set_errno(_: libc::c_int) {}

impl Signals {
    /// The first signal caught since [`Signals::install`], if any.
    pub(crate) fn first(&self) -> Option<i32> {
        match FIRST_SIGNAL.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(signal),
        }
    }

    pub(crate) fn install() -> io::Result<Signals> {
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two descriptors pipe writes.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let [read_fd, write_fd] = fds;
        // SAFETY: fcntl on descriptors we own: neither goes to CMD, and the handler never blocks.
        unsafe {
            libc::fcntl(read_fd, libc::F_SETFD, libc::FD_CLOEXEC);
            libc::fcntl(write_fd, libc::F_SETFD, libc::FD_CLOEXEC);
            libc::fcntl(write_fd, libc::F_SETFL, libc::O_NONBLOCK);
        }
        SIGNAL_PIPE.store(write_fd, Ordering::Relaxed);
        let (tx, received) = bounded(16);
        thread::Builder::new()
            .name("pgtenure-signals".into())
            .spawn(move || {
                let mut message = [0u8; 1];
                loop {
                    // SAFETY: read into a valid one-byte buffer.
                    let n = unsafe { libc::read(read_fd, message.as_mut_ptr().cast(), 1) };
                    if n == 1 {
                        if tx.send(i32::from(message[0])).is_err() {
                            return;
                        }
                    } else if n < 0
                        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
                    {
                        continue;
                    } else {
                        return;
                    }
                }
            })?;
        let forward: extern "C" fn(libc::c_int) = on_signal;
        for number in FORWARDED {
            set_disposition(number, forward as libc::sighandler_t)?;
        }
        Ok(Signals { received })
    }
}

/// Disarms job control, which would stop lease-run alone (CMD has a process group of its own) and
/// let its lease lapse while CMD runs on: Ctrl-Z (SIGTSTP) is caught and does nothing, and writing
/// to the terminal from the background with `stty tostop` (SIGTTOU) is allowed.
pub(crate) fn disarm_job_control() -> io::Result<()> {
    let nothing: extern "C" fn(libc::c_int) = do_nothing;
    set_disposition(libc::SIGTSTP, nothing as libc::sighandler_t)?;
    set_disposition(libc::SIGTTOU, libc::SIG_IGN)
}
