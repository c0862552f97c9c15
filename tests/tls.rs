//! TLS (feature `tls`) against throwaway servers with `ssl = on` and a certificate authority made
//! by the test: each sslmode does what libpq's does, and what fails says why, at once.
#![cfg(feature = "tls")]

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::tls::{
    encrypted, self_signed, self_signed_valid, server, server_with, write_mode, Authority,
};
use pgtenure::testing::TempPostgres;
use pgtenure::{leases::Leases, Db, ErrorKind, SslMode};

/// One TLS server for this binary, its CA's file, and a file of another CA.
struct Fixture {
    pg: TempPostgres,
    ca: String,
    other_ca: String,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let _ = env_logger::builder().is_test(true).try_init();
        let ca = Authority::new("pgtenure test CA");
        let pg = server(&ca);
        let ca_file = ca.write(pg.dir(), "ca.crt");
        let other = Authority::new("another CA").write(pg.dir(), "other-ca.crt");
        Fixture {
            ca: ca_file.display().to_string(),
            other_ca: other.display().to_string(),
            pg,
        }
    })
}

fn url(host: &str, query: &str) -> String {
    format!(
        "postgres://postgres@{host}:{}/postgres?{query}",
        fixture().pg.port()
    )
}

/// Connects with a short pool timeout, so that a failure which did wait would show.
fn connect(url: &str) -> (pgtenure::Result<Db>, Duration) {
    let started = Instant::now();
    let db = Db::builder(url)
        .and_then(|b| b.connection_timeout(Duration::from_secs(5)))
        .and_then(|b| b.build());
    (db, started.elapsed())
}

fn connected(url: &str) -> Db {
    let (db, _) = connect(url);
    db.unwrap_or_else(|e| panic!("{url}: {e}"))
}

fn refused(url: &str) -> (pgtenure::Error, Duration) {
    let (db, took) = connect(url);
    match db {
        Ok(_) => panic!("{url} connected"),
        Err(e) => (e, took),
    }
}

#[test]
fn verify_full_connects_to_a_host_the_certificate_names_and_encrypts() {
    let f = fixture();
    let db = connected(&url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", f.ca),
    ));
    assert!(encrypted(&mut db.connection().unwrap()));

    // The key=value form, and the builder's own setters, say the same.
    let pairs = format!(
        "host=localhost port={} user=postgres dbname=postgres sslmode=verify-full sslrootcert='{}'",
        f.pg.port(),
        f.ca
    );
    assert!(encrypted(&mut connected(&pairs).connection().unwrap()));
    let built = Db::builder(&url("localhost", ""))
        .and_then(|b| b.ssl_mode(SslMode::VerifyFull))
        .and_then(|b| b.ssl_root_cert(&f.ca))
        .and_then(|b| b.build())
        .unwrap();
    assert!(encrypted(&mut built.connection().unwrap()));

    // A lease over it: acquired and released.
    let leases = Leases::new(&db).with_table("t_tls_leases").unwrap();
    leases.create_table().unwrap();
    let lease = leases
        .acquire("tls", Duration::from_secs(3))
        .unwrap()
        .expect("a free key");
    assert!(lease.is_held());
    lease.release().unwrap();
    db.connection()
        .unwrap()
        .batch_execute("DROP TABLE t_tls_leases")
        .unwrap();
}

#[test]
fn a_certificate_of_another_authority_is_refused_at_once_saying_so() {
    let f = fixture();
    let (err, took) = refused(&url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", f.other_ca),
    ));
    println!("wrong CA: {took:?}: {err}");
    assert_eq!(err.kind(), ErrorKind::Database, "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    let text = err.to_string();
    assert!(
        text.contains("UnknownIssuer")
            && text.contains("not signed by a certificate authority of sslrootcert"),
        "{text}"
    );
    // verify-ca checks the signature too.
    let (err, _) = refused(&url(
        "localhost",
        &format!("sslmode=verify-ca&sslrootcert={}", f.other_ca),
    ));
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    // So does require, once given root certificates (as libpq's).
    let (err, _) = refused(&url(
        "localhost",
        &format!("sslmode=require&sslrootcert={}", f.other_ca),
    ));
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
}

#[test]
fn a_host_name_the_certificate_does_not_name_is_refused_by_verify_full_only() {
    let f = fixture();
    let (err, took) = refused(&url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={}", f.ca),
    ));
    println!("wrong host name: {took:?}: {err}");
    assert_eq!(err.kind(), ErrorKind::Database, "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(
        err.to_string()
            .contains("not issued for the host name connected to"),
        "{err}"
    );
    let db = connected(&url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={}", f.ca),
    ));
    assert!(encrypted(&mut db.connection().unwrap()));
}

