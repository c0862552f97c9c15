//! What the command's test binaries share: the test database and unique table names.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use pgtenure::Db;

/// The test database: `DATABASE_URL`, or a throwaway server for this process.
pub fn url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        pgtenure::testing::database_url().unwrap_or_else(|e| panic!("no test database: {e}"))
    })
    .clone()
}

/// A pool on the test database, shared by the binary's tests.
pub fn db() -> Db {
    static DB: OnceLock<Db> = OnceLock::new();
    DB.get_or_init(|| Db::connect(&url()).expect("the test database"))
        .clone()
}

/// A table name no other test uses: `t_cli_<what>_<pid>_<n>`.
pub fn unique(what: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "t_cli_{what}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
