//! A failed connection attempt judged: what waiting cannot fix (the server's refusal of the
//! credentials, the database, a startup setting or a privilege; a TLS refusal) is reported at once
//! with what to do, anything else is left to the pool to retry.

use crate::error::{Error, ErrorKind, Result};

/// A failed connection attempt back as the error to report when waiting cannot fix it, else as
/// itself, for the pool to retry. Waiting cannot fix the server's rejection of the credentials
/// (class 28: a wrong password, an unknown role) or of the database (3D000), of a startup setting
/// or of a privilege (see below); nor, without a server
/// report, a TLS refusal (the server does not offer TLS, its certificate did not verify) or settings
/// that lack what the server asks for (a password). A failure to reach the server, or a connection
/// that broke, has a plain I/O error as its cause and may pass.
pub(super) fn for_good(e: postgres::Error) -> Result<postgres::Error> {
    if let Some(code) = e.code() {
        let code = code.code();
        if code.starts_with("28") || code == postgres::error::SqlState::INVALID_CATALOG_NAME.code()
        {
            return Err(Error::from_postgres("connect", e));
        }
        // What the server said of the connection's own startup settings will be said again: a
        // parameter it does not know (42704), a value it refuses (22023), one that cannot be set
        // at connect time (55P02), or one the role may not set, like a database it may not
        // connect to (42501). Anything else may pass: the server shutting down, starting, out of
        // connections (08, 53, 57), or a database an operator closed to connections for a while
        // (55000), as any code this list does not know.
        return match code {
            "42704" | "22023" | "55P02" => Err(startup_refused(e, STARTUP_SETTING)),
            "42501" => Err(startup_refused(e, PRIVILEGE)),
            _ => Ok(e),
        };
    }
    if e.is_closed() {
        return Ok(e);
    }
    let permanent = match std::error::Error::source(&e) {
        None => false,
        // The TLS stack's refusal comes wrapped in an I/O error.
        Some(cause) if cause.is::<std::io::Error>() => tls_advice(&e).is_some(),
        Some(_) => true,
    };
    if permanent {
        Err(refused(e))
    } else {
        Ok(e)
    }
}

/// What to do about a startup setting the server refused.
const STARTUP_SETTING: &str = "the server refused a setting the connection sends at startup: fix \
    or remove it in the connection string (its options, such as options=-c name=value, or another \
    parameter); pgtenure's own settings (statement_mode, sslmode) go beside them, not inside \
    options";

/// What to do about a privilege the connection lacks.
const PRIVILEGE: &str = "the role lacks a privilege the connection needs: grant it CONNECT on the \
    database, or remove a setting in the connection string's options that only a privileged role \
    may set";

/// The error of a connection the server refused at startup for good, with its reason and `advice`.
fn startup_refused(e: postgres::Error, advice: &str) -> Error {
    let reason = match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => chain(&e),
    };
    Error::new(
        ErrorKind::Database,
        format!("connect failed: {reason}; {advice}"),
    )
    .with_source(e)
}

/// What to do about a failure the TLS stack reported, if it was one.
#[cfg(feature = "tls")]
fn tls_advice(e: &postgres::Error) -> Option<&'static str> {
    crate::db::tls::advice(e)
}

#[cfg(not(feature = "tls"))]
fn tls_advice(_: &postgres::Error) -> Option<&'static str> {
    None
}

/// The error of a connection attempt that waiting cannot fix, without a server report.
fn refused(e: postgres::Error) -> Error {
    let text = chain(&e);
    // The driver reports these without a kind to match: its own words are all there is.
    let advice = tls_advice(&e).unwrap_or(if text.contains("server does not support TLS") {
        "the server does not offer TLS: turn it on in the server's settings (ssl = on), or \
         connect with sslmode=prefer or sslmode=disable"
    } else if text.contains("password missing") {
        "the server asks for a password: put it in the password file (~/.pgpass or PGPASSFILE, \
         mode 0600: host:port:database:user:password), in PGPASSWORD, or in the URL"
    } else {
        "waiting will not fix this: check sslmode against the server's TLS settings, and that \
         the URL has the password the server asks for"
    });
    Error::new(
        ErrorKind::Database,
        format!("connect failed: {text}; {advice}"),
    )
    .with_source(e)
}

/// An error with its causes, "error connecting to server: Connection refused (os error 111)".
pub(super) fn chain(e: &postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