#[test]
fn require_and_prefer_encrypt_without_checking_the_certificate() {
    for query in ["sslmode=require", "sslmode=prefer", ""] {
        let db = connected(&url("127.0.0.1", query));
        assert!(
            encrypted(&mut db.connection().unwrap()),
            "{query:?} is not encrypted"
        );
    }
    let plain = connected(&url("127.0.0.1", "sslmode=disable"));
    assert!(!encrypted(&mut plain.connection().unwrap()));
}

#[test]
fn a_server_without_tls_is_refused_at_once_by_require_and_used_by_prefer() {
    let plain = TempPostgres::start().unwrap();
    let at = |query: &str| format!("{}?{query}", plain.url());
    let (err, took) = refused(&at("sslmode=require"));
    println!("TLS refused: {took:?}: {err}");
    assert_eq!(err.kind(), ErrorKind::Database, "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(
        err.to_string().contains("server does not support TLS"),
        "{err}"
    );
    // Says what to do about TLS, and nothing of a password that does not apply.
    assert!(err.to_string().contains("ssl = on"), "{err}");
    assert!(!err.to_string().contains("password"), "{err}");
    let db = connected(&at("sslmode=prefer"));
    assert!(!encrypted(&mut db.connection().unwrap()));
}

#[test]
fn root_certificates_that_cannot_be_used_are_refused_before_connecting() {
    let f = fixture();
    let missing = f.pg.dir().join("no-such-ca.crt");
    let (err, _) = refused(&url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", missing.display()),
    ));
    assert!(err.is_invalid_input(), "{err}");
    assert!(err.to_string().contains("cannot be read"), "{err}");

    let not_pem = f.pg.dir().join("not-pem.crt");
    std::fs::write(&not_pem, "not a certificate").unwrap();
    let (err, _) = refused(&url(
        "localhost",
        &format!("sslmode=verify-ca&sslrootcert={}", not_pem.display()),
    ));
    assert!(err.is_invalid_input(), "{err}");
    assert!(
        err.to_string().contains("holds no PEM certificate"),
        "{err}"
    );

    let root_crt = std::env::var_os("HOME")
        .map(|home| std::path::Path::new(&home).join(".postgresql/root.crt"));
    if !root_crt.is_some_and(|p| p.exists()) {
        let (err, _) = refused(&url("localhost", "sslmode=verify-full"));
        assert!(err.is_invalid_input(), "{err}");
        assert!(err.to_string().contains("sslrootcert=system"), "{err}");
    }
    assert!(Db::builder(&url("localhost", ""))
        .unwrap()
        .ssl_root_cert(" ")
        .unwrap_err()
        .is_invalid_input());
}

#[test]
fn a_lease_statement_stuck_at_its_deadline_is_cancelled_over_tls() {
    let f = fixture();
    let db = connected(&url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", f.ca),
    ));
    let mut admin = db.connection().unwrap();
    admin
        .batch_execute("CREATE TABLE IF NOT EXISTS t_tls_cancel (k int)")
        .unwrap();
    let leases = Leases::new(&db).with_table("t_tls_cancel_leases").unwrap();
    leases.create_table().unwrap();
    let lease = leases
        .acquire("stuck", Duration::from_millis(900))
        .unwrap()
        .expect("a free key");
    // Hold the lease row's lock so that its renewals block until the deadline.
    let mut blocker = db.connection().unwrap();
    let mut tx = blocker.transaction().unwrap();
    let blocker_pid: i32 = tx.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    tx.execute("SELECT 1 FROM t_tls_cancel_leases FOR UPDATE", &[])
        .unwrap();
    let lost = lease.lost().recv_timeout(Duration::from_secs(5));
    assert!(lost.is_ok(), "the loss is signalled at the deadline");
    // The renewal's statement was cancelled through the TLS connector: no session waits for the
    // blocker's lock any more (a cancel sent without TLS is refused by the server, and the renewal
    // would wait until the blocker lets go).
    let waiting = |admin: &mut pgtenure::Connection| -> i64 {
        admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))",
                &[&blocker_pid],
            )
            .unwrap()
            .get(0)
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while waiting(&mut admin) > 0 && Instant::now() < deadline {
        // The poll interval of a bounded wait (5 s) on the cancel.
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(waiting(&mut admin), 0, "the stuck renewal was cancelled");
    tx.rollback().unwrap();
    drop(lease);
    admin
        .batch_execute("DROP TABLE t_tls_cancel; DROP TABLE t_tls_cancel_leases")
        .unwrap();
}

/// A server whose self-signed certificate is given to clients as their `sslrootcert`, as
/// self-hosted servers are set up (PostgreSQL's docs make it with `openssl req -x509`).
struct SelfSigned {
    pg: TempPostgres,
    cert: String,
}

