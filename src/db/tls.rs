//! TLS for pgtenure's own pools (feature `tls`): a rustls connector that checks the server's
//! certificate as the `sslmode` asks, with the root certificates of `sslrootcert`, and presents
//! the client certificate of `sslcert` and `sslkey`.
//!
//! rustls with its `ring` provider: no system library to build against, and the driver's rustls
//! adapter supports channel binding (SCRAM-SHA-256-PLUS).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_name, WebPkiServerVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::ssl::SslMode;
use crate::error::{Error, Result};

/// What the connector is made from: libpq's `sslmode`, `sslrootcert`, `sslcert` and `sslkey`.
pub(crate) struct Settings<'a> {
    pub(crate) mode: SslMode,
    pub(crate) root_cert: Option<&'a str>,
    pub(crate) client_cert: Option<&'a str>,
    pub(crate) client_key: Option<&'a str>,
}

/// The connector for the settings: certificates checked against `root_cert` (a PEM file, or
/// `system` for the operating system's trust store), a client certificate presented when one is
/// given. Without `root_cert`, `~/.postgresql/root.crt` is used as libpq uses it: required by
/// `verify-ca` and `verify-full`, and, when it exists, checked by `prefer` and `require` too
/// (which then verify as `verify-ca`).
pub(crate) fn connector(settings: &Settings<'_>) -> Result<MakeRustlsConnect> {
    let mode = settings.mode;
    let provider = provider();
    // A root certificate given to `prefer` or `require`, or present in libpq's default place, is
    // used, as with libpq: as `verify-ca`.
    let default_root = default_file("root.crt");
    let checks_chain = mode == SslMode::VerifyFull
        || mode == SslMode::VerifyCa
        || settings.root_cert.is_some()
        || default_root.is_some();
    let (chain, trusted) = if checks_chain {
        let (roots, trusted) = roots(mode, settings.root_cert)?;
        if !matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) {
            log::debug!(
                target: "pgtenure::db::tls",
                "sslmode={mode} with a root certificate file: the server's certificate is \
                 verified as with verify-ca, as libpq does"
            );
        }
        let webpki =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                .build()
                .map_err(|e| {
                    Error::invalid_input(format!("the root certificates cannot be used: {e}"))
                })?;
        (Some(webpki), trusted)
    } else {
        (None, Vec::new())
    };
    let verifier = Arc::new(Verifier {
        chain,
        trusted,
        names: mode == SslMode::VerifyFull,
        provider: Arc::clone(&provider),
    });
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::setup(format!("the TLS stack cannot be set up: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match client_files(settings)? {
        Some((cert, key)) => {
            let (chain, key_der) = client_identity(&cert, &key)?;
            let identity =
                ClientIdentity::new(&provider_of(&builder), chain, key_der, &cert, &key)?;
            builder.with_client_cert_resolver(Arc::new(identity))
        }
        None => builder.with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

/// The process's default provider when the application installed one (to choose aws-lc-rs and its
/// post-quantum key exchange, say), else *ring*.
fn provider() -> Arc<CryptoProvider> {
    if let Some(installed) = CryptoProvider::get_default() {
        return Arc::clone(installed);
    }
    // rustls 0.23.48 deprecates its ring provider because ring has no post-quantum key exchange
    // (which PostgreSQL servers built on OpenSSL before 3.5 do not offer either). ring builds
    // without a C toolchain or cmake, which aws-lc-rs needs; an application that wants
    // post-quantum key exchange installs aws-lc-rs as the process default, used above.
    #[allow(deprecated)]
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client certificate and key files: the given ones, else libpq's defaults when they exist.
fn client_files(settings: &Settings<'_>) -> Result<Option<(PathBuf, PathBuf)>> {
    let cert = settings
        .client_cert
        .map(PathBuf::from)
        .or_else(|| default_file("postgresql.crt"));
    let Some(cert) = cert else {
        if let Some(key) = settings.client_key {
            return Err(Error::invalid_input(format!(
                "sslkey {key} is given without sslcert: give the client certificate too"
            )));
        }
        return Ok(None);
    };
    let key = settings
        .client_key
        .map(PathBuf::from)
        .or_else(|| default_file("postgresql.key"))
        .ok_or_else(|| {
            Error::invalid_input(format!(
                "sslcert {} is given without sslkey: give the client certificate's key too",
                cert.display()
            ))
        })?;
    Ok(Some((cert, key)))
}

/// The client certificate chain and its key, read from PEM files; a key file open to group or
/// others is refused, as libpq refuses it.
fn client_identity(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let chain = pem_file(cert, "sslcert")?;
    let meta = std::fs::metadata(key).map_err(|e| {
        Error::invalid_input(format!("sslkey {} cannot be read: {e}", key.display()))
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mode = meta.permissions().mode() & 0o777;
        // /proc/self belongs to the process's effective user.
        let euid = std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid());
        if key_mode_refused(mode, meta.uid(), euid) {
            return Err(Error::invalid_input(format!(
                "sslkey {} has group or world access (mode {mode:o}); the private key must be \
                 readable by its owner only: chmod 600 {}",
                key.display(),
                key.display()
            )));
        }
    }
    #[cfg(not(unix))]
    let _ = meta;
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        Error::invalid_input(format!(
            "sslkey {} holds no unencrypted PEM private key: {e}",
            key.display()
        ))
    })?;
    Ok((chain, key_der))
}

/// The roots, and the certificates of a file named by the user (a self-signed server certificate
/// among them is trusted as itself; the system's store is not read this way).
fn roots(
    mode: SslMode,
    root_cert: Option<&str>,
) -> Result<(RootCertStore, Vec<CertificateDer<'static>>)> {
    let mut roots = RootCertStore::empty();
    let (certs, from) = match root_cert {
        Some("system") => (system_roots()?, "the system's trust store".to_owned()),
        Some(path) => (pem_file(Path::new(path), "sslrootcert")?, path.to_owned()),
        None => {
            let default = default_file("root.crt").ok_or_else(|| {
                Error::invalid_input(format!(
                    "sslmode={mode} needs the certificate authority to check the server against: \
                     set sslrootcert=/path/to/ca.pem, or sslrootcert=system for the system's \
                     trust store (~/.postgresql/root.crt does not exist), or use sslmode=require \
                     to encrypt without checking"
                ))
            })?;
            let certs = pem_file(&default, "sslrootcert")?;
            (certs, default.display().to_string())
        }
    };
    let trusted = if root_cert == Some("system") {
        Vec::new()
    } else {
        certs.clone()
    };
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(Error::invalid_input(format!(
            "sslrootcert: {from} holds no usable certificate"
        )));
    }
    Ok((roots, trusted))
}

