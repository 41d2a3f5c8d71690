//! Shared locks and semaphores (protocol version 2): both clients against
//! the real server (readers together, writers alone, arrival order, permits,
//! the limit agreement), and against a scripted fake server for the exact
//! bytes and a server that speaks version 1 only.

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use monolock::{Claim, Client, Error, LockGuard, Origin};

const LEASE: Duration = Duration::from_millis(2000);

fn client(addr: &str) -> Client {
    builder(addr, LEASE).build().unwrap()
}

/// A client whose WAITING hook counts, to see a claim queue.
fn counting_client(addr: &str) -> (Client, WaitCount) {
    let waits = WaitCount::default();
    let c = builder(addr, LEASE)
        .on_waiting(waits.hook())
        .build()
        .unwrap();
    (c, waits)
}

/// Waits until `waits` reached `n`.
fn wait_for_queue(waits: &WaitCount, n: usize) {
    let until = Instant::now() + Duration::from_secs(10);
    while waits.get() < n {
        assert!(Instant::now() < until, "the claim was never queued");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs a blocking acquire on its own thread; its outcome arrives on the
/// channel.
fn spawn_acquire(c: Client, name: &'static str, claim: Claim) -> mpsc::Receiver<LockGuard> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let g = c
            .acquire_timeout_with(name, Duration::from_secs(20), claim)
            .unwrap();
        let _ = tx.send(g);
    });
    rx
}

/// Nothing arrives on `rx` for a while: the claim is still queued.
fn still_waiting(rx: &mpsc::Receiver<LockGuard>) {
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "granted too early"
    );
}

fn granted(rx: &mpsc::Receiver<LockGuard>) -> LockGuard {
    rx.recv_timeout(Duration::from_secs(10)).expect("granted")
}

#[test]
fn readers_hold_together_with_distinct_increasing_tokens() {
    let server = Server::start();
    let c = client(&server.addr);
    let r1 = c.acquire_with("s-readers", Claim::shared()).unwrap();
    let r2 = c.try_acquire_with("s-readers", Claim::shared()).unwrap();
    let r3 = c
        .acquire_timeout_with("s-readers", Duration::from_secs(5), Claim::shared())
        .unwrap();
    assert!(r1.token() < r2.token() && r2.token() < r3.token());
    for r in [&r1, &r2, &r3] {
        r.check().unwrap();
        assert_eq!(r.name(), "s-readers");
    }
    // No exclusive claim beside them.
    let err = c.try_acquire("s-readers").unwrap_err();
    assert!(err.is_busy(), "{err}");
    drop((r1, r2, r3));
    // Once they are all gone, a writer gets it at once.
    let w = c.try_acquire("s-readers").unwrap();
    assert!(w.token() > 0);
}

#[test]
fn a_writer_waits_for_every_reader() {
    let server = Server::start();
    let c = client(&server.addr);
    let r1 = c.acquire_with("s-writer", Claim::shared()).unwrap();
    let r2 = c.acquire_with("s-writer", Claim::shared()).unwrap();
    let (wc, waits) = counting_client(&server.addr);
    let writer = spawn_acquire(wc, "s-writer", Claim::exclusive());
    wait_for_queue(&waits, 1);
    r1.release();
    still_waiting(&writer);
    r2.release();
    let w = granted(&writer);
    assert!(w.token() > 0);
    assert!(c
        .try_acquire_with("s-writer", Claim::shared())
        .unwrap_err()
        .is_busy());
}

#[test]
fn a_reader_behind_a_waiting_writer_waits_for_it() {
    let server = Server::start();
    let c = client(&server.addr);
    let r1 = c.acquire_with("s-barging", Claim::shared()).unwrap();
    let (wc, writer_waits) = counting_client(&server.addr);
    let writer = spawn_acquire(wc, "s-barging", Claim::exclusive());
    wait_for_queue(&writer_waits, 1);
    // The lock is held shared, but a writer is queued: no barging.
    let err = c
        .try_acquire_with("s-barging", Claim::shared())
        .unwrap_err();
    assert!(err.is_busy(), "{err}");
    assert_eq!(
        err.to_string(),
        "monolock: lock \"s-barging\" is held exclusively by another session"
    );
    let (rc, reader_waits) = counting_client(&server.addr);
    let reader = spawn_acquire(rc, "s-barging", Claim::shared());
    wait_for_queue(&reader_waits, 1);
    r1.release();
    let w = granted(&writer);
    still_waiting(&reader);
    let wt = w.token();
    w.release();
    let r2 = granted(&reader);
    assert!(r2.token() > wt);
}