fn self_signed_server() -> &'static SelfSigned {
    static SERVER: OnceLock<SelfSigned> = OnceLock::new();
    SERVER.get_or_init(|| {
        let (cert, key) = self_signed();
        let pg = server_with(cert.clone(), key, None, None);
        let file = pg.dir().join("self-signed.crt");
        std::fs::write(&file, cert).unwrap();
        SelfSigned {
            cert: file.display().to_string(),
            pg,
        }
    })
}

/// Regression (issue 34): refused as `CaUsedAsEndEntity` by require, verify-ca and verify-full,
/// where psql connects.
#[test]
fn a_self_signed_certificate_given_as_its_own_root_is_trusted_as_psql_trusts_it() {
    let s = self_signed_server();
    let at = |host: &str, mode: &str| {
        format!(
            "postgres://postgres@{host}:{}/postgres?sslmode={mode}&sslrootcert={}",
            s.pg.port(),
            s.cert
        )
    };
    for mode in ["require", "verify-ca", "verify-full"] {
        let db = connected(&at("localhost", mode));
        assert!(encrypted(&mut db.connection().unwrap()), "{mode}");
    }
    // verify-full still checks the name it was issued for; verify-ca does not.
    let (err, _) = refused(&at("127.0.0.1", "verify-full"));
    assert_eq!(err.kind(), ErrorKind::Database, "{err}");
    assert!(
        err.to_string()
            .contains("not issued for the host name connected to"),
        "{err}"
    );
    assert!(encrypted(
        &mut connected(&at("127.0.0.1", "verify-ca"))
            .connection()
            .unwrap()
    ));
    // A root file without that certificate still refuses it.
    let other = Authority::new("another CA").write(s.pg.dir(), "unrelated-ca.crt");
    let (err, _) = refused(&format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-ca&sslrootcert={}",
        s.pg.port(),
        other.display()
    ));
    assert_eq!(err.kind(), ErrorKind::Database, "{err}");
    assert!(
        err.to_string().contains("CaUsedAsEndEntity")
            && err.to_string().contains("certificate was refused"),
        "{err}"
    );
}

/// A server that admits only clients presenting a certificate signed by its CA (`hostssl ...
/// cert`), and the files of such a client certificate for the user `postgres`.
struct MutualTls {
    pg: TempPostgres,
    ca: String,
    cert: String,
    key: String,
}

fn mutual_tls_server() -> &'static MutualTls {
    static SERVER: OnceLock<MutualTls> = OnceLock::new();
    SERVER.get_or_init(|| {
        let ca = Authority::new("pgtenure mutual TLS CA");
        let (cert, key) = ca.server_cert(&["localhost"]);
        let pg = server_with(
            cert,
            key,
            Some(&ca.pem),
            Some("local all all trust\nhostssl all all 127.0.0.1/32 cert\n"),
        );
        let (client_cert, client_key) = ca.client_cert("postgres");
        let dir = pg.dir();
        let cert_file = dir.join("client.crt");
        std::fs::write(&cert_file, client_cert).unwrap();
        let key_file = dir.join("client.key");
        write_mode(&key_file, &client_key, 0o600);
        MutualTls {
            ca: ca.write(dir, "ca.crt").display().to_string(),
            cert: cert_file.display().to_string(),
            key: key_file.display().to_string(),
            pg,
        }
    })
}

/// Regression (issue 34): sslcert and sslkey were refused, so a server admitting only `cert`
/// could not be reached.
#[test]
fn a_client_certificate_reaches_a_server_that_admits_only_cert() {
    let m = mutual_tls_server();
    let base = format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        m.pg.port(),
        m.ca
    );
    let db = connected(&format!("{base}&sslcert={}&sslkey={}", m.cert, m.key));
    assert!(encrypted(&mut db.connection().unwrap()));
    let who: String = db
        .connection()
        .unwrap()
        .query_one("SELECT current_user::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(who, "postgres");
    // The builder's setter says the same.
    let built = Db::builder(&base)
        .and_then(|b| b.ssl_client_cert(&m.cert, &m.key))
        .and_then(|b| b.connection_timeout(Duration::from_secs(5)))
        .and_then(|b| b.build())
        .unwrap();
    assert!(encrypted(&mut built.connection().unwrap()));

    // Without one, the server's refusal reaches the error, at once.
    let (err, took) = refused(&base);
    println!("no client certificate: {took:?}: {err}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_eq!(err.kind(), ErrorKind::Database, "{err}");
    assert!(
        err.to_string().contains("no pg_hba.conf entry") || err.to_string().contains("certificate"),
        "{err}"
    );
}

#[test]
fn a_client_key_open_to_others_is_refused_before_connecting() {
    let m = mutual_tls_server();
    let open = m.pg.dir().join("open.key");
    write_mode(&open, &std::fs::read_to_string(&m.key).unwrap(), 0o644);
    let (err, _) = refused(&format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}\
         &sslcert={}&sslkey={}",
        m.pg.port(),
        m.ca,
        m.cert,
        open.display()
    ));
    assert!(err.is_invalid_input(), "{err}");
    assert!(
        err.to_string().contains("group or world access")
            && err
                .to_string()
                .contains(&format!("chmod 600 {}", open.display())),
        "{err}"
    );
    let (err, _) = refused(&format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=require&sslcert={}",
        m.pg.port(),
        m.cert,
    ));
    assert!(err.is_invalid_input(), "{err}");
    assert!(err.to_string().contains("without sslkey"), "{err}");
}