/// The certificates of a PEM file, for the parameter `what`.
fn pem_file(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| {
            Error::invalid_input(format!(
                "{what} {} cannot be read as PEM certificates: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(Error::invalid_input(format!(
            "{what} {} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

fn system_roots() -> Result<Vec<CertificateDer<'static>>> {
    let found = rustls_native_certs::load_native_certs();
    if found.certs.is_empty() {
        let why = found
            .errors
            .first()
            .map_or_else(|| "it is empty".to_owned(), ToString::to_string);
        return Err(Error::invalid_input(format!(
            "sslrootcert=system: the system's trust store gave no certificate ({why})"
        )));
    }
    Ok(found.certs)
}

/// One of libpq's default files in `~/.postgresql/` (`root.crt`, `postgresql.crt`,
/// `postgresql.key`), when it exists.
fn default_file(name: &str) -> Option<PathBuf> {
    let home = super::libpq::home(&super::libpq::Process)?;
    let path = home.join(".postgresql").join(name);
    path.is_file().then_some(path)
}

/// Checks the server's certificate as the mode asks: against the roots (`chain`), and its host name
/// too (`names`), or not at all (`prefer` and `require`). The handshake's signatures are checked
/// always, so the session's keys belong to whoever holds the certificate's key.
#[derive(Debug)]
struct Verifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    /// The certificates of the user's `sslrootcert` file: a server presenting one of them is
    /// trusted as itself (a self-signed server certificate given as its own root), as OpenSSL and
    /// so libpq trust it, where webpki refuses a trust anchor as the end entity
    /// (`CaUsedAsEndEntity`).
    trusted: Vec<CertificateDer<'static>>,
    names: bool,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        if self
            .trusted
            .iter()
            .any(|t| t.as_ref() == end_entity.as_ref())
        {
            // The very certificate the user trusts: no chain to build. Its dates are still
            // checked, as OpenSSL checks a trust anchor's ("in addition to RFC 5280, do also for
            // trust anchor": psql refuses it expired), and its name under verify-full.
            let (not_before, not_after) = validity(end_entity.as_ref()).ok_or(
                rustls::Error::InvalidCertificate(CertificateError::BadEncoding),
            )?;
            let now = now.as_secs();
            if now < not_before {
                return Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidYet,
                ));
            }
            if now > not_after {
                return Err(rustls::Error::InvalidCertificate(CertificateError::Expired));
            }
            if self.names {
                let parsed = ParsedCertificate::try_from(end_entity)?;
                verify_server_name(&parsed, server_name)?;
            }
            return Ok(ServerCertVerified::assertion());
        }
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            // The name is checked only once the chain verified.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.names => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// libpq's rule for a client key's mode: no group or world access when this user owns it, and no
/// more than group read when root does (a key shared through a group such as ssl-cert); a key of
/// another user is not checked (the system let this user read it).
#[cfg(unix)]
fn key_mode_refused(mode: u32, owner: u32, euid: u32) -> bool {
    (owner == euid && mode & 0o077 != 0) || (owner == 0 && mode & 0o137 != 0)
}

/// A DER element at the start of `der`: its tag, its contents and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, rest) = rest.split_at(n);
        let len = bytes
            .iter()
            .fold(0usize, |len, &b| (len << 8) | usize::from(b));
        (len, rest)
    };
    if rest.len() < len {
        return None;
    }
    let (contents, after) = rest.split_at(len);
    Some((tag, contents, after))
}