#[test]
fn a_semaphore_of_three_queues_the_fourth_until_a_release() {
    let server = Server::start();
    let c = client(&server.addr);
    let permits: Vec<LockGuard> = (0..3)
        .map(|_| c.acquire_with("s-sem", Claim::semaphore(3)).unwrap())
        .collect();
    let err = c
        .try_acquire_with("s-sem", Claim::semaphore(3))
        .unwrap_err();
    assert!(err.is_busy(), "{err}");
    assert_eq!(
        err.to_string(),
        "monolock: all 3 permits of \"s-sem\" are taken"
    );
    let (fc, waits) = counting_client(&server.addr);
    let fourth = spawn_acquire(fc, "s-sem", Claim::semaphore(3));
    wait_for_queue(&waits, 1);
    still_waiting(&fourth);
    let max = permits.iter().map(LockGuard::token).max().unwrap();
    permits.into_iter().next().unwrap().release();
    let g = granted(&fourth);
    assert!(g.token() > max);
    g.check().unwrap();
}

#[test]
fn a_different_limit_is_the_terminal_limit_mismatch() {
    let server = Server::start();
    let c = client(&server.addr);
    let _held = c.acquire_with("s-mismatch", Claim::semaphore(3)).unwrap();
    let started = Instant::now();
    let err = c
        .acquire_with("s-mismatch", Claim::semaphore(2))
        .unwrap_err();
    assert!(matches!(err, Error::LimitMismatch(_)), "{err}");
    assert_eq!(err.code(), Some(0x1a));
    assert!(!err.is_temporary());
    assert_eq!(err.reason().unwrap().origin(), Origin::Server);
    assert!(started.elapsed() < Duration::from_secs(2), "not retried");
}

/// The bytes of an ACQUIRE as the fake server reads them: exactly `len`.
fn read_exact(stream: &mut std::net::TcpStream, len: usize) -> Vec<u8> {
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
        Ok(_) => panic!("a second connection: the client retried"),
        Err(e) => panic!("accept: {e}"),
    }
}

/// ACQUIRE v2 of "s-shared", lease 2000 ms, shared without a limit.
const V2_SHARED: &str = "0102000007d00100000008732d736861726564";
/// ACQUIRE v2 of "perms", lease 2000 ms, a semaphore of 4.
const V2_SEM: &str = "0102000007d001000400057065726d73";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn shared_claims_send_version_2_and_exclusive_ones_version_1() {
    let shared = hex(V2_SHARED);
    let sem = hex(V2_SEM);
    let (want_shared, want_sem) = (shared.clone(), sem.clone());
    let fake = Fake::start(move |listener| {
        for (want, token) in [(want_shared, 1u64), (want_sem, 2)] {
            let mut s = accept(&listener);
            assert_eq!(read_exact(&mut s, want.len()), want);
            send(&mut s, &acquired(token));
            expect_close(&mut s);
        }
        let mut s = accept(&listener);
        assert_eq!(read_acquire(&mut s), (2000, "excl".to_owned()));
        send(&mut s, &acquired(3));
        expect_close(&mut s);
    });
    let c = client(&fake.addr);
    let g = c.acquire_with("s-shared", Claim::shared()).unwrap();
    assert_eq!(g.token(), 1);
    g.release();
    let g = c.try_acquire_with("perms", Claim::semaphore(4)).unwrap();
    assert_eq!(g.token(), 2);
    g.release();
    let g = c.acquire_with("excl", Claim::exclusive()).unwrap();
    assert_eq!(g.token(), 3);
    g.release();
    fake.join();
}

