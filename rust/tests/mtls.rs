//! Mutual TLS and the ACL against the real server, with every file made by
//! `monolock certs`: the ACL's cn:deployer takes its lock (blocking and
//! tokio clients), a CN the ACL does not name gets ERROR 0x18, a client
//! without a certificate fails at once (the server refuses it after the
//! TLS 1.3 handshake, on the first read).
#![cfg(feature = "tls")]

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::{server_bin, Server, TempDir};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The PKI's directory and a server with mTLS and the ACL
/// `cn:deployer deploy/*`.
fn mtls_server() -> (TempDir, Server) {
    let pki = TempDir::new();
    let dir = pki.0.to_str().unwrap();
    let certs = |args: &[&str]| {
        let out = Command::new(server_bin())
            .arg("certs")
            .args(args)
            .output()
            .expect("run monolock certs");
        assert!(
            out.status.success(),
            "monolock certs {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    certs(&["init", dir]);
    certs(&[
        "server",
        "--dir",
        dir,
        "--host",
        "127.0.0.1",
        "--host",
        "localhost",
    ]);
    certs(&["client", "--dir", dir, "--cn", "deployer"]);
    certs(&["client", "--dir", dir, "--cn", "intruder"]);
    std::fs::write(pki.0.join("acl"), "cn:deployer deploy/*\n").unwrap();
    let file = |name: &str| pki.0.join(name).into_os_string();
    let server = Server::start_with(&[
        "--tls-cert".as_ref(),
        &file("server.crt"),
        "--tls-key".as_ref(),
        &file("server.key"),
        "--tls-client-ca".as_ref(),
        &file("ca.crt"),
        "--acl".as_ref(),
        &file("acl"),
    ]);
    (pki, server)
}

/// A client configuration trusting the PKI's CA and presenting NAME.crt.
fn client_config(pki: &Path, name: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(pki.join("ca.crt")).unwrap() {
        roots.add(ca.unwrap()).unwrap();
    }
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(pki.join(format!("{name}.crt")))
            .unwrap()
            .map(|c| c.unwrap())
            .collect();
    let key = PrivateKeyDer::from_pem_file(pki.join(format!("{name}.key"))).unwrap();
    Arc::new(
        monolock::tls::config_builder()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .unwrap(),
    )
}

fn blocking_client(
    s: &Server,
    pki: &Path,
    name: &str,
) -> monolock::ClientBuilder<monolock::Client> {
    monolock::Client::builder()
        .server(&s.addr)
        .lease(Duration::from_secs(2))
        .tls(client_config(pki, name))
}

#[test]
fn blocking_mtls_acl_allows_the_deployer_and_refuses_others() {
    let (pki, s) = mtls_server();
    let by_ip = blocking_client(&s, &pki.0, "deployer").build().unwrap();
    let held = by_ip.try_acquire("deploy/rust").unwrap();
    assert!(held.token() > 0);
    held.release();
    let by_name = blocking_client(&s, &pki.0, "deployer")
        .tls_server_name("localhost")
        .build()
        .unwrap();
    by_name.try_acquire("deploy/rust").unwrap().release();

    let intruder = blocking_client(&s, &pki.0, "intruder").build().unwrap();
    match intruder.try_acquire("deploy/rust-intruder") {
        Err(e @ monolock::Error::NotAuthorized(_)) => assert_eq!(e.code(), Some(0x18)),
        Err(e) => panic!("want NotAuthorized, got {e:?}"),
        Ok(_) => panic!("the intruder got the lock"),
    }
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn tokio_mtls_acl_allows_the_deployer_and_refuses_others() {
    let (pki, s) = mtls_server();
    let client = |name: &str| {
        monolock::tokio::Client::builder()
            .server(&s.addr)
            .lease(Duration::from_secs(2))
            .tls(client_config(&pki.0, name))
            .build()
            .unwrap()
    };
    let held = client("deployer")
        .try_acquire("deploy/tokio")
        .await
        .unwrap();
    assert!(held.token() > 0);
    held.release().await;
    match client("intruder")
        .try_acquire("deploy/tokio-intruder")
        .await
    {
        Err(monolock::Error::NotAuthorized(_)) => {}
        Err(e) => panic!("want NotAuthorized, got {e:?}"),
        Ok(_) => panic!("the intruder got the lock"),
    }
}

/// A client configuration trusting the PKI's CA, presenting no certificate.
fn no_cert_config(pki: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(pki.join("ca.crt")).unwrap() {
        roots.add(ca.unwrap()).unwrap();
    }
    Arc::new(
        monolock::tls::config_builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// The server's refusal of a client without a certificate: a connect
/// failure, not temporary, that names the server and says what to do,
/// long before the waiting acquire's 10 s deadline.
fn assert_refused_at_once(err: &monolock::Error, addr: &str, took: Duration) {
    assert!(matches!(err, monolock::Error::Io(_)), "{err:?}");
    assert!(!err.is_temporary() && !err.is_timeout() && err.code().is_none());
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("monolock: TLS handshake with {addr} failed: "))
            && msg.ends_with("(the server refused this client's certificate: give a client certificate that its CA signs)"),
        "{msg}"
    );
    assert!(took < Duration::from_secs(2), "took {took:?}: {msg}");
}

#[test]
fn blocking_mtls_without_a_client_certificate_fails_at_once() {
    let (pki, s) = mtls_server();
    let c = monolock::Client::builder()
        .server(&s.addr)
        .lease(Duration::from_secs(2))
        .tls(no_cert_config(&pki.0))
        .build()
        .unwrap();
    let start = std::time::Instant::now();
    let err = c
        .acquire_timeout("deploy/rust-anonymous", Duration::from_secs(10))
        .expect_err("granted without a certificate");
    assert_refused_at_once(&err, &s.addr, start.elapsed());
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn tokio_mtls_without_a_client_certificate_fails_at_once() {
    let (pki, s) = mtls_server();
    let c = monolock::tokio::Client::builder()
        .server(&s.addr)
        .lease(Duration::from_secs(2))
        .tls(no_cert_config(&pki.0))
        .build()
        .unwrap();
    let start = std::time::Instant::now();
    let err = c
        .acquire_timeout("deploy/tokio-anonymous", Duration::from_secs(10))
        .await
        .expect_err("granted without a certificate");
    assert_refused_at_once(&err, &s.addr, start.elapsed());
}
