//! The pooled connection every statement runs on, apart from the pool that hands it out (so the
//! statement layer needs nothing else of `db`).

use postgres::NoTls;
use r2d2::PooledConnection;
use r2d2_postgres::PostgresConnectionManager;

/// The r2d2 manager of pgtenure's pools.
pub(crate) type Manager = PostgresConnectionManager<NoTls>;

/// A pooled connection.
pub(crate) type Conn = PooledConnection<Manager>;
