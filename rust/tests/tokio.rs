//! The tokio client against the real server and a scripted fake server.
#![cfg(feature = "tokio")]

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use monolock::tokio::Client;
use monolock::Error;

fn client(addr: &str, lease_ms: u64) -> Client {
    tokio_builder(addr, Duration::from_millis(lease_ms))
        .build()
        .unwrap()
}

/// Waits for the fake server's script without blocking the runtime, so
/// that the keeper task can still run (and close).
async fn join(fake: Fake) {
    tokio::task::spawn_blocking(move || fake.join())
        .await
        .unwrap();
}

#[tokio::test]
async fn acquire_release_busy_and_tokens() {
    let server = Server::start();
    let c = client(&server.addr, 2000);
    let before = Instant::now();
    let g = c.acquire("t-basic").await.unwrap();
    let after = Instant::now();
    let timeout = Duration::from_millis(1600);
    assert!(g.valid_until() >= before + timeout && g.valid_until() <= after + timeout);
    assert_eq!(g.name(), "t-basic");
    let err = c.try_acquire("t-basic").await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    let t1 = g.token();
    g.release().await;
    // release() returned once the server had freed the lock: a try gets it.
    let g2 = c.try_acquire("t-basic").await.unwrap();
    assert!(g2.token() > t1);
    g2.check().unwrap();
}

#[tokio::test]
async fn heartbeats_keep_a_short_lease_alive() {
    let server = Server::start();
    // Three leases of 1 s: long enough that a loaded 2-core machine does
    // not starve the heartbeats past the 0.8 s client timeout.
    let c = client(&server.addr, 1000);
    let g = c.acquire("t-heartbeats").await.unwrap();
    let first = g.valid_until();
    tokio::select! {
        lost = g.lost() => panic!("lost: {lost}"),
        _ = tokio::time::sleep(Duration::from_millis(3000)) => {}
    }
    let moved = g.valid_until() - first;
    assert!(
        moved > Duration::from_millis(1500),
        "valid_until moved only {moved:?} in 3 leases"
    );
    assert!(!g.is_lost());
    assert!(c.try_acquire("t-heartbeats").await.unwrap_err().is_busy());
}

#[tokio::test]
async fn waiting_hook_then_promotion_on_release() {
    let server = Server::start();
    let holder = client(&server.addr, 2000).acquire("t-fifo").await.unwrap();
    let (tx, rx) = mpsc::channel();
    let c = tokio_builder(&server.addr, Duration::from_millis(2000))
        .on_waiting(move |name| tx.send(name.to_owned()).unwrap())
        .build()
        .unwrap();
    let waiter =
        tokio::spawn(async move { c.acquire_timeout("t-fifo", Duration::from_secs(20)).await });
    // The hook fires on the waiter's task; poll for it without blocking
    // this (single-threaded) runtime.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(name) = rx.try_recv() {
            assert_eq!(name, "t-fifo");
            break;
        }
        assert!(Instant::now() < deadline, "no waiting hook");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let t0 = holder.token();
    drop(holder);
    let g = waiter.await.unwrap().unwrap();
    assert!(g.token() > t0);
}

#[tokio::test]
async fn acquire_timeout_and_validation() {
    let server = Server::start();
    let c = client(&server.addr, 1000);
    let _holder = c.acquire("t-timeout").await.unwrap();
    let start = Instant::now();
    let err = c
        .acquire_timeout("t-timeout", Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(5),
        "{took:?}"
    );

    let err = c.acquire("").await.unwrap_err();
    assert_eq!(err.code(), Some(0x14));
    let err = tokio_builder(&server.addr, Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(err.code(), Some(0x17));
    let err = c.try_acquire(&"x".repeat(256)).await.unwrap_err();
    assert_eq!(err.code(), Some(0x15));
}

#[tokio::test]
async fn dropping_the_acquire_future_closes_the_connection() {
    let (tx, rx) = mpsc::channel();
    let fake = Fake::start(move |listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &waiting());
        expect_close(&mut s);
        tx.send(Instant::now()).unwrap();
    });
    let c = client(&fake.addr, 1000);
    let res = tokio::time::timeout(Duration::from_millis(200), c.acquire("t-drop")).await;
    assert!(res.is_err(), "the acquire should still be pending");
    let dropped = Instant::now();
    let closed = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("connection closed");
    assert!(closed.duration_since(dropped) < Duration::from_secs(1));
    join(fake).await;
}

