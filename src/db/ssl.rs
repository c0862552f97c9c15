//! What a connection string says that the driver does not read: `sslmode`, `sslrootcert`,
//! `sslcert`, `sslkey` and `service` (the
//! driver knows only `disable`, `prefer` and `require`, and no root certificates), and pgtenure's
//! own `statement_mode`, taken out before the driver parses the rest.

use std::fmt;

use crate::error::{Error, Result};
use crate::statement::StatementMode;

/// How a connection uses TLS: libpq's `sslmode`, in the URL (`?sslmode=verify-full`), the
/// connection string (`sslmode=verify-full`) or [`DbBuilder::ssl_mode`](crate::DbBuilder::ssl_mode).
///
/// Every mode but `Disable` and `Prefer` needs the cargo feature `tls`. Without it, `Prefer`
/// connects without TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, else plain; the certificate is not checked (unless
    /// `sslrootcert` is given or `~/.postgresql/root.crt` exists: then as `VerifyCa`, as with
    /// libpq). The default, as with libpq.
    Prefer,
    /// TLS or no connection; the certificate is not checked (unless `sslrootcert` is given or
    /// `~/.postgresql/root.crt` exists: then as `VerifyCa`, as libpq does). Protects against
    /// eavesdropping, not against an impostor.
    Require,
    /// TLS, and the server's certificate must be signed by a certificate authority of
    /// `sslrootcert`; the host name is not checked.
    VerifyCa,
    /// TLS, the certificate signed by a certificate authority of `sslrootcert`, and issued for the
    /// host name connected to. What a database reached over a network should use.
    VerifyFull,
}

impl SslMode {
    /// Whether a connection without TLS is refused.
    pub(crate) fn needs_tls(self) -> bool {
        !matches!(self, SslMode::Disable | SslMode::Prefer)
    }

    pub(super) fn parse(value: &str) -> Result<SslMode> {
        Ok(match value {
            "disable" => SslMode::Disable,
            // libpq's "allow" tries plain first, then TLS: with no TLS refused by a server that
            // offers it, plain it is.
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(Error::invalid_input(format!(
                    "sslmode {other:?} is not one of disable, prefer, require, verify-ca, \
                     verify-full"
                )))
            }
        })
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

/// The parameters of a connection string that pgtenure reads itself.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct UrlParams {
    pub(crate) mode: Option<SslMode>,
    pub(crate) root_cert: Option<String>,
    /// The client certificate (`sslcert`) and its key (`sslkey`), PEM files.
    pub(crate) cert: Option<String>,
    pub(crate) key: Option<String>,
    /// The service whose settings fill what the string leaves unset (`service`).
    pub(crate) service: Option<String>,
    pub(crate) statement_mode: Option<StatementMode>,
}

/// Parameters pgtenure refuses rather than ignores: encrypted client keys and revocation lists are
/// not supported.
const UNSUPPORTED: &[&str] = &["sslpassword", "sslcrl", "sslcrldir"];

/// Takes `sslmode`, `sslrootcert`, `sslcert`, `sslkey`, `service` and `statement_mode` out of a `postgres://` URL's query or a
/// `key=value` string.
pub(crate) fn split(url: &str) -> Result<(String, UrlParams)> {
    if url.contains("://") {
        split_url(url)
    } else {
        split_pairs(url)
    }
}

fn split_url(url: &str) -> Result<(String, UrlParams)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), UrlParams::default()));
    };
    let mut params = UrlParams::default();
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(key)?;
        if take(&mut params, &key, || percent_decode(value))? {
            continue;
        }
        kept.push(pair);
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, params))
}

/// A `postgres://` URL whose hosts name no port, with `port` after each (the driver takes 5432 for
/// a host without one, where libpq takes the service's or `PGPORT`'s): `None` when it names a port
/// or no host, or is not a URL.
pub(crate) fn with_port(url: &str, port: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    if hosts.is_empty() {
        return None;
    }
    let has_port = |host: &str| match host.rfind(']') {
        Some(close) => host[close..].contains(':'),
        None => host.contains(':'),
    };
    if hosts.split(',').any(has_port) {
        return None;
    }
    let hosts: Vec<String> = hosts.split(',').map(|h| format!("{h}:{port}")).collect();
    Some(format!("{scheme}://{userinfo}{}{tail}", hosts.join(",")))
}