/// A certificate's validity (notBefore, notAfter) in seconds since the Unix epoch, read from its
/// DER; `None` when it does not parse.
fn validity(cert: &[u8]) -> Option<(u64, u64)> {
    let (_, certificate, _) = element(cert)?;
    let (_, tbs, _) = element(certificate)?;
    let (tag, _, mut rest) = element(tbs)?;
    if tag != 0xa0 {
        rest = tbs; // no explicit version: the serial number comes first
    }
    let (_, _, rest) = element(rest)?; // serial number
    let (_, _, rest) = element(rest)?; // signature algorithm
    let (_, _, rest) = element(rest)?; // issuer
    let (_, validity, _) = element(rest)?;
    let (tag0, before, rest) = element(validity)?;
    let (tag1, after, _) = element(rest)?;
    Some((time(tag0, before)?, time(tag1, after)?))
}

/// An ASN.1 UTCTime (tag 0x17, `YYMMDDHHMMSSZ`) or GeneralizedTime (0x18, `YYYYMMDDHHMMSSZ`) as
/// seconds since the Unix epoch (0 for a time before it).
fn time(tag: u8, text: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest) = match tag {
        0x17 if text.len() == 12 => {
            let yy: i64 = text.get(..2)?.parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, text.get(2..)?)
        }
        0x18 if text.len() == 14 => (text.get(..4)?.parse().ok()?, text.get(4..)?),
        _ => return None,
    };
    let field = |i: usize| rest.get(i..i + 2).and_then(|f| f.parse::<i64>().ok());
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(u64::try_from(days * 86_400 + hour * 3600 + minute * 60 + second.min(60)).unwrap_or(0))
}

/// What to do about a connection attempt that the TLS stack refused (the server's certificate did
/// not verify, the handshake failed): `None` for other failures.
pub(crate) fn advice(err: &postgres::Error) -> Option<&'static str> {
    let mut cause = std::error::Error::source(err);
    while let Some(c) = cause {
        // An I/O error's source() skips the error it wraps: look inside it.
        let inner = c
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .map_or(c, |inner| inner as &(dyn std::error::Error + 'static));
        if let Some(refused) = inner.downcast_ref::<rustls::Error>() {
            return Some(match refused {
                rustls::Error::InvalidCertificate(
                    CertificateError::UnknownIssuer | CertificateError::BadSignature,
                ) => {
                    "the server's certificate is not signed by a certificate authority of \
                     sslrootcert; name the CA that signed it"
                }
                rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                ) => {
                    "the server's certificate is not issued for the host name connected to; \
                     connect by a name it lists, or use sslmode=verify-ca to check only its \
                     signature"
                }
                rustls::Error::InvalidCertificate(
                    CertificateError::Expired | CertificateError::ExpiredContext { .. },
                ) => "the server's certificate has expired; renew it",
                rustls::Error::InvalidCertificate(_) => {
                    "the server's certificate was refused; check it and sslrootcert"
                }
                _ => "the TLS handshake failed; check the server's TLS settings",
            });
        }
        cause = c.source();
    }
    None
}