#[tokio::test]
async fn server_error_while_holding_is_reported_as_loss() {
    let fake = Fake::start(|listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        // Grant and error in one write: acquired, then lost.
        let mut bytes = acquired(11);
        bytes.extend(error(0x02, ""));
        send(&mut s, &bytes);
        expect_close(&mut s);
    });
    let g = client(&fake.addr, 1000).acquire("t-admin").await.unwrap();
    assert_eq!(g.token(), 11);
    let lost = tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .unwrap();
    let Error::Lost(cause) = &lost else {
        panic!("{lost}")
    };
    assert!(matches!(**cause, Error::AdminClosed(_)), "{cause}");
    assert_eq!(lost.code(), Some(2));
    assert!(g.is_lost());
    assert!(g.loss_reason().is_some());
    join(fake).await;
}

/// The rule of issue 12 through the tokio API: acks that come too late on
/// a live link. The loss is told at the deadline, the late ack revives
/// nothing, no heartbeat follows, and the connection stays open until the
/// ACQUIRE's send + lease.
#[tokio::test]
async fn late_acks_tell_the_loss_first_and_keep_the_connection_until_the_lease() {
    const LEASE: u64 = 1000;
    let (tx, rx) = mpsc::channel();
    let fake = Fake::start(move |listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &acquired(12));
        read_heartbeat(&mut s);
        std::thread::sleep(Duration::from_millis(LEASE * 6 / 10));
        let _ = std::io::Write::write_all(&mut s, &acquired(12));
        tx.send(expect_silent_close(&mut s)).unwrap();
    });
    let start = Instant::now();
    let g = client(&fake.addr, LEASE).acquire("t-late").await.unwrap();
    let mut watch = g.watch();
    let lost = tokio::time::timeout(Duration::from_secs(5), watch.wait())
        .await
        .unwrap()
        .expect("lost, not released");
    let lost_at = Instant::now();
    assert!(lost.is_timeout(), "{lost}");
    assert!(lost_at >= start + Duration::from_millis(LEASE * 8 / 10));
    // The same words in every client: the timeout and the lease it comes from.
    assert_eq!(
        lost.to_string(),
        format!(
            "monolock: lock lost: no reply from the server within {} ms (0.8 x lease of {LEASE} ms)",
            LEASE * 8 / 10
        )
    );
    assert!(g.is_lost() && watch.is_lost() && g.check().is_err());
    let closed = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("closed");
    assert!(
        closed >= start + Duration::from_millis(LEASE),
        "closed early"
    );
    assert!(lost_at < closed);
    assert!(g.loss_reason().unwrap().is_timeout());
    join(fake).await;
}

/// The polled checks decide the loss at the deadline themselves: here the
/// runtime is blocked, so the keeper task cannot run, and still every
/// check, the guard's and the watch's, reports the loss, and the push
/// signal completes at once when polled.
#[tokio::test]
async fn checks_see_the_deadline_pass_without_the_keeper() {
    let fake = Fake::start(|listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &acquired(5));
        expect_close(&mut s);
    });
    let g = client(&fake.addr, 400).acquire("t-poll").await.unwrap();
    let mut watch = g.watch();
    assert!(!watch.is_lost() && !g.is_lost());
    // Block this (only) runtime thread past the deadline.
    std::thread::sleep(g.valid_until().saturating_duration_since(Instant::now()));
    assert!(watch.is_lost());
    assert!(g.is_lost());
    assert!(g.check().unwrap_err().is_timeout());
    let lost = tokio::time::timeout(Duration::from_millis(1), watch.wait())
        .await
        .expect("told at once")
        .expect("lost");
    assert!(lost.is_timeout());
    g.release().await;
    join(fake).await;
}

#[tokio::test]
async fn release_after_a_loss_closes_at_once() {
    const LEASE: u64 = 3000;
    let (tx, rx) = mpsc::channel();
    let fake = Fake::start(move |listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &acquired(4));
        read_heartbeat(&mut s);
        tx.send(expect_silent_close(&mut s)).unwrap();
    });
    let start = Instant::now();
    let g = client(&fake.addr, LEASE)
        .acquire("t-release-lost")
        .await
        .unwrap();
    assert!(g.lost().await.is_timeout());
    g.release().await;
    let closed = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("closed");
    assert!(
        closed < start + Duration::from_millis(LEASE),
        "waited for the lease"
    );
    join(fake).await;
}

