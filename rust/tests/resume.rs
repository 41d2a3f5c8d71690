//! TLS session resumption against the real server: every claim on a
//! connection of its own opens a TLS connection, and all but the first of
//! one client resume the session of an earlier one (the client's rustls
//! config, one per client, keeps the tickets) instead of a full handshake.
//!
//! A resumed handshake carries no server certificate, so the client's
//! certificate verifier runs only on full handshakes: a verifier that
//! counts its calls tells the two apart from outside the crate.
#![cfg(feature = "tls")]

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{server_bin, Server, TempDir};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// The real verifier, counting the certificates it checks: one per full
/// handshake, none on a resumed one.
#[derive(Debug)]
struct Counting {
    inner: Arc<WebPkiServerVerifier>,
    full: AtomicUsize,
}

impl ServerCertVerifier for Counting {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.full.fetch_add(1, Ordering::SeqCst);
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The PKI's directory and a TLS server (no client certificates) with a
/// certificate from `monolock certs`.
fn tls_server() -> (TempDir, Server) {
    let pki = TempDir::new();
    let dir = pki.0.to_str().unwrap();
    for args in [
        &["init", dir][..],
        &["server", "--dir", dir, "--host", "127.0.0.1"][..],
    ] {
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
    }
    let file = |name: &str| pki.0.join(name).into_os_string();
    let server = Server::start_with(&[
        "--tls-cert".as_ref(),
        &file("server.crt"),
        "--tls-key".as_ref(),
        &file("server.key"),
    ]);
    (pki, server)
}

/// A client config trusting the PKI's CA through a counting verifier.
fn counting_config(pki: &Path) -> (Arc<rustls::ClientConfig>, Arc<Counting>) {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(pki.join("ca.crt")).unwrap() {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .unwrap();
    let counting = Arc::new(Counting {
        inner,
        full: AtomicUsize::new(0),
    });
    let config = monolock::tls::config_builder()
        .dangerous()
        .with_custom_certificate_verifier(Arc::clone(&counting) as Arc<dyn ServerCertVerifier>)
        .with_no_client_auth();
    (Arc::new(config), counting)
}

const CYCLES: usize = 3;

#[test]
fn blocking_claims_over_tls_resume_the_session() {
    let (pki, s) = tls_server();
    let (config, counting) = counting_config(&pki.0);
    let c = monolock::Client::builder()
        .server(&s.addr)
        .lease(Duration::from_secs(10))
        .tls(config)
        .build()
        .unwrap();
    for i in 0..CYCLES {
        let g = c
            .acquire_timeout(&format!("resume/blocking/{i}"), Duration::from_secs(30))
            .unwrap();
        g.release();
        assert_eq!(
            counting.full.load(Ordering::SeqCst),
            1,
            "after claim {i}: the first handshake is full, the next ones resume"
        );
    }
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn tokio_claims_over_tls_resume_the_session() {
    let (pki, s) = tls_server();
    let (config, counting) = counting_config(&pki.0);
    let c = monolock::tokio::Client::builder()
        .server(&s.addr)
        .lease(Duration::from_secs(10))
        .tls(config)
        .build()
        .unwrap();
    for i in 0..CYCLES {
        let g = c
            .acquire_timeout(&format!("resume/tokio/{i}"), Duration::from_secs(30))
            .await
            .unwrap();
        g.release().await;
        assert_eq!(
            counting.full.load(Ordering::SeqCst),
            1,
            "after claim {i}: the first handshake is full, the next ones resume"
        );
    }
}