fn split_pairs(text: &str) -> Result<(String, UrlParams)> {
    let mut params = UrlParams::default();
    let mut kept: Vec<&str> = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let Some((key, value, raw_len)) = next_pair(rest)? else {
            // Not a pair ("127.0.0.1:5432"): the driver says what is wrong with it.
            return Ok((text.to_owned(), UrlParams::default()));
        };
        let raw = &rest[..raw_len];
        if !take(&mut params, key, || Ok(value.clone()))? {
            kept.push(raw);
        }
        rest = &rest[raw_len..];
    }
    Ok((kept.join(" "), params))
}

/// Records `key` when it is a TLS parameter pgtenure handles: `true` when it was taken.
fn take(params: &mut UrlParams, key: &str, value: impl FnOnce() -> Result<String>) -> Result<bool> {
    match key {
        "sslmode" => params.mode = Some(SslMode::parse(&value()?)?),
        "sslrootcert" => params.root_cert = Some(value()?),
        "sslcert" => params.cert = Some(value()?),
        "sslkey" => params.key = Some(value()?),
        "service" => params.service = Some(value()?),
        // pgtenure's own parameter: two of them are a mistake somewhere, not a choice to guess.
        "statement_mode" if params.statement_mode.is_some() => {
            return Err(Error::invalid_input(
                "the database URL sets statement_mode more than once: keep one",
            ))
        }
        "statement_mode" => params.statement_mode = Some(StatementMode::parse(&value()?)?),
        key if UNSUPPORTED.contains(&key) => {
            return Err(Error::invalid_input(format!(
                "the database URL sets {key}: encrypted client keys and revocation lists are not \
                 supported; decrypt the key into a file only you can read (chmod 600), or build a \
                 pool of your own with a TLS connector and use Db::from_tls_pool"
            )))
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// One `key = value` of a connection string at the start of `text`: the key, the value unquoted
/// and unescaped, and how many bytes of `text` the pair takes; `None` when it has no `=`.
fn next_pair(text: &str) -> Result<Option<(&str, String, usize)>> {
    let key_end = text
        .find(|c: char| c == '=' || c.is_whitespace())
        .unwrap_or(text.len());
    let key = &text[..key_end];
    let after_key = text[key_end..].trim_start();
    let Some(after_eq) = after_key.strip_prefix('=') else {
        return Ok(None);
    };
    let value_text = after_eq.trim_start();
    let start = text.len() - value_text.len();
    let mut value = String::new();
    let mut chars = value_text.char_indices();
    let quoted = value_text.starts_with('\'');
    if quoted {
        chars.next();
    }
    let mut end = value_text.len();
    let mut closed = !quoted;
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            }
            '\'' if quoted => {
                end = i + 1;
                closed = true;
                break;
            }
            c if c.is_whitespace() && !quoted => {
                end = i;
                break;
            }
            c => value.push(c),
        }
    }
    if !closed {
        return Err(Error::invalid_input(format!(
            "the connection string's {key} value has an unclosed quote"
        )));
    }
    Ok(Some((key, value, start + end)))
}