#[tokio::test]
async fn watch_ends_with_none_on_release_and_kill_is_io_loss() {
    let mut server = Server::start();
    let c = client(&server.addr, 1000);
    let g = c.acquire("t-watch").await.unwrap();
    let mut watch = g.watch();
    g.release().await;
    assert!(watch.wait().await.is_none());

    let g = c.acquire("t-watch").await.unwrap();
    server.kill();
    let lost = tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .unwrap();
    let Error::Lost(cause) = &lost else {
        panic!("{lost}")
    };
    assert!(matches!(**cause, Error::Io(_)), "{cause}");
}

#[tokio::test]
async fn temporary_errors_requeue_with_backoff() {
    let fake = Fake::start(|listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &waiting());
        send(&mut s, &error(0x01, ""));
        drop(s);
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &waiting());
        send(&mut s, &acquired(21));
        // Ack heartbeats until the client closes.
        let mut b = [0u8; 1];
        while let Ok(1) = std::io::Read::read(&mut s, &mut b) {
            send(&mut s, &acquired(21));
        }
    });
    let waits = WaitCount::default();
    let c = tokio_builder(&fake.addr, Duration::from_millis(1000))
        .on_waiting(waits.hook())
        .build()
        .unwrap();
    let g = c
        .acquire_timeout("t-requeue", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(g.token(), 21);
    assert_eq!(waits.get(), 2, "waiting again after the re-queue");
    g.release().await;
    join(fake).await;
}

/// The HTTP admin port is no monolock server: the client says so as soon
/// as it answers (see the blocking test for the newline in the name).
#[tokio::test]
async fn the_admin_port_is_not_monolock_and_says_so_at_once() {
    let server = Server::start_with_admin();
    let admin = server.admin.clone().unwrap();
    let lease = Duration::from_secs(10);
    let c = tokio_builder(&admin, lease).build().unwrap();
    let start = Instant::now();
    let err = c.try_acquire("jobs/x\n").await.unwrap_err();
    let took = start.elapsed();
    assert_eq!(
        err.to_string(),
        format!(
            "monolock: {admin} does not speak the monolock protocol \
             (it sent \"HTTP/1.1 400…\"); is this the admin port?"
        )
    );
    let client_timeout = lease.mul_f64(0.8);
    assert!(
        took < client_timeout,
        "not at once: took {took:?}, {:?} past the client timeout",
        took - client_timeout
    );
    let c = Client::builder()
        .servers([admin, server.addr.clone()])
        .lease(lease)
        .build()
        .unwrap();
    let g = c
        .acquire_timeout("jobs/x\n", Duration::from_secs(60))
        .await
        .unwrap();
    g.release().await;
}

/// A timed acquire against a server that is down keeps why its attempts
/// failed: the timeout is not "the lock stayed busy".
#[tokio::test]
async fn a_timeout_keeps_the_last_attempts_cause() {
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let err = client(&addr, 1000)
        .acquire_timeout("x", Duration::from_millis(300))
        .await
        .unwrap_err();
    match &err {
        Error::Timeout {
            last: Some(last), ..
        } => assert!(matches!(**last, Error::Io(_)), "{last:?}"),
        other => panic!("want a timeout with the refused connect: {other:?}"),
    }
    assert!(err.to_string().contains(&addr), "{err}");
    assert!(std::error::Error::source(&err).is_some());
}

/// A passive server of an HA cell (ERROR 0x03) names the active one: the
/// next attempt goes straight there, past the servers between.
#[tokio::test]
async fn a_passive_server_sends_the_claim_to_the_leader_it_names() {
    let server = Server::start();
    let leader = server.addr.clone();
    let passive = Fake::start(move |listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &error(0x03, &leader));
        expect_close(&mut s);
    });
    let skipped = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let c = Client::builder()
        .servers([
            passive.addr.clone(),
            skipped.local_addr().unwrap().to_string(),
            server.addr.clone(),
        ])
        .lease(Duration::from_millis(2000))
        .build()
        .unwrap();
    let g = c
        .acquire_timeout("ha/leader", Duration::from_secs(10))
        .await
        .unwrap();
    join(passive).await;
    skipped.set_nonblocking(true).unwrap();
    let err = skipped.accept().expect_err("the skipped server was asked");
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    g.release().await;
}
