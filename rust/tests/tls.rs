//! TLS for both clients, against an in-test rustls server that speaks the
//! protocol (the Go server's TLS lands separately). The certificate is made
//! per run with rcgen, so no private key is ever committed.
#![cfg(feature = "tls")]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    tls_server_script(conns, token, false)
}

/// Like [`tls_server`] with two connections, the first of which is
/// answered with ERROR 0x01 (shutting down) after its ACQUIRE.
fn tls_server_after_shutting_down(token: u64) -> Fake {
    tls_server_script(2, token, true)
}

fn tls_server_script(conns: usize, token: u64, shutting_down_first: bool) -> Fake {
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
        for i in 0..conns {
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
            if shutting_down_first && i == 0 {
                s.write_all(&common::error(0x01, "shutting down")).unwrap();
                s.conn.send_close_notify();
                s.flush().unwrap();
                continue;
            }
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

/// A TLS fake server of two connections that checks every close that is
/// not a release also ends with the client's close_notify: the first
/// ACQUIRE is refused (ERROR 0x18), the second is granted and then ended
/// by the server (ERROR 0x01), which loses the lock.
fn tls_server_ending_both() -> Fake {
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
        for (i, what) in ["a refused acquire", "a lost lock"].into_iter().enumerate() {
            let tcp = common::accept(&listener);
            let conn = rustls::ServerConnection::new(Arc::clone(&config)).unwrap();
            let mut s = rustls::StreamOwned::new(conn, tcp);
            let mut head = [0u8; 8];
            s.read_exact(&mut head).unwrap();
            assert_eq!(&head[..2], &[0x01, 0x01]);
            let len = u16::from_be_bytes([head[6], head[7]]) as usize;
            s.read_exact(&mut vec![0u8; len]).unwrap();
            if i == 0 {
                s.write_all(&common::error(0x18, "not authorized for lock"))
                    .unwrap();
            } else {
                s.write_all(&common::acquired(5)).unwrap();
                s.write_all(&common::error(0x01, "shutting down")).unwrap();
            }
            let mut b = [0u8; 1];
            loop {
                match s.read(&mut b) {
                    Ok(1) if b[0] == 0x02 => {} // a heartbeat may come first
                    Ok(1) => panic!("{what}: byte 0x{:02x} before the close", b[0]),
                    // rustls reads zero bytes only after a close_notify.
                    Ok(_) => break,
                    Err(e) => panic!("{what} closed without close_notify: {e}"),
                }
            }
        }
    })
}

#[test]
fn blocking_closes_that_are_not_releases_send_close_notify() {
    let fake = tls_server_ending_both();
    let c = monolock::Client::builder()
        .server(fake.addr.clone())
        .lease(Duration::from_secs(10))
        .tls(client_config())
        .build()
        .unwrap();
    let refused = c.try_acquire("tls");
    assert!(
        matches!(refused, Err(monolock::Error::NotAuthorized(_))),
        "{refused:?}"
    );
    let g = c.try_acquire("tls").unwrap();
    assert!(g.wait_lost_timeout(Duration::from_secs(20)).is_some());
    fake.join();
    drop(g);
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn tokio_closes_that_are_not_releases_send_close_notify() {
    let fake = tls_server_ending_both();
    let c = monolock::tokio::Client::builder()
        .server(fake.addr.clone())
        .lease(Duration::from_secs(10))
        .tls(client_config())
        .build()
        .unwrap();
    let refused = c.try_acquire("tls").await;
    assert!(
        matches!(refused, Err(monolock::Error::NotAuthorized(_))),
        "{refused:?}"
    );
    let g = c.try_acquire("tls").await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), g.lost())
        .await
        .expect("the server's ERROR loses the lock");
    tokio::task::spawn_blocking(move || fake.join())
        .await
        .unwrap();
    drop(g);
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

/// Another self-signed certificate (for the same names), made once per
/// run: a CA the clients do not trust, or the CA of client certificates.
fn other_cert() -> &'static rcgen::CertifiedKey {
    static CERT: OnceLock<rcgen::CertifiedKey> = OnceLock::new();
    CERT.get_or_init(|| {
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("generate test certificate")
    })
}

/// A server config presenting `cert`, requiring a client certificate
/// signed by `client_ca` when one is given, speaking only `versions`.
fn server_config(
    cert: &rcgen::CertifiedKey,
    client_ca: Option<&rcgen::CertifiedKey>,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ServerConfig> {
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der()));
    let builder = rustls::ServerConfig::builder_with_protocol_versions(versions);
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.cert.der().clone()).unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    Arc::new(
        builder
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap(),
    )
}

