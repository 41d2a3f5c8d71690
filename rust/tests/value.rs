//! A value per claim (protocol version 3): both clients against the real
//! server (a claim with a value is granted, and the admin listing shows
//! the value; a PROCLAIM replaces it), and against a scripted fake server
//! for the exact bytes, a value too long, a server that predates values and
//! a PROCLAIM that is never answered.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use monolock::{Claim, Client, Error, Origin};

const LEASE: Duration = Duration::from_millis(5000);

fn client(addr: &str) -> Client {
    builder(addr, LEASE).build().unwrap()
}

/// ACQUIRE v3 of "service/leader", lease 5000 ms, exclusive, with the value
/// "10.0.0.7:8080" (spec/vectors/frames.json, client_valid_v3).
const V3_LEADER: &str =
    "010300001388000000000e736572766963652f6c6561646572000d31302e302e302e373a38303830";
/// ACQUIRE v3 of "pool/gpu", lease 5000 ms, a semaphore of 2, with the
/// value {"host":"gpu-3"}.
const V3_GPU: &str = "0103000013880100020008706f6f6c2f67707500107b22686f7374223a226770752d33227d";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn read_exact(stream: &mut TcpStream, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    stream.read_exact(&mut buf).unwrap();
    buf
}

/// No connection arrives at `listener` for a while.
fn no_more_connections(listener: &TcpListener) {
    listener.set_nonblocking(true).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok(_) => panic!("a connection: the client sent something"),
        Err(e) => panic!("accept: {e}"),
    }
}

/// The admin API's answer to `GET path`, body only.
fn admin_get(admin: &str, path: &str) -> String {
    let mut s = TcpStream::connect(admin).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    reply.split_once("\r\n\r\n").unwrap().1.to_owned()
}

#[test]
fn a_claim_with_a_value_is_granted_by_the_real_server() {
    let server = Server::start_with_admin();
    let c = client(&server.addr);
    let claim = Claim::exclusive().with_value("10.0.0.7:8080");
    let g = c.acquire_with("v-leader", claim.clone()).unwrap();
    g.check().unwrap();
    assert_eq!(g.name(), "v-leader");
    // The server keeps the value with its holder.
    let listing = admin_get(server.admin.as_deref().unwrap(), "/v1/locks");
    let listing: serde_json::Value = serde_json::from_str(&listing).unwrap();
    let lock = &listing["locks"][0];
    assert_eq!(lock["name"], "v-leader", "{listing}");
    assert_eq!(lock["holder"]["value"], "10.0.0.7:8080", "{listing}");
    // It is an exclusive claim all the same.
    assert!(c.try_acquire("v-leader").unwrap_err().is_busy());
    let busy = c.try_acquire_with("v-leader", claim).unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    g.release();

    // A semaphore with a value, a value that is not UTF-8, the longest one.
    let sem = Claim::semaphore(2).with_value(&b"\x00\xff\x10"[..]);
    let p1 = c.acquire_with("v-sem", sem.clone()).unwrap();
    let p2 = c.try_acquire_with("v-sem", sem.clone()).unwrap();
    assert!(p1.token() < p2.token());
    assert!(c.try_acquire_with("v-sem", sem).unwrap_err().is_busy());
    let longest = Claim::exclusive().with_value(vec![b'v'; 1024]);
    let g = c
        .acquire_timeout_with("v-long", Duration::from_secs(5), longest)
        .unwrap();
    g.check().unwrap();
}

/// The admin listing's entry of the lock `name`.
fn listed(admin: &str, name: &str) -> serde_json::Value {
    let listing: serde_json::Value = serde_json::from_str(&admin_get(admin, "/v1/locks")).unwrap();
    let locks = listing["locks"].as_array().unwrap();
    let lock = locks.iter().find(|l| l["name"] == name);
    lock.unwrap_or_else(|| panic!("{name} not in {listing}"))
        .clone()
}

/// A value too long for a PROCLAIM: refused before sending, lock kept.
fn assert_too_long(err: &Error) {
    assert!(matches!(err, Error::ValueTooLong(_)), "{err}");
    assert_eq!(err.code(), Some(0x1b));
    assert_eq!(err.reason().unwrap().origin(), Origin::Client);
}

