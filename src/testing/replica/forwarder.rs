//! The TCP forwarder the standby replicates through, which can stop moving bytes: how a test
//! freezes replication.

use std::io::{ErrorKind as IoErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use crate::error::{Error, Result};

/// How often the forwarder's threads look at their stop and freeze flags (and so how long a join
/// waits at most, besides a blocked write's timeout).
pub(super) const POLL: Duration = Duration::from_millis(10);

/// How long the forwarder waits to write a chunk before it drops the connection.
const WRITE_TIMEOUT: Duration = Duration::from_millis(500);

/// A TCP forwarder on 127.0.0.1 to the primary's port, for the standby's replication connection,
/// that can stop moving bytes (while `frozen`). Its threads end within [`POLL`] plus
/// [`WRITE_TIMEOUT`] of [`Forwarder::stop`].
pub(super) struct Forwarder {
    pub(super) port: u16,
    frozen: Arc<RwLock<bool>>,
    stopping: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Forwarder {
    pub(super) fn start(upstream: u16) -> Result<Forwarder> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| Error::setup("could not listen on 127.0.0.1").with_source(e))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::setup("could not listen on 127.0.0.1").with_source(e))?
            .port();
        let frozen = Arc::new(RwLock::new(false));
        let stopping = Arc::new(AtomicBool::new(false));
        let (f, s) = (frozen.clone(), stopping.clone());
        let thread = std::thread::Builder::new()
            .name("pgtenure-forward".into())
            .spawn(move || accept_loop(&listener, upstream, &f, &s))
            .map_err(|e| Error::setup("could not start the forwarder's thread").with_source(e))?;
        Ok(Forwarder {
            port,
            frozen,
            stopping,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Stops moving bytes; returns once no write is under way (at most [`WRITE_TIMEOUT`]).
    pub(super) fn freeze(&self) {
        *self.frozen.write() = true;
    }

    pub(super) fn thaw(&self) {
        *self.frozen.write() = false;
    }

    pub(super) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.lock().take() {
            if thread.join().is_err() {
                log::error!(target: "pgtenure::testing", "the replication forwarder's thread panicked");
            }
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Accepts connections until `stopping`, forwarding each to `upstream` on two threads of its own,
/// and joins them all before it returns.
fn accept_loop(
    listener: &TcpListener,
    upstream: u16,
    frozen: &Arc<RwLock<bool>>,
    stopping: &Arc<AtomicBool>,
) {
    let mut pumps: Vec<JoinHandle<()>> = Vec::new();
    while !stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                if client.set_nonblocking(false).is_err() {
                    continue;
                }
                match TcpStream::connect(("127.0.0.1", upstream)) {
                    Ok(server) => {
                        for (from, to) in [(&client, &server), (&server, &client)] {
                            let pair = from.try_clone().and_then(|a| Ok((a, to.try_clone()?)));
                            let Ok((from, to)) = pair else { continue };
                            let (f, s) = (frozen.clone(), stopping.clone());
                            match std::thread::Builder::new()
                                .name("pgtenure-forward".into())
                                .spawn(move || pump(from, to, &f, &s))
                            {
                                Ok(handle) => pumps.push(handle),
                                Err(e) => {
                                    log::warn!(target: "pgtenure::testing", "no forwarding thread: {e}");
                                    let _ = client.shutdown(Shutdown::Both);
                                    let _ = server.shutdown(Shutdown::Both);
                                }
                            }
                        }
                    }
                    // The primary is gone: the standby's connection ends at once.
                    Err(_) => drop(client),
                }
            }
            Err(e) if e.kind() == IoErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(e) => {
                log::warn!(target: "pgtenure::testing", "the replication forwarder could not accept: {e}");
                std::thread::sleep(POLL);
            }
        }
        pumps.retain(|p| !p.is_finished());
    }
    for pump in pumps {
        let _ = pump.join();
    }
}

/// Moves bytes from `from` to `to` until either side closes or `stopping`, then closes both. What
/// it reads while `frozen` it holds until thawed; a write runs under the gate's read lock, so once
/// [`Forwarder::freeze`] returns no byte moves.
fn pump(mut from: TcpStream, mut to: TcpStream, frozen: &RwLock<bool>, stopping: &AtomicBool) {
    let configured = from
        .set_read_timeout(Some(POLL))
        .and_then(|()| to.set_write_timeout(Some(WRITE_TIMEOUT)));
    if configured.is_ok() {
        let mut buf = vec![0u8; 64 * 1024];
        'moving: while !stopping.load(Ordering::SeqCst) {
            let n = match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        IoErrorKind::WouldBlock | IoErrorKind::TimedOut | IoErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(_) => break,
            };
            loop {
                if stopping.load(Ordering::SeqCst) {
                    break 'moving;
                }
                let gate = frozen.read();
                if !*gate {
                    if to.write_all(&buf[..n]).is_err() {
                        break 'moving;
                    }
                    break;
                }
                drop(gate);
                std::thread::sleep(POLL);
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// The forwarder moves bytes both ways, holds them while frozen, and its threads end on stop.
    #[test]
    fn the_forwarder_moves_holds_and_stops() {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
        let forwarder = Forwarder::start(upstream.local_addr().unwrap().port()).unwrap();
        let mut client = TcpStream::connect(("127.0.0.1", forwarder.port)).unwrap();
        let (mut server, _) = upstream.accept().unwrap();
        client.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        server.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        server.write_all(b"pong").unwrap();
        client.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"pong");

        forwarder.freeze();
        client.write_all(b"held").unwrap();
        server
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let err = server.read(&mut buf).unwrap_err();
        assert!(
            matches!(err.kind(), IoErrorKind::WouldBlock | IoErrorKind::TimedOut),
            "{err}"
        );
        forwarder.thaw();
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        server.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"held");

        let started = Instant::now();
        forwarder.stop();
        assert!(
            started.elapsed() < POLL * 20 + WRITE_TIMEOUT,
            "{:?}",
            started.elapsed()
        );
        assert_eq!(
            server.read(&mut buf).unwrap(),
            0,
            "the connection was closed"
        );
    }
}