/// A TLS fake server whose connections fail on a certificate (either
/// side's): it serves `config` and expects the handshake, or the read of
/// the client's first bytes, to fail, every time, until it is finished.
struct Refusing {
    fake: Fake,
    addr: String,
    conns: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Refusing {
    fn start(config: Arc<rustls::ServerConfig>) -> Refusing {
        let conns = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (counted, stopped) = (Arc::clone(&conns), Arc::clone(&stop));
        let fake = Fake::start(move |listener: TcpListener| {
            listener.set_nonblocking(true).unwrap();
            while !stopped.load(Ordering::SeqCst) {
                let tcp = match listener.accept() {
                    Ok((tcp, _)) => tcp,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    Err(e) => panic!("accept: {e}"),
                };
                counted.fetch_add(1, Ordering::SeqCst);
                tcp.set_nonblocking(false).unwrap();
                tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let conn = rustls::ServerConnection::new(Arc::clone(&config)).unwrap();
                let mut s = rustls::StreamOwned::new(conn, tcp);
                let mut head = [0u8; 8];
                let res = s.read_exact(&mut head);
                assert!(res.is_err(), "the handshake succeeded");
                // Whatever alert is due goes out before the close. Then the
                // client's last bytes are read before the socket closes:
                // closing with them unread sends a reset, which can reach
                // the client before the alert and read as a dropped
                // connection (TLS 1.2: its Finished crosses our alert).
                let _ = s.flush();
                let tcp = s.sock;
                let _ = tcp.shutdown(std::net::Shutdown::Write);
                let _ = tcp.set_read_timeout(Some(Duration::from_secs(2)));
                let mut sink = [0u8; 512];
                while matches!(std::io::Read::read(&mut &tcp, &mut sink), Ok(n) if n > 0) {}
            }
        });
        let addr = fake.addr.clone();
        Refusing {
            fake,
            addr,
            conns,
            stop,
        }
    }

    /// Stops the server; how many connections it had.
    fn finish(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.fake.join();
        self.conns.load(Ordering::SeqCst)
    }
}

/// Which side refused a certificate, in the message's hint.
const SERVER_CERT_HINT: &str =
    "(the server's certificate is not trusted: check the CA file and the server name)";
const CLIENT_CERT_HINT: &str =
    "(the server refused this client's certificate: give a client certificate that its CA signs)";

/// A certificate problem: a connect failure (`Error::Io`), not temporary,
/// without a code, whose message names the server, gives rustls's cause
/// and the hint; it came at once, long before the 10 s deadline.
fn assert_certificate_problem(err: &monolock::Error, addr: &str, hint: &str, took: Duration) {
    assert!(matches!(err, monolock::Error::Io(_)), "{err:?}");
    assert!(!err.is_temporary() && !err.is_timeout(), "{err:?}");
    assert_eq!(err.code(), None);
    let msg = err.to_string();
    let head = format!("monolock: TLS handshake with {addr} failed: ");
    assert!(
        msg.starts_with(&head) && msg.ends_with(hint) && msg.len() > head.len() + hint.len() + 1,
        "{msg}"
    );
    assert!(took < Duration::from_secs(2), "took {took:?}: {msg}");
}

/// A waiting acquire (10 s) on the blocking client.
fn blocking_wait(
    builder: monolock::ClientBuilder<monolock::Client>,
) -> (Result<monolock::LockGuard, monolock::Error>, Duration) {
    let c = builder.build().unwrap();
    let start = std::time::Instant::now();
    let res = c.acquire_timeout("tls", Duration::from_secs(10));
    (res, start.elapsed())
}

/// A waiting acquire (10 s) on the tokio client.
#[cfg(feature = "tokio")]
async fn tokio_wait(
    builder: monolock::tokio::ClientBuilder,
) -> (
    Result<monolock::tokio::LockGuard, monolock::Error>,
    Duration,
) {
    let c = builder.build().unwrap();
    let start = std::time::Instant::now();
    let res = c.acquire_timeout("tls", Duration::from_secs(10)).await;
    (res, start.elapsed())
}

/// A client config that trusts `ca` and presents no certificate.
fn trusting(ca: &rcgen::CertifiedKey) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert.der().clone()).unwrap();
    Arc::new(
        monolock::tls::config_builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// The certificate problems of the rule (spec/constants.json,
/// client_defaults.tls_certificate_rule): a fake that fails that way, the
/// client's settings and the hint. TLS 1.3 delivers the server's refusal
/// on the first read, TLS 1.2 in the handshake.
#[allow(clippy::type_complexity)]
fn certificate_problems() -> Vec<(
    &'static str,
    Arc<rustls::ServerConfig>,
    Arc<rustls::ClientConfig>,
    Option<&'static str>,
    &'static str,
)> {
    let tls13: &[&'static rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];
    let tls12: &[&'static rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
    vec![
        (
            "another name",
            server_config(test_cert(), None, tls13),
            client_config(),
            Some("other.example"),
            SERVER_CERT_HINT,
        ),
        (
            "an untrusted CA",
            server_config(test_cert(), None, tls13),
            trusting(other_cert()),
            None,
            SERVER_CERT_HINT,
        ),
        (
            "no client certificate (TLS 1.3)",
            server_config(test_cert(), Some(other_cert()), tls13),
            client_config(),
            None,
            CLIENT_CERT_HINT,
        ),
        (
            "no client certificate (TLS 1.2)",
            server_config(test_cert(), Some(other_cert()), tls12),
            client_config(),
            None,
            CLIENT_CERT_HINT,
        ),
    ]
}

#[test]
fn a_certificate_problem_fails_a_waiting_acquire_at_once() {
    for (what, server, client, name, hint) in certificate_problems() {
        let fake = Refusing::start(server);
        let mut builder = monolock::Client::builder()
            .server(fake.addr.clone())
            .tls(client);
        if let Some(name) = name {
            builder = builder.tls_server_name(name);
        }
        let (res, took) = blocking_wait(builder);
        let err = res.err().unwrap_or_else(|| panic!("{what}: granted"));
        assert_certificate_problem(&err, &fake.addr, hint, took);
        assert_eq!(fake.finish(), 1, "{what}: asked again");
    }
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn tokio_a_certificate_problem_fails_a_waiting_acquire_at_once() {
    for (what, server, client, name, hint) in certificate_problems() {
        let fake = Refusing::start(server);
        let mut builder = monolock::tokio::Client::builder()
            .server(fake.addr.clone())
            .tls(client);
        if let Some(name) = name {
            builder = builder.tls_server_name(name);
        }
        let (res, took) = tokio_wait(builder).await;
        let err = res.err().unwrap_or_else(|| panic!("{what}: granted"));
        assert_certificate_problem(&err, &fake.addr, hint, took);
        let conns = tokio::task::spawn_blocking(move || fake.finish())
            .await
            .unwrap();
        assert_eq!(conns, 1, "{what}: asked again");
    }
}

/// Try-acquire too: one pass, the same error.
#[test]
fn a_certificate_problem_ends_a_try_acquire_with_the_same_error() {
    let fake = Refusing::start(server_config(other_cert(), None, rustls::DEFAULT_VERSIONS));
    let c = monolock::Client::builder()
        .server(fake.addr.clone())
        .tls(client_config())
        .build()
        .unwrap();
    let start = std::time::Instant::now();
    let err = c.try_acquire("tls").unwrap_err();
    assert_certificate_problem(&err, &fake.addr, SERVER_CERT_HINT, start.elapsed());
    assert_eq!(fake.finish(), 1);
}

/// Two servers, the first with a certificate problem: it leaves the
/// rotation and the second grants at once. The second first answers
/// "shutting down" (a retry after a backoff): the retry goes to it again,
/// not to the first.
#[test]
fn a_server_with_a_certificate_problem_is_skipped_for_the_next() {
    for (what, bad) in [
        (
            "untrusted",
            server_config(other_cert(), None, rustls::DEFAULT_VERSIONS),
        ),
        (
            "wants a client certificate",
            server_config(test_cert(), Some(other_cert()), &[&rustls::version::TLS13]),
        ),
    ] {
        let bad = Refusing::start(bad);
        let good = tls_server_after_shutting_down(91);
        let builder = monolock::Client::builder()
            .server(bad.addr.clone())
            .server(good.addr.clone())
            .tls(client_config());
        let (res, took) = blocking_wait(builder.lease(Duration::from_millis(200)));
        let g = res.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(g.token(), 91);
        assert!(took < Duration::from_secs(2), "{what}: took {took:?}");
        assert!(g.wait_lost_timeout(Duration::from_millis(400)).is_none());
        g.release();
        assert_eq!(bad.finish(), 1, "{what}: asked again");
        good.join();
    }
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn tokio_a_server_with_a_certificate_problem_is_skipped_for_the_next() {
    for (what, bad) in [
        (
            "untrusted",
            server_config(other_cert(), None, rustls::DEFAULT_VERSIONS),
        ),
        (
            "wants a client certificate",
            server_config(test_cert(), Some(other_cert()), &[&rustls::version::TLS13]),
        ),
    ] {
        let bad = Refusing::start(bad);
        let good = tls_server_after_shutting_down(92);
        let builder = monolock::tokio::Client::builder()
            .server(bad.addr.clone())
            .server(good.addr.clone())
            .tls(client_config());
        let (res, took) = tokio_wait(builder.lease(Duration::from_millis(200))).await;
        let g = res.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(g.token(), 92);
        assert!(took < Duration::from_secs(2), "{what}: took {took:?}");
        tokio::select! {
            lost = g.lost() => panic!("lost: {lost}"),
            _ = tokio::time::sleep(Duration::from_millis(400)) => {}
        }
        g.release().await;
        let conns = tokio::task::spawn_blocking(move || {
            good.join();
            bad.finish()
        })
        .await
        .unwrap();
        assert_eq!(conns, 1, "{what}: asked again");
    }
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