/// A lock claimed without a value cannot proclaim.
fn assert_no_value(err: &Error, name: &str) {
    assert!(matches!(err, Error::NoValue { .. }), "{err}");
    assert!(!err.is_temporary());
    assert_eq!(
        err.to_string(),
        format!("monolock: lock \"{name}\" was claimed without a value (use Claim::with_value to proclaim)")
    );
}

/// A lock lost because its connection ended.
fn assert_lost_io(err: &Error) {
    match err {
        Error::Lost(cause) => assert!(matches!(**cause, Error::Io(_)), "{cause}"),
        other => panic!("{other}"),
    }
}

#[test]
fn proclaim_replaces_the_value_and_the_server_has_it_when_it_returns() {
    let mut server = Server::start_with_admin();
    let admin = server.admin.clone().unwrap();
    let c = client(&server.addr);
    let claim = Claim::exclusive().with_value("10.0.0.7:8080");
    let g = c.acquire_with("p-leader", claim).unwrap();
    for v in ["10.0.0.7:9090", "10.0.0.7:9191", ""] {
        g.proclaim(v).unwrap();
        let lock = listed(&admin, "p-leader");
        let shown = lock["holder"]["value"].as_str().unwrap_or_default();
        assert_eq!(shown, v, "the server has it when proclaim returns: {lock}");
        assert_eq!(lock["holder"]["token"], g.token(), "{lock}");
    }
    g.check().unwrap();
    assert_too_long(&g.proclaim(vec![b'v'; 1025]).unwrap_err());
    g.check().unwrap();

    let plain = c.acquire("p-plain").unwrap();
    assert_no_value(&plain.proclaim("x").unwrap_err(), "p-plain");
    plain.check().unwrap();

    // After a loss: the loss, and no value is taken for one.
    server.kill();
    g.wait_lost_timeout(Duration::from_secs(5)).expect("lost");
    assert_lost_io(&g.proclaim("10.0.0.7:1").unwrap_err());
    assert_no_value(&plain.proclaim("x").unwrap_err(), "p-plain");
}

/// A fake server that grants a claim with a value, reads its PROCLAIM of
/// "b" (the exact bytes) and then ends the connection without an answer.
fn grant_then_drop_the_proclaim() -> Fake {
    Fake::start(move |listener| {
        let mut s = accept(&listener);
        let want = hex(V3_LEADER);
        assert_eq!(read_exact(&mut s, want.len()), want);
        send(&mut s, &acquired(5));
        assert_eq!(read_exact(&mut s, 4), [0x03, 0x00, 0x01, b'b']);
    })
}

/// A fake server that grants a claim with a value (lease 1000 ms), reads
/// the first heartbeat and tells `in_flight`, then holds its reply back for
/// a while: a PROCLAIM handed in meanwhile must wait for that reply. It
/// answers the PROCLAIM of "b" and waits for the close.
fn hold_back_a_heartbeat(in_flight: mpsc::Sender<()>) -> Fake {
    Fake::start(move |listener| {
        let mut s = accept(&listener);
        let want = hex(V3_LEADER_1S);
        assert_eq!(read_exact(&mut s, want.len()), want);
        send(&mut s, &acquired(5));
        read_heartbeat(&mut s);
        in_flight.send(()).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut b = [0u8; 1];
        let early = s.read(&mut b);
        assert!(
            early.is_err(),
            "a request before the reply: {early:?} {b:?}"
        );
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        send(&mut s, &acquired(5));
        assert_eq!(read_exact(&mut s, 4), [0x03, 0x00, 0x01, b'b']);
        send(&mut s, &acquired(5));
        expect_close(&mut s);
    })
}

/// [`V3_LEADER`] with a lease of 1000 ms.
const V3_LEADER_1S: &str =
    "0103000003e8000000000e736572766963652f6c6561646572000d31302e302e302e373a38303830";

#[test]
fn a_proclaim_waits_for_the_reply_in_flight() {
    let (tx, in_flight) = mpsc::channel();
    let fake = hold_back_a_heartbeat(tx);
    let c = builder(&fake.addr, Duration::from_millis(1000))
        .build()
        .unwrap();
    let leader = Claim::exclusive().with_value("10.0.0.7:8080");
    let g = c.acquire_with("service/leader", leader).unwrap();
    in_flight.recv().unwrap();
    g.proclaim("b").unwrap();
    g.check().unwrap();
    g.release();
    fake.join();
}