/// The configured provider of a client config under construction.
fn provider_of<S: rustls::ConfigSide>(
    builder: &rustls::ConfigBuilder<S, rustls::client::WantsClientCert>,
) -> Arc<CryptoProvider> {
    Arc::clone(builder.crypto_provider())
}

/// The client certificate and its key, presented whenever the server asks.
///
/// Not `with_client_auth_cert`: rustls checks there that the key matches the certificate by
/// parsing the certificate as webpki does, which refuses an X.509 version 1 certificate
/// (`UnsupportedCertVersion`), and `openssl x509 -req` without extensions (as PostgreSQL's own
/// docs make client certificates) issues version 1. libpq, and the server, accept those. A key
/// that does not match its certificate is still refused here; a certificate rustls cannot parse is
/// left to the server to judge.
#[derive(Debug)]
struct ClientIdentity(Arc<rustls::sign::CertifiedKey>);

impl ClientIdentity {
    fn new(
        provider: &CryptoProvider,
        chain: Vec<CertificateDer<'static>>,
        key_der: PrivateKeyDer<'static>,
        cert: &Path,
        key: &Path,
    ) -> Result<ClientIdentity> {
        let unusable = |e: &dyn std::fmt::Display| {
            Error::invalid_input(format!(
                "sslcert {} and sslkey {} cannot be used together: {e}",
                cert.display(),
                key.display()
            ))
        };
        let signing = provider
            .key_provider
            .load_private_key(key_der)
            .map_err(|e| unusable(&e))?;
        let certified = rustls::sign::CertifiedKey::new(chain, signing);
        match certified.keys_match() {
            Ok(()) => {}
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
                return Err(unusable(&"the key is not the certificate's"));
            }
            Err(e) => {
                log::debug!(target: "pgtenure::db", "client certificate {}: its key could not be checked against it ({e}); the server judges it", cert.display());
            }
        }
        Ok(ClientIdentity(Arc::new(certified)))
    }
}

impl rustls::client::ResolvesClientCert for ClientIdentity {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::time;

    /// As libpq (fe-secure-openssl.c): a root-owned 0640 key is accepted unless root runs the
    /// program; the owner's execute bit is not access.
    #[cfg(unix)]
    #[test]
    fn client_key_modes_are_refused_as_libpq_refuses_them() {
        use super::key_mode_refused;
        for (mode, owner, euid, refused) in [
            (0o600, 1000, 1000, false),
            (0o400, 1000, 1000, false),
            (0o700, 1000, 1000, false),
            (0o640, 1000, 1000, true),
            (0o604, 1000, 1000, true),
            (0o640, 0, 1000, false),
            (0o644, 0, 1000, true),
            (0o660, 0, 1000, true),
            (0o640, 0, 0, true),
            (0o600, 0, 0, false),
            (0o644, 1001, 1000, false),
        ] {
            assert_eq!(
                key_mode_refused(mode, owner, euid),
                refused,
                "mode {mode:o} owner {owner} euid {euid}"
            );
        }
    }

    #[test]
    fn certificate_times_read_as_openssl_reads_them() {
        assert_eq!(time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(time(0x18, b"20240229123456Z"), Some(1_709_210_096));
        assert_eq!(
            time(0x17, b"500101000000Z"),
            Some(0),
            "1950 is before the epoch"
        );
        for bad in [
            &b"240229123456"[..],
            b"2402291234Z",
            b"24x229123456Z",
            b"241329123456Z",
            b"",
        ] {
            assert_eq!(time(0x17, bad), None, "{bad:?}");
        }
        assert_eq!(time(0x04, b"240229123456Z"), None);
    }
}
