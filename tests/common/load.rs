//! CPU load in bursts and random numbers, for the tests that race threads against each other (the
//! checker's subjects, the failover checker).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Busy threads that load the CPUs in bursts until dropped.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Load {
    pub fn start(salt: u64) -> Load {
        let n: u64 = std::env::var("PGTENURE_CHECKER_LOAD")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2);
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|i| {
                let stop = stop.clone();
                thread::spawn(move || {
                    let mut rng = Rng::new(salt * 31 + i);
                    let mut x = 0_u64;
                    while !stop.load(Ordering::Relaxed) {
                        let until = Instant::now() + rng.millis(20, 400);
                        while Instant::now() < until {
                            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                        }
                        std::hint::black_box(x);
                        // Real time is the subject: CPU load in bursts, idle 0-150 ms between.
                        thread::sleep(rng.millis(0, 150));
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A small xorshift generator: the tests need variety, not quality.
pub struct Rng(u64);

impl Rng {
    pub fn new(salt: u64) -> Rng {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Rng((nanos
            ^ (u64::from(std::process::id()) << 32)
            ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from))
    }
}