#[test]
fn a_proclaim_never_answered_returns_the_loss() {
    let fake = grant_then_drop_the_proclaim();
    let c = client(&fake.addr);
    let leader = Claim::exclusive().with_value("10.0.0.7:8080");
    let g = c.acquire_with("service/leader", leader).unwrap();
    let started = Instant::now();
    assert_lost_io(&g.proclaim("b").unwrap_err());
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(g.is_lost());
    fake.join();
}

#[test]
fn a_value_is_sent_as_version_3_and_no_value_as_before() {
    let (leader, gpu) = (hex(V3_LEADER), hex(V3_GPU));
    let fake = Fake::start(move |listener| {
        for (want, token) in [(leader, 1u64), (gpu, 2)] {
            let mut s = accept(&listener);
            assert_eq!(read_exact(&mut s, want.len()), want);
            send(&mut s, &acquired(token));
            expect_close(&mut s);
        }
        // An empty value is no value: version 1.
        let mut s = accept(&listener);
        assert_eq!(read_acquire(&mut s), (5000, "plain".to_owned()));
        send(&mut s, &acquired(3));
        expect_close(&mut s);
    });
    let c = client(&fake.addr);
    let leader = Claim::exclusive().with_value("10.0.0.7:8080");
    let g = c.acquire_with("service/leader", leader).unwrap();
    assert_eq!(g.token(), 1);
    g.release();
    let gpu = Claim::semaphore(2).with_value(r#"{"host":"gpu-3"}"#);
    let g = c.try_acquire_with("pool/gpu", gpu).unwrap();
    assert_eq!(g.token(), 2);
    g.release();
    let g = c
        .acquire_with("plain", Claim::exclusive().with_value(""))
        .unwrap();
    assert_eq!(g.token(), 3);
    g.release();
    fake.join();
}

#[test]
fn a_server_without_values_refuses_a_claim_with_one_at_once() {
    let (tx, rx) = mpsc::channel();
    let fake = Fake::start(move |listener| {
        let mut s = accept(&listener);
        let want = hex(V3_GPU);
        assert_eq!(read_exact(&mut s, want.len()), want);
        send(&mut s, &error(0x10, "unsupported protocol version"));
        drop(s);
        rx.recv().unwrap();
        no_more_connections(&listener);
    });
    let c = client(&fake.addr);
    let started = Instant::now();
    let gpu = Claim::semaphore(2).with_value(r#"{"host":"gpu-3"}"#);
    let err = c
        .acquire_timeout_with("pool/gpu", Duration::from_secs(10), gpu)
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2), "not retried");
    tx.send(()).unwrap();
    match &err {
        Error::ValueUnsupported { addr, cause } => {
            assert_eq!(addr, &fake.addr);
            assert!(matches!(**cause, Error::UnsupportedVersion(_)));
        }
        other => panic!("{other}"),
    }
    assert_eq!(err.code(), Some(0x10));
    assert!(!err.is_temporary());
    assert_eq!(
        err.to_string(),
        format!(
            "monolock: server {} does not support claims with a value (it answered a \
             protocol version 3 ACQUIRE with 0x10 unsupported protocol version); claim \
             without a value, or upgrade the server",
            fake.addr
        )
    );
    fake.join();
}

#[test]
fn a_value_too_long_is_refused_before_connecting() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let c = client(&addr);
    let claim = Claim::shared().with_value(vec![b'v'; 1025]);
    let err = c.try_acquire_with("v", claim).unwrap_err();
    assert!(matches!(err, Error::ValueTooLong(_)), "{err}");
    assert_eq!(err.code(), Some(0x1b));
    assert!(!err.is_temporary());
    assert_eq!(err.reason().unwrap().origin(), Origin::Client);
    assert_eq!(
        err.to_string(),
        "monolock: claim value is 1025 bytes, the limit is 1024 (0x1b)"
    );
    no_more_connections(&listener);
}

#[cfg(feature = "tokio")]
mod tokio_client {
    use super::*;
    use monolock::tokio::Client;

