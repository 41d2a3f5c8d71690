//! TLS for both clients, against an in-test rustls server that speaks the
//! protocol (the Go server's TLS lands separately). The certificate is made
//! per run with rcgen, so no private key is ever committed.
#![cfg(feature = "tls")]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::Fake;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A self-signed certificate for localhost and 127.0.0.1, made once per run.
fn test_cert() -> &'static rcgen::CertifiedKey {
    static CERT: OnceLock<rcgen::CertifiedKey> = OnceLock::new();
    CERT.get_or_init(|| {
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("generate test certificate")
    })
}

fn client_config() -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(test_cert().cert.der().clone()).unwrap();
    Arc::new(
        monolock::tls::config_builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// A TLS fake server: grants `token` to each of `conns` connections in
/// turn, acks every heartbeat until the client's close_notify and answers
/// it with its own.
fn tls_server(conns: usize, token: u64) -> Fake {
    let cert: CertificateDer<'static> = test_cert().cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        test_cert().key_pair.serialize_der(),
    ));
    let config = Arc::new(
        rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap(),
    );
    Fake::start(move |listener: TcpListener| {
        for _ in 0..conns {
            let tcp = common::accept(&listener);
            let conn = rustls::ServerConnection::new(Arc::clone(&config)).unwrap();
            let mut s = rustls::StreamOwned::new(conn, tcp);
            let mut head = [0u8; 8];
            if s.read_exact(&mut head).is_err() {
                continue; // a client that failed verification
            }
            assert_eq!(&head[..2], &[0x01, 0x01]);
            let len = u16::from_be_bytes([head[6], head[7]]) as usize;
            let mut name = vec![0u8; len];
            s.read_exact(&mut name).unwrap();
            let mut grant = vec![0x12];
            grant.extend_from_slice(&token.to_be_bytes());
            s.write_all(&grant).unwrap();
            let mut hb = [0u8; 1];
            let mut beats = 0;
            loop {
                match s.read(&mut hb) {
                    Ok(1) => {
                        assert_eq!(hb[0], 0x02);
                        beats += 1;
                        s.write_all(&grant).unwrap();
                    }
                    // rustls reads zero bytes only after a close_notify.
                    Ok(_) => break,
                    Err(e) => panic!("the release did not send close_notify: {e}"),
                }
            }
            assert!(beats >= 2, "heartbeats over TLS: {beats}");
            // Answer the half-close as the real server does.
            s.conn.send_close_notify();
            s.flush().unwrap();
        }
    })
}

#[test]
fn blocking_client_over_tls() {
    let fake = tls_server(1, 77);
    let addr = fake.addr.replace("127.0.0.1", "localhost");
    let c = monolock::Client::builder()
        .server(addr)
        .lease(Duration::from_millis(200))
        .tls(client_config())
        .build()
        .unwrap();
    let g = c.acquire_timeout("tls", Duration::from_secs(10)).unwrap();
    assert_eq!(g.token(), 77);
    // Several heartbeat round trips over TLS.
    assert!(g.wait_lost_timeout(Duration::from_millis(400)).is_none());
    g.release();
    fake.join();
}

#[test]
fn certificate_for_another_name_is_refused() {
    let fake = tls_server(1, 1);
    let c = monolock::Client::builder()
        .server(fake.addr.clone())
        .tls(client_config())
        .tls_server_name("other.example")
        .build()
        .unwrap();
    let err = c.try_acquire("tls").unwrap_err();
    assert!(matches!(err, monolock::Error::Io(_)), "{err}");
    fake.join();
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn tokio_client_over_tls() {
    let fake = tls_server(1, 78);
    let c = monolock::tokio::Client::builder()
        .server(fake.addr.clone()) // 127.0.0.1 is in the certificate too
        .lease(Duration::from_millis(200))
        .tls(client_config())
        .build()
        .unwrap();
    let g = c
        .acquire_timeout("tls", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(g.token(), 78);
    tokio::select! {
        lost = g.lost() => panic!("lost: {lost}"),
        _ = tokio::time::sleep(Duration::from_millis(400)) => {}
    }
    g.release().await;
    tokio::task::spawn_blocking(move || fake.join())
        .await
        .unwrap();
}

/// TLS to a plaintext server (the real one): the handshake fails at once
/// with a message that names the server and says it may not speak TLS,
/// and a timed acquire keeps that as the cause of its timeout.
#[test]
fn tls_to_a_plaintext_server_says_the_server_may_not_speak_tls() {
    let server = common::Server::start();
    let c = monolock::Client::builder()
        .server(server.addr.clone())
        .tls(client_config())
        .build()
        .unwrap();
    let err = c.try_acquire("tls").unwrap_err();
    let want = format!("TLS handshake with {} failed (", server.addr);
    let msg = err.to_string();
    assert!(
        msg.starts_with("monolock: connection failed: ")
            && msg.contains(&want)
            && msg.ends_with("; the server may not speak TLS"),
        "{msg}"
    );
    let err = c
        .acquire_timeout("tls", Duration::from_millis(300))
        .unwrap_err();
    assert!(
        matches!(err, monolock::Error::Timeout { last: Some(_), .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("the server may not speak TLS"),
        "{err}"
    );
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn tokio_tls_to_a_plaintext_server_says_the_server_may_not_speak_tls() {
    let server = common::Server::start();
    let c = monolock::tokio::Client::builder()
        .server(server.addr.clone())
        .tls(client_config())
        .build()
        .unwrap();
    let msg = c.try_acquire("tls").await.unwrap_err().to_string();
    assert!(
        msg.contains(&format!("TLS handshake with {} failed (", server.addr))
            && msg.ends_with("; the server may not speak TLS"),
        "{msg}"
    );
}