/// Regression (found walking the README on a fresh clone): a client certificate of X.509 version
/// 1, as `openssl x509 -req` without extensions issues one (PostgreSQL's docs make client
/// certificates so), was refused before connecting ("cannot be used together: invalid peer
/// certificate: UnsupportedCertVersion"): rustls checked the key against the certificate by
/// parsing it as webpki does. psql presents it, and the server admits it.
#[test]
fn a_version_1_client_certificate_made_by_openssl_is_presented_as_psql_presents_it() {
    let dir = std::env::temp_dir().join(format!("t_tls_v1_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    struct Remove(std::path::PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _remove = Remove(dir.clone());
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("openssl (Debian's package openssl) runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=pgtenure v1 client CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
        "-subj",
        "/CN=postgres",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "client.crt",
        "-days",
        "2",
    ]);
    let text = openssl(&["x509", "-in", "client.crt", "-noout", "-text"]);
    assert!(
        text.contains("Version: 1 "),
        "not a version 1 certificate: {text}"
    );
    write_mode(
        &dir.join("client.key"),
        &std::fs::read_to_string(dir.join("client.key")).unwrap(),
        0o600,
    );
    let server_ca = Authority::new("pgtenure v1 server CA");
    let (cert, key) = server_ca.server_cert(&["localhost"]);
    let client_ca = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
    let pg = server_with(
        cert,
        key,
        Some(&client_ca),
        Some("local all all trust\nhostssl all all 127.0.0.1/32 cert\n"),
    );
    let db = connected(&format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}\
         &sslcert={}&sslkey={}",
        pg.port(),
        server_ca.write(&dir, "server-ca.crt").display(),
        dir.join("client.crt").display(),
        dir.join("client.key").display()
    ));
    let mut conn = db.connection().unwrap();
    assert!(encrypted(&mut conn));
    let who: String = conn
        .query_one("SELECT current_user::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(who, "postgres");
}

/// A client key that is not the certificate's is still refused before connecting.
#[test]
fn a_client_key_of_another_certificate_is_refused_before_connecting() {
    let m = mutual_tls_server();
    let (_, other_key) = Authority::new("pgtenure other CA").client_cert("postgres");
    let wrong = m.pg.dir().join("wrong.key");
    write_mode(&wrong, &other_key, 0o600);
    let (err, _) = refused(&format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}\
         &sslcert={}&sslkey={}",
        m.pg.port(),
        m.ca,
        m.cert,
        wrong.display()
    ));
    assert!(err.is_invalid_input(), "{err}");
    assert!(
        err.to_string().contains("the key is not the certificate's"),
        "{err}"
    );
}

/// A self-signed certificate given as its own root is trusted only within its dates, as OpenSSL
/// (psql) checks them on a trusted certificate too: an expired one, or one not valid yet, is
/// refused under every mode that checks the certificate.
#[test]
fn an_expired_or_future_self_signed_certificate_is_refused_as_psql_refuses_it() {
    for (name, between, says) in [
        ("expired", ((2020, 1, 1), (2021, 1, 1)), "Expired"),
        ("future", ((2090, 1, 1), (2091, 1, 1)), "NotValidYet"),
    ] {
        let (cert, key) = self_signed_valid(Some(between));
        let pg = server_with(cert.clone(), key, None, None);
        let file = pg.dir().join("dated.crt");
        std::fs::write(&file, cert).unwrap();
        for mode in ["require", "verify-ca", "verify-full"] {
            let (err, took) = refused(&format!(
                "postgres://postgres@localhost:{}/postgres?sslmode={mode}&sslrootcert={}",
                pg.port(),
                file.display()
            ));
            println!("{name} {mode}: {took:?}: {err}");
            assert_eq!(err.kind(), ErrorKind::Database, "{name} {mode}: {err}");
            assert!(err.to_string().contains(says), "{name} {mode}: {err}");
        }
    }
}
