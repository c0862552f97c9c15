//! `pgbench -M prepared` running the crate's own statements: the limit each operation is compared
//! with.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::Error;

/// A value for one `$n` of a statement in a pgbench script.
#[derive(Clone, Debug)]
pub enum Arg {
    /// A pgbench variable (`:name`): set per client with `-D`, by `\set`, or by `\gset`.
    Var(&'static str),
    /// `NULL`, written into the script: pgbench sends a variable's value as text, never a null.
    Null,
    /// `true`, written into the script: the switch the library passes as it is set by default
    /// (tokens fold in the server's timeline).
    True,
    /// A literal written into the script as it is (the promotion record's timeline, `1` on a
    /// server never promoted).
    Lit(&'static str),
}

/// One statement of a script: the crate's statement (rendered by the crate's renderer), what each
/// `$n` becomes, and whether its row is stored into variables (`\gset`).
#[derive(Clone)]
pub struct Step {
    pub sql: String,
    pub args: Vec<Arg>,
    pub gset: bool,
}

/// A pgbench script: `\set` lines, then the statements.
#[derive(Clone)]
pub struct Script {
    pub sets: Vec<String>,
    pub steps: Vec<Step>,
}

impl Script {
    pub fn one(sql: String, args: Vec<Arg>) -> Script {
        Script {
            sets: Vec::new(),
            steps: vec![Step {
                sql,
                args,
                gset: false,
            }],
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        for set in &self.sets {
            out.push_str(set);
            out.push('\n');
        }
        for step in &self.steps {
            let sql = substitute(&strip_comments(&step.sql), &step.args);
            out.push_str(sql.trim_end());
            out.push_str(if step.gset { "\n\\gset\n" } else { ";\n" });
        }
        out
    }
}

/// The statement without its SQL comments (pgbench would read `:name` and `$n` inside them).
fn strip_comments(sql: &str) -> String {
    sql.lines()
        .map(|line| line.split_once("--").map_or(line, |(code, _)| code))
        .filter(|line| !line.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `$n` replaced by what `args[n - 1]` says.
fn substitute(sql: &str, args: &[Arg]) -> String {
    let mut out = String::with_capacity(sql.len());
    let bytes = sql.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' {
            let digits = bytes[i + 1..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if digits > 0 {
                let n: usize = sql[i + 1..i + 1 + digits].parse().unwrap();
                match &args[n - 1] {
                    Arg::Var(name) => {
                        out.push(':');
                        out.push_str(name);
                    }
                    Arg::Null => out.push_str("NULL"),
                    Arg::True => out.push_str("true"),
                    Arg::Lit(text) => out.push_str(text),
                }
                i += 1 + digits;
                continue;
            }
        }
        out.push(bytes[i] as char);
        i += 1;
    }
    out
}

fn pgbench_binary() -> PathBuf {
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .stderr(Stdio::null())
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("pgbench"))
        .filter(|p| p.is_file());
    from_pg_config.unwrap_or_else(|| PathBuf::from("pgbench"))
}

/// Runs `script` with `pgbench -M prepared` as `clients` processes of one connection each (so each
/// client gets its own `-D` values from `vars(client)`), all at once for `secs` seconds, against
/// `url`; returns the transactions per second summed over the clients.
pub fn run(
    url: &str,
    script: &Script,
    clients: usize,
    secs: u64,
    vars: &dyn Fn(usize) -> Vec<(String, String)>,
) -> Result<f64, Error> {
    let path = std::env::temp_dir().join(format!(
        "pgtenure-bench-{}-{}.sql",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::write(&path, script.text())?;
    let children: Vec<_> = (0..clients)
        .map(|client| {
            let mut cmd = Command::new(pgbench_binary());
            cmd.args(["-n", "-M", "prepared", "-c", "1", "-T"])
                .arg(secs.to_string())
                .arg("-f")
                .arg(&path);
            for (name, value) in vars(client) {
                cmd.arg("-D").arg(format!("{name}={value}"));
            }
            cmd.arg(url)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut tps = 0.0;
    for child in children {
        let out = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let failed = stdout
            .lines()
            .find(|l| l.starts_with("number of failed transactions"))
            .is_some_and(|l| !l.contains(": 0 "));
        let line = stdout.lines().find(|l| l.starts_with("tps = "));
        match line {
            Some(line) if out.status.success() && !failed => {
                tps += line
                    .trim_start_matches("tps = ")
                    .split_whitespace()
                    .next()
                    .unwrap_or("0")
                    .parse::<f64>()?;
            }
            _ => {
                let _ = std::fs::remove_file(&path);
                return Err(format!(
                    "pgbench failed:\n{}\n{stdout}\nscript:\n{}",
                    String::from_utf8_lossy(&out.stderr),
                    script.text()
                )
                .into());
            }
        }
    }
    let _ = std::fs::remove_file(&path);
    Ok(tps)
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::Instant::now())
}
