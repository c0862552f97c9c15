//! TLS for pgtenure's own pools (feature `tls`): a rustls connector that checks the server's
//! certificate as the `sslmode` asks, with the root certificates of `sslrootcert`.
//!
//! rustls with its `ring` provider: no system library to build against, and the driver's rustls
//! adapter supports channel binding (SCRAM-SHA-256-PLUS).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::ssl::SslMode;
use crate::error::{Error, Result};

/// The connector for `mode`, checking certificates against `root_cert` (a PEM file, or `system`
/// for the operating system's trust store). Without `root_cert`, `verify-ca` and `verify-full` use
/// `~/.postgresql/root.crt` as libpq does, and fail when it is missing.
pub(crate) fn connector(mode: SslMode, root_cert: Option<&str>) -> Result<MakeRustlsConnect> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // A root certificate given to `prefer` or `require` is used, as with libpq: as `verify-ca`.
    let checks_chain =
        mode == SslMode::VerifyFull || mode == SslMode::VerifyCa || root_cert.is_some();
    let chain = if checks_chain {
        let roots = Arc::new(roots(mode, root_cert)?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, Arc::clone(&provider))
            .build()
            .map_err(|e| {
                Error::invalid_input(format!("the root certificates cannot be used: {e}"))
            })?;
        Some(webpki)
    } else {
        None
    };
    let verifier = Arc::new(Verifier {
        chain,
        names: mode == SslMode::VerifyFull,
        provider: Arc::clone(&provider),
    });
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::setup(format!("the TLS stack cannot be set up: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

fn roots(mode: SslMode, root_cert: Option<&str>) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    let (certs, from) = match root_cert {
        Some("system") => (system_roots()?, "the system's trust store".to_owned()),
        Some(path) => (pem_file(Path::new(path))?, path.to_owned()),
        None => {
            let default = default_root_cert().ok_or_else(|| {
                Error::invalid_input(format!(
                    "sslmode={mode} needs the certificate authority to check the server against: \
                     set sslrootcert=/path/to/ca.pem, or sslrootcert=system for the system's \
                     trust store (~/.postgresql/root.crt does not exist), or use sslmode=require \
                     to encrypt without checking"
                ))
            })?;
            let certs = pem_file(&default)?;
            (certs, default.display().to_string())
        }
    };
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(Error::invalid_input(format!(
            "sslrootcert: {from} holds no usable certificate"
        )));
    }
    Ok(roots)
}

fn pem_file(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| {
            Error::invalid_input(format!(
                "sslrootcert {} cannot be read as PEM certificates: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(Error::invalid_input(format!(
            "sslrootcert {} holds no PEM certificate",
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

/// libpq's default root certificate file.
fn default_root_cert() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let path = Path::new(&home).join(".postgresql").join("root.crt");
    path.is_file().then_some(path)
}

/// Checks the server's certificate as the mode asks: against the roots (`chain`), and its host name
/// too (`names`), or not at all (`prefer` and `require`). The handshake's signatures are checked
/// always, so the session's keys belong to whoever holds the certificate's key.
#[derive(Debug)]
struct Verifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
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