fn percent_decode(text: &str) -> Result<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let byte = text
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| {
                    Error::invalid_input("the database URL has a % not followed by two hex digits")
                })?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| Error::invalid_input("the database URL's query is not UTF-8 once decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(mode: Option<SslMode>, root_cert: Option<&str>) -> UrlParams {
        UrlParams {
            mode,
            root_cert: root_cert.map(str::to_owned),
            ..UrlParams::default()
        }
    }

    #[test]
    fn the_statement_mode_is_taken_out_of_urls_and_connection_strings() {
        let (rest, got) = split("postgres://db/app?statement_mode=sql&application_name=x").unwrap();
        assert_eq!(rest, "postgres://db/app?application_name=x");
        assert_eq!(got.statement_mode, Some(StatementMode::Sql));
        let (rest, got) = split("host=db statement_mode=unprepared user=app").unwrap();
        assert_eq!(rest, "host=db user=app");
        assert_eq!(got.statement_mode, Some(StatementMode::Unprepared));
        for twice in [
            "postgres://db/app?statement_mode=sql&statement_mode=protocol",
            "postgres://db/app?statement_mode=sql&statement_mode=sql",
            "host=db statement_mode=sql statement_mode=protocol",
        ] {
            let err = split(twice).unwrap_err();
            assert!(err.is_invalid_input(), "{twice}: {err}");
            assert!(
                err.to_string().contains("statement_mode more than once"),
                "{err}"
            );
        }
        let err = split("host=db statement_mode=fast").unwrap_err();
        assert!(err.is_invalid_input());
        assert!(err.to_string().contains("statement_mode \"fast\""), "{err}");
    }

    #[test]
    fn urls_lose_only_the_tls_parameters() {
        let (rest, got) = split(
            "postgres://u:p%40ss@db:5432/app?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p%40ss@db:5432/app?application_name=x");
        assert_eq!(got, params(Some(SslMode::VerifyFull), Some("/etc/ca.pem")));

        let (rest, got) = split("postgresql://db/app?sslmode=require").unwrap();
        assert_eq!(rest, "postgresql://db/app");
        assert_eq!(got, params(Some(SslMode::Require), None));

        let (rest, got) = split("postgres://db/app").unwrap();
        assert_eq!(rest, "postgres://db/app");
        assert_eq!(got, UrlParams::default());
    }

    #[test]
    fn connection_strings_lose_only_the_tls_parameters() {
        let (rest, got) = split(
            "host=db  sslmode = verify-ca user=app sslrootcert='/my certs/ca\\'s.pem' options='-c x=1'",
        )
        .unwrap();
        assert_eq!(rest, "host=db user=app options='-c x=1'");
        assert_eq!(
            got,
            params(Some(SslMode::VerifyCa), Some("/my certs/ca's.pem"))
        );
        // What is not a connection string is left to the driver, which says why.
        let (rest, got) = split("127.0.0.1:5432 sslmode=require").unwrap();
        assert_eq!(rest, "127.0.0.1:5432 sslmode=require");
        assert_eq!(got, UrlParams::default());
        let (rest, got) = split("sslmode=disable").unwrap();
        assert_eq!(rest, "");
        assert_eq!(got, params(Some(SslMode::Disable), None));
    }

    #[test]
    fn bad_tls_parameters_are_refused_with_what_is_wrong() {
        for (text, says) in [
            ("postgres://db/app?sslmode=verify", "sslmode \"verify\""),
            ("host=db sslmode=strict", "sslmode \"strict\""),
            ("host=db sslcrl=/c.pem", "sets sslcrl"),
            ("postgres://db/app?sslpassword=x", "sets sslpassword"),
            ("host=db sslrootcert='/unclosed", "unclosed quote"),
            ("postgres://db/app?sslrootcert=%zz", "two hex digits"),
        ] {
            let err = split(text).unwrap_err();
            assert!(err.is_invalid_input(), "{text}");
            assert!(err.to_string().contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn a_port_is_added_only_to_urls_whose_hosts_name_none() {
        assert_eq!(
            with_port("postgres://u:p@a,b/db?x=1", "6000").as_deref(),
            Some("postgres://u:p@a:6000,b:6000/db?x=1")
        );
        assert_eq!(
            with_port("postgres://[::1]/db", "6000").as_deref(),
            Some("postgres://[::1]:6000/db")
        );
        assert_eq!(with_port("postgres://h:5433/db", "6000"), None);
        assert_eq!(with_port("postgres://[::1]:5433/db", "6000"), None);
        assert_eq!(with_port("postgres:///db", "6000"), None);
        assert_eq!(with_port("host=h", "6000"), None);
    }

    #[test]
    fn modes_say_what_they_need() {
        assert!(!SslMode::Disable.needs_tls() && !SslMode::Prefer.needs_tls());
        assert!(SslMode::Require.needs_tls() && SslMode::VerifyFull.needs_tls());
        assert_eq!(SslMode::parse("allow").unwrap(), SslMode::Prefer);
        assert_eq!(SslMode::VerifyFull.to_string(), "verify-full");
    }
}