    fn client(addr: &str) -> Client {
        tokio_builder(addr, LEASE).build().unwrap()
    }

    #[tokio::test]
    async fn a_claim_with_a_value_is_granted_by_the_real_server() {
        let server = Server::start();
        let c = client(&server.addr);
        let claim = Claim::exclusive().with_value("10.0.0.7:8080");
        let g = c.acquire_with("t-leader", claim.clone()).await.unwrap();
        g.check().unwrap();
        let busy = c.try_acquire_with("t-leader", claim).await.unwrap_err();
        assert!(busy.is_busy(), "{busy}");
        g.release().await;
    }

    /// [`listed`] off the runtime's threads: the keeper task keeps running.
    async fn listed_async(admin: &str, name: &str) -> serde_json::Value {
        let (admin, name) = (admin.to_owned(), name.to_owned());
        tokio::task::spawn_blocking(move || listed(&admin, &name))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn proclaim_replaces_the_value_and_the_server_has_it_when_it_returns() {
        let mut server = Server::start_with_admin();
        let admin = server.admin.clone().unwrap();
        let c = client(&server.addr);
        let claim = Claim::exclusive().with_value("10.0.0.7:8080");
        let g = c.acquire_with("t-p-leader", claim).await.unwrap();
        for v in ["10.0.0.7:9090", "10.0.0.7:9191"] {
            g.proclaim(v).await.unwrap();
            let lock = listed_async(&admin, "t-p-leader").await;
            assert_eq!(lock["holder"]["value"], v, "{lock}");
            assert_eq!(lock["holder"]["token"], g.token(), "{lock}");
        }
        assert_too_long(&g.proclaim(vec![b'v'; 1025]).await.unwrap_err());
        g.check().unwrap();

        let plain = c.acquire("t-p-plain").await.unwrap();
        assert_no_value(&plain.proclaim("x").await.unwrap_err(), "t-p-plain");
        plain.check().unwrap();

        server.kill();
        g.lost().await;
        assert_lost_io(&g.proclaim("10.0.0.7:1").await.unwrap_err());
    }

    #[tokio::test]
    async fn a_proclaim_waits_for_the_reply_in_flight() {
        let (tx, in_flight) = mpsc::channel();
        let fake = hold_back_a_heartbeat(tx);
        let c = tokio_builder(&fake.addr, Duration::from_millis(1000))
            .build()
            .unwrap();
        let leader = Claim::exclusive().with_value("10.0.0.7:8080");
        let g = c.acquire_with("service/leader", leader).await.unwrap();
        tokio::task::spawn_blocking(move || in_flight.recv().unwrap())
            .await
            .unwrap();
        g.proclaim("b").await.unwrap();
        g.check().unwrap();
        g.release().await;
        tokio::task::spawn_blocking(move || fake.join())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_proclaim_never_answered_returns_the_loss() {
        let fake = grant_then_drop_the_proclaim();
        let c = client(&fake.addr);
        let leader = Claim::exclusive().with_value("10.0.0.7:8080");
        let g = c.acquire_with("service/leader", leader).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(3), g.proclaim("b")).await;
        assert_lost_io(&answer.expect("no hang").unwrap_err());
        assert!(g.is_lost());
        tokio::task::spawn_blocking(move || fake.join())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_server_without_values_refuses_a_claim_with_one_at_once() {
        let (tx, rx) = mpsc::channel();
        let fake = Fake::start(move |listener| {
            let mut s = accept(&listener);
            let want = hex(V3_LEADER);
            assert_eq!(read_exact(&mut s, want.len()), want);
            send(&mut s, &error(0x10, ""));
            drop(s);
            rx.recv().unwrap();
            no_more_connections(&listener);
        });
        let c = client(&fake.addr);
        let leader = Claim::exclusive().with_value("10.0.0.7:8080");
        let err = c.acquire_with("service/leader", leader).await.unwrap_err();
        tx.send(()).unwrap();
        assert!(
            matches!(&err, Error::ValueUnsupported { addr, .. } if addr == &fake.addr),
            "{err}"
        );
        assert_eq!(err.code(), Some(0x10));
        assert!(!err.is_temporary());
        tokio::task::spawn_blocking(move || fake.join())
            .await
            .unwrap();
    }
}