#[test]
fn a_v1_server_refuses_a_shared_claim_at_once_without_a_retry() {
    let (tx, rx) = mpsc::channel();
    let fake = Fake::start(move |listener| {
        let mut s = accept(&listener);
        let want = hex(V2_SEM);
        assert_eq!(read_exact(&mut s, want.len()), want);
        send(&mut s, &error(0x10, "unsupported protocol version"));
        drop(s);
        rx.recv().unwrap();
        no_more_connections(&listener);
    });
    let c = client(&fake.addr);
    let started = Instant::now();
    let err = c
        .acquire_timeout_with("perms", Duration::from_secs(10), Claim::semaphore(4))
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2), "not retried");
    tx.send(()).unwrap();
    match &err {
        Error::SharedUnsupported { addr, cause } => {
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
            "monolock: server {} does not support shared locks or semaphores (it answered a \
             protocol version 2 ACQUIRE with 0x10 unsupported protocol version); use an \
             exclusive lock, or upgrade the server",
            fake.addr
        )
    );
    fake.join();
}

#[test]
fn a_semaphore_limit_out_of_range_is_refused_before_connecting() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let c = client(&addr);
    for n in [0, 65536] {
        let err = c
            .try_acquire_with("perms", Claim::semaphore(n))
            .unwrap_err();
        assert!(matches!(err, Error::InvalidMode(_)), "{err}");
        assert_eq!(err.reason().unwrap().origin(), Origin::Client);
        assert_eq!(
            err.to_string(),
            format!("monolock: a semaphore's limit must be a whole number from 1 to 65535 permits, got {n} (0x19)")
        );
    }
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
    async fn readers_together_then_a_writer_and_a_semaphore() {
        let server = Server::start();
        let c = client(&server.addr);
        let r1 = c.acquire_with("t-readers", Claim::shared()).await.unwrap();
        let r2 = c
            .try_acquire_with("t-readers", Claim::shared())
            .await
            .unwrap();
        assert!(r1.token() < r2.token());
        assert!(c.try_acquire("t-readers").await.unwrap_err().is_busy());
        let writer = {
            let c = c.clone();
            tokio::spawn(async move { c.acquire("t-readers").await.unwrap() })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        r1.release().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!writer.is_finished(), "the writer waits for every reader");
        r2.release().await;
        let w = tokio::time::timeout(Duration::from_secs(10), writer)
            .await
            .unwrap()
            .unwrap();
        assert!(w.token() > 0);
        w.release().await;

        let mut permits = Vec::new();
        for _ in 0..3 {
            let g = c
                .acquire_timeout_with("t-sem", Duration::from_secs(5), Claim::semaphore(3))
                .await
                .unwrap();
            permits.push(g);
        }
        let err = c
            .try_acquire_with("t-sem", Claim::semaphore(3))
            .await
            .unwrap_err();
        assert!(err.is_busy(), "{err}");
        let err = c
            .try_acquire_with("t-sem", Claim::semaphore(2))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::LimitMismatch(_)), "{err}");
        permits.pop().unwrap().release().await;
        let g = c
            .try_acquire_with("t-sem", Claim::semaphore(3))
            .await
            .unwrap();
        g.check().unwrap();
    }

    #[tokio::test]
    async fn a_v1_server_refuses_a_shared_claim_at_once() {
        let (tx, rx) = mpsc::channel();
        let fake = Fake::start(move |listener| {
            let mut s = accept(&listener);
            let want = hex(V2_SEM);
            assert_eq!(read_exact(&mut s, want.len()), want);
            send(&mut s, &error(0x10, ""));
            drop(s);
            rx.recv().unwrap();
            no_more_connections(&listener);
        });
        let c = client(&fake.addr);
        let err = c
            .acquire_with("perms", Claim::semaphore(4))
            .await
            .unwrap_err();
        tx.send(()).unwrap();
        assert!(
            matches!(&err, Error::SharedUnsupported { addr, .. } if addr == &fake.addr),
            "{err}"
        );
        assert_eq!(err.code(), Some(0x10));
        assert!(!err.is_temporary());
        tokio::task::spawn_blocking(move || fake.join())
            .await
            .unwrap();
    }
}
