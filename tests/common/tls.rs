//! Throwaway servers with TLS, and the certificate authorities the tests make for them.

use std::path::PathBuf;

use pgtenure::testing::TempPostgres;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate authority made for one test run.
pub struct Authority {
    /// The CA's certificate, PEM.
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Authority {
    pub fn new(name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
        ];
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Authority {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate and its key (PEM) for the DNS names `names`.
    pub fn server_cert(&self, names: &[&str]) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, &names[0]);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Writes the CA's certificate where a client can name it as `sslrootcert`.
    pub fn write(&self, dir: &std::path::Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, &self.pem).unwrap();
        path
    }
}

/// A server with `ssl = on` and a certificate for `localhost` only, signed by `ca`; every
/// connection from 127.0.0.1 is trusted, with or without TLS.
pub fn server(ca: &Authority) -> TempPostgres {
    let (cert, key) = ca.server_cert(&["localhost"]);
    TempPostgres::builder()
        .setting("ssl", "on")
        .and_then(|b| b.setting("ssl_cert_file", "server.crt"))
        .and_then(|b| b.setting("ssl_key_file", "server.key"))
        .and_then(|b| b.file("server.crt", cert))
        .and_then(|b| b.file("server.key", key))
        .and_then(|b| b.start())
        .unwrap_or_else(|e| panic!("no TLS server: {e}"))
}

/// Whether the session behind `conn` is encrypted, as the server sees it.
pub fn encrypted(conn: &mut pgtenure::postgres::Client) -> bool {
    conn.query_one(
        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        &[],
    )
    .unwrap()
    .get(0)
}

impl Authority {
    /// A client certificate and its key (PEM) for the database user `user` (its common name, which
    /// `cert` authentication compares with the user connecting).
    pub fn client_cert(&self, user: &str) -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, user);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A self-signed server certificate for `localhost` and its key (PEM), made as PostgreSQL's docs
/// make one (`openssl req -new -x509 ...`: a CA certificate that is its own issuer), to be given to
/// clients as their `sslrootcert`.
pub fn self_signed() -> (String, String) {
    self_signed_valid(None)
}

/// A date: year, month, day.
pub type Ymd = (i32, u8, u8);

/// A self-signed certificate for `localhost` valid only between the two dates given (year, month,
/// day each), and its key: expired, or not valid yet.
pub fn self_signed_valid(between: Option<(Ymd, Ymd)>) -> (String, String) {
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    if let Some(((y0, m0, d0), (y1, m1, d1))) = between {
        params.not_before = rcgen::date_time_ymd(y0, m0, d0);
        params.not_after = rcgen::date_time_ymd(y1, m1, d1);
    }
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A server with `ssl = on`, the certificate and key given, and optionally the CA that client
/// certificates must be signed by and a `pg_hba.conf` of its own.
pub fn server_with(
    cert: String,
    key: String,
    client_ca: Option<&str>,
    hba: Option<&str>,
) -> TempPostgres {
    let mut builder = TempPostgres::builder()
        .setting("ssl", "on")
        .and_then(|b| b.setting("ssl_cert_file", "server.crt"))
        .and_then(|b| b.setting("ssl_key_file", "server.key"))
        .and_then(|b| b.file("server.crt", cert))
        .and_then(|b| b.file("server.key", key))
        .unwrap();
    if let Some(ca) = client_ca {
        builder = builder
            .setting("ssl_ca_file", "client-ca.crt")
            .and_then(|b| b.file("client-ca.crt", ca.to_owned()))
            .unwrap();
    }
    if let Some(hba) = hba {
        builder = builder.hba(hba);
    }
    builder
        .start()
        .unwrap_or_else(|e| panic!("no TLS server: {e}"))
}

/// Writes `text` to `path` with the permissions `mode`.
pub fn write_mode(path: &std::path::Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
