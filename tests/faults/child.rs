//! A copy of this test binary running one test as a child process, for faults only another process
//! can suffer (`SIGSTOP`); the child reports on its standard output, a line at a time.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use pgtenure::crossbeam_channel::{unbounded, Receiver};

use super::CHILD_ENV;

pub struct Child {
    process: std::process::Child,
    lines: Receiver<String>,
    reader: Option<JoinHandle<()>>,
}

impl Child {
    /// Runs the test `test` (its path in this binary) with `CHILD_ENV` set to `mode`, the harness
    /// URL as `DATABASE_URL`, and `env`.
    pub fn spawn(test: &str, mode: &str, env: &[(&str, &str)]) -> Child {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", test, "--nocapture"])
            .env(CHILD_ENV, mode)
            .env("DATABASE_URL", crate::common::url())
            .stdout(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut process = command.spawn().unwrap();
        let (tx, lines) = unbounded::<String>();
        let out = process.stdout.take().unwrap();
        let reader = thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Child {
            process,
            lines,
            reader: Some(reader),
        }
    }

    /// The token the child reports first ("TOKEN n").
    pub fn token(&self) -> i64 {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .expect("the child reports its token");
            if let Some((_, t)) = line.split_once("TOKEN ") {
                return t.trim().parse().unwrap();
            }
        }
    }

    /// Sends the child a signal (`-STOP`, `-CONT`).
    pub fn signal(&self, signal: &str) {
        let pid = self.process.id().to_string();
        assert!(Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap()
            .success());
    }

    /// Waits for a child that was killed, and for its output's end.
    pub fn reap(mut self) {
        let _ = self.process.wait();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
    }

    /// The lines the child reports until "DONE" (not read before), calling `each` per line; then
    /// waits for it to exit.
    pub fn finish(mut self, mut each: impl FnMut(&str)) -> Vec<String> {
        let mut after = Vec::new();
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .expect("the child finishes");
            if line.ends_with("DONE") {
                break;
            }
            each(&line);
            after.push(line);
        }
        self.process.wait().unwrap();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        after
    }
}
