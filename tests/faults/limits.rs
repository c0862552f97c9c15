//! Setters at their limits: 0, 1 ns, just under 1 ms, the maximum (100 years), just over it and
//! `Duration::MAX`. Out of range is refused with `InvalidInput` (nothing clamps); in range, the
//! handle works, and no arithmetic on the value can panic later (a `Drop` or a `stop` bound).

use std::time::Duration;

use crate::common::url_config;
use pgtenure::{DbBuilder, ErrorKind, MAX_DURATION};

/// The pool's connection timeout bounds every checkout, `Db::connection` and each loop handle's
/// `stop` and `Drop` (twice it, plus a grace): past 100 years it was accepted, and the first
/// checkout or bound added it to `Instant::now()`, which panics.
#[test]
fn a_pool_connection_timeout_over_100_years_is_refused_and_100_years_works() {
    for timeout in [
        MAX_DURATION + Duration::from_micros(1),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ] {
        let refused = DbBuilder::from_config(url_config()).connection_timeout(timeout);
        assert_eq!(
            refused.map(|_| ()).unwrap_err().kind(),
            ErrorKind::InvalidInput,
            "{timeout:?}"
        );
    }
    for timeout in [Duration::from_nanos(1), Duration::from_micros(999)] {
        let refused = DbBuilder::from_config(url_config()).connection_timeout(timeout);
        assert_eq!(
            refused.map(|_| ()).unwrap_err().kind(),
            ErrorKind::InvalidInput,
            "{timeout:?}: under 1 ms, as every duration"
        );
    }
    let db = DbBuilder::from_config(url_config())
        .connection_timeout(MAX_DURATION)
        .unwrap()
        .build()
        .unwrap();
    let mut conn = db.connection().unwrap();
    let one: i32 = conn.query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(one, 1);
}

/// A pool of the user's own may carry any timeout r2d2 accepts, `Duration::MAX` included:
/// `Db::from_pool` cannot refuse it, and must not panic on it (a checkout, `Db::connection`).
/// (r2d2's own `build` and `get` do, so the test builds it unchecked.)
#[test]
fn a_users_pool_with_a_duration_max_timeout_works() {
    let manager = pgtenure::r2d2_postgres::PostgresConnectionManager::new(
        url_config(),
        pgtenure::postgres::NoTls,
    );
    let pool = pgtenure::r2d2::Pool::builder()
        .max_size(2)
        .test_on_check_out(false)
        .connection_timeout(Duration::MAX)
        // r2d2's `build` waits for its connections by adding the timeout to an `Instant` itself.
        .build_unchecked(manager);
    let db = pgtenure::Db::from_pool(pool);
    let mut conn = db.connection().unwrap();
    let one: i32 = conn.query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(one, 1);
}
