//! The blocking client against the real server, and against a scripted fake
//! server for exact bytes and failure cases.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use monolock::{CancelHandle, Client, Error};

fn client(addr: &str, lease_ms: u64) -> Client {
    builder(addr, Duration::from_millis(lease_ms))
        .build()
        .unwrap()
}

#[test]
fn acquire_hold_release_with_increasing_tokens() {
    let server = Server::start();
    let c = client(&server.addr, 2000);
    let before = Instant::now();
    let g1 = c.acquire("basic").unwrap();
    let after = Instant::now();
    assert_eq!(g1.name(), "basic");
    // Valid for 0.8 of the lease from the ACQUIRE send, which happened
    // between `before` and `after`.
    let timeout = Duration::from_millis(1600);
    assert!(g1.valid_until() >= before + timeout);
    assert!(g1.valid_until() <= after + timeout);
    assert!(!g1.is_lost());
    g1.check().unwrap();
    let t1 = g1.token();
    g1.release();
    let g2 = c.acquire_timeout("basic", Duration::from_secs(5)).unwrap();
    assert!(g2.token() > t1, "{} after {t1}", g2.token());
    let g3 = c.try_acquire("basic-other").unwrap();
    assert!(g3.token() > g2.token());
}

#[test]
fn try_acquire_reports_busy_and_sends_no_more() {
    let server = Server::start();
    let c = client(&server.addr, 2000);
    let held = c.acquire("busy").unwrap();
    let err = c.try_acquire("busy").unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "monolock: lock \"busy\" is held by another session"
    );
    assert!(err.is_busy() && err.code().is_none());
    drop(held);
    // The busy attempt left no queue place behind, and the drop returned
    // only once the server had freed the lock: a try gets it.
    c.try_acquire("busy").unwrap();
}

#[test]
fn heartbeats_keep_a_short_lease_alive_and_move_validity() {
    let server = Server::start();
    // Three leases of 1 s: long enough that a loaded 2-core machine does
    // not starve the heartbeats past the 0.8 s client timeout.
    let c = client(&server.addr, 1000);
    let g = c.acquire("heartbeats").unwrap();
    let first = g.valid_until();
    // Without heartbeats the server would drop the session.
    assert!(g.wait_lost_timeout(Duration::from_millis(3000)).is_none());
    let moved = g.valid_until() - first;
    assert!(
        moved > Duration::from_millis(1500),
        "valid_until moved only {moved:?} in 3 leases"
    );
    g.check().unwrap();
    // The server still sees us: a second client is queued, not granted.
    assert!(c.try_acquire("heartbeats").unwrap_err().is_busy());
}

#[test]
fn waiters_are_promoted_in_order_with_waiting_hooks() {
    let server = Server::start();
    let holder = client(&server.addr, 2000).acquire("fifo").unwrap();
    let (tx, rx) = mpsc::channel();
    let mut waiters = Vec::new();
    for i in 0..2 {
        let hook_tx = tx.clone();
        let c = builder(&server.addr, Duration::from_millis(2000))
            .on_waiting(move |name| hook_tx.send(format!("waiting {i} {name}")).unwrap())
            .build()
            .unwrap();
        let done_tx = tx.clone();
        waiters.push(std::thread::spawn(move || {
            let g = c.acquire_timeout("fifo", Duration::from_secs(20)).unwrap();
            done_tx.send(format!("acquired {i}")).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            g.token()
        }));
        // Queue them one after the other.
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            format!("waiting {i} fifo")
        );
    }
    let t0 = holder.token();
    drop(holder);
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        "acquired 0"
    );
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        "acquired 1"
    );
    let tokens: Vec<u64> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
    assert!(t0 < tokens[0] && tokens[0] < tokens[1], "{t0} {tokens:?}");
}

#[test]
fn acquire_timeout_gives_up_and_leaves_the_queue() {
    let server = Server::start();
    let c = client(&server.addr, 1000);
    let holder = c.acquire("timeout").unwrap();
    let start = Instant::now();
    let err = c
        .acquire_timeout("timeout", Duration::from_millis(300))
        .unwrap_err();
    let took = start.elapsed();
    // The lock stayed busy: a timeout without a failed attempt behind it.
    assert!(matches!(err, Error::Timeout { last: None, .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "monolock: timed out waiting for the lock \"timeout\""
    );
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // A later waiter is promoted straight after the holder: the timed-out
    // one is gone from the queue.
    let c2 = c.clone();
    let next = std::thread::spawn(move || c2.acquire_timeout("timeout", Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(100));
    drop(holder);
    next.join().unwrap().unwrap();
}

#[test]
fn cancel_closes_the_waiting_connection() {
    let server = Server::start();
    let c = client(&server.addr, 1000);
    let holder = c.acquire("cancel").unwrap();
    let cancel = CancelHandle::new();
    let waiter_cancel = cancel.clone();
    let c2 = c.clone();
    let waiter = std::thread::spawn(move || c2.acquire_cancellable("cancel", None, &waiter_cancel));
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    cancel.cancel();
    let res = waiter.join().unwrap();
    assert!(matches!(res, Err(Error::Cancelled)), "{res:?}");
    assert!(start.elapsed() < Duration::from_secs(2));
    drop(holder);
    // The cancelled waiter did not take the lock.
    c.acquire_timeout("cancel", Duration::from_secs(5)).unwrap();
}

#[test]
fn server_kill_loses_the_lock_with_an_io_cause() {
    let mut server = Server::start();
    let c = client(&server.addr, 1000);
    let g = c.acquire("kill").unwrap();
    let watch = g.watch();
    server.kill();
    let lost = g.wait_lost_timeout(Duration::from_secs(5)).expect("lost");
    assert!(lost.is_lost());
    let Error::Lost(cause) = &lost else {
        panic!("{lost}")
    };
    assert!(matches!(**cause, Error::Io(_)), "{cause}");
    assert!(g.is_lost());
    assert!(matches!(g.check(), Err(Error::Lost(_))));
    assert!(watch.wait().is_some());
    assert!(g.loss_reason().is_some());
}

#[test]
fn graceful_shutdown_loses_the_lock_with_code_1() {
    let mut server = Server::start();
    let c = client(&server.addr, 2000);
    let g = c.acquire("shutdown").unwrap();
    server.terminate();
    let lost = g.wait_lost_timeout(Duration::from_secs(10)).expect("lost");
    assert_eq!(lost.code(), Some(0x01), "{lost}");
    assert!(lost.is_temporary());
}

#[test]
fn validation_errors_send_nothing() {
    // A listener nobody should connect to.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let cases: [(&str, u8); 3] = [
        ("", 0x14),
        (&"a".repeat(256), 0x15),
        (&"é".repeat(128), 0x15),
    ];
    let c = client(&addr, 1000);
    for (name, code) in cases {
        for res in [c.try_acquire(name), c.acquire(name)] {
            let err = res.unwrap_err();
            assert_eq!(err.code(), Some(code), "{name:?}");
            assert!(!err.is_temporary());
            assert_eq!(err.reason().unwrap().origin(), monolock::Origin::Client);
        }
    }
    // The name's length and the limit, never the name itself.
    let err = c.acquire(&"é".repeat(128)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "monolock: lock name is 256 bytes, the limit is 255 (0x15)"
    );
    // A lease the protocol cannot carry fails the build, not an acquire.
    for lease in [
        Duration::ZERO,
        Duration::from_millis(1 << 32),
        Duration::from_micros(1500),
    ] {
        let err = builder(&addr, lease).build().unwrap_err();
        assert_eq!(err.code(), Some(0x17), "{lease:?}");
        assert!(!err.is_temporary());
        assert_eq!(err.reason().unwrap().origin(), monolock::Origin::Client);
    }
    // Nothing connected.
    assert!(listener.accept().is_err(), "a refused request connected");
}

#[test]
fn exact_bytes_and_promotion_during_an_inflight_heartbeat() {
    let fake = Fake::start(|listener| {
        let mut s = accept(&listener);
        assert_eq!(read_acquire(&mut s), (100, "exact".to_owned()));
        send(&mut s, &waiting());
        // Heartbeats run while waiting.
        read_heartbeat(&mut s);
        // Promote while the heartbeat is in flight, ack it afterwards.
        send(&mut s, &acquired(41));
        std::thread::sleep(Duration::from_millis(10));
        send(&mut s, &acquired(41));
        // Only one heartbeat in flight at any time: the next one comes
        // only after an ack; answer a few of them, split over writes.
        // Acks split over two writes, until the client closes.
        let mut b = [0u8; 1];
        while let Ok(1) = std::io::Read::read(&mut s, &mut b) {
            assert_eq!(b[0], 0x02, "only heartbeats after ACQUIRE");
            let a = acquired(41);
            send(&mut s, &a[..3]);
            std::thread::sleep(Duration::from_millis(2));
            send(&mut s, &a[3..]);
        }
    });
    let waited = WaitCount::default();
    let c = builder(&fake.addr, Duration::from_millis(100))
        .on_waiting(waited.hook())
        .build()
        .unwrap();
    let g = c.acquire_timeout("exact", Duration::from_secs(10)).unwrap();
    assert_eq!(g.token(), 41);
    assert_eq!(waited.get(), 1);
    // Let the fake run its heartbeat exchanges, then release.
    std::thread::sleep(Duration::from_millis(150));
    assert!(!g.is_lost(), "{:?}", g.loss_reason());
    g.release();
    fake.join();
}

#[test]
fn error_while_holding_is_a_loss_with_that_code() {
    let fake = Fake::start(|listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &acquired(7));
        send(&mut s, &error(0x02, "closed by administrator"));
        expect_close(&mut s);
        // Not re-acquired silently: no second connection.
        listener.set_nonblocking(true).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            listener.accept().is_err(),
            "client reconnected after a loss"
        );
    });
    let g = client(&fake.addr, 1000).acquire("admin").unwrap();
    let lost = g.wait_lost_timeout(Duration::from_secs(5)).unwrap();
    let Error::Lost(cause) = &lost else {
        panic!("{lost}")
    };
    assert!(matches!(**cause, Error::AdminClosed(_)), "{cause}");
    assert_eq!(cause.reason().unwrap().text(), "closed by administrator");
    fake.join();
}

/// The rule of issue 12, through the public API: acks that come too late
/// on a live link. The loss is told at the deadline (0.8 x lease after the
/// ACQUIRE's send); the late ack revives nothing and no heartbeat follows;
/// the connection stays open until the ACQUIRE's send + lease, so a real
/// server could not have promoted anyone before the client knew.
#[test]
fn late_acks_tell_the_loss_first_and_keep_the_connection_until_the_lease() {
    const LEASE: u64 = 1000;
    let (tx, rx) = mpsc::channel();
    let fake = Fake::start(move |listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &acquired(9));
        read_heartbeat(&mut s);
        // Ack it after the client's deadline (0.8 x lease after the
        // ACQUIRE), before the lease is up.
        std::thread::sleep(Duration::from_millis(LEASE * 6 / 10));
        let _ = std::io::Write::write_all(&mut s, &acquired(9));
        tx.send(expect_silent_close(&mut s)).unwrap();
    });
    let start = Instant::now();
    let g = client(&fake.addr, LEASE).acquire("late").unwrap();
    let lost = g.wait_lost_timeout(Duration::from_secs(5)).unwrap();
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
    assert!(g.is_lost() && g.check().is_err());
    let closed = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    // The ACQUIRE went out after `start`: the close can come no earlier
    // than a lease after it, and the loss was told before.
    assert!(
        closed >= start + Duration::from_millis(LEASE),
        "closed early"
    );
    assert!(lost_at < closed);
    // The late ack revived nothing.
    assert!(g.is_lost());
    assert!(g.loss_reason().unwrap().is_timeout());
    fake.join();
}

#[test]
fn release_after_a_loss_closes_at_once() {
    const LEASE: u64 = 3000;
    let (tx, rx) = mpsc::channel();
    let fake = Fake::start(move |listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &acquired(4));
        read_heartbeat(&mut s);
        // Never ack: the client's deadline passes.
        tx.send(expect_silent_close(&mut s)).unwrap();
    });
    let start = Instant::now();
    let g = client(&fake.addr, LEASE).acquire("release-lost").unwrap();
    let watch = g.watch();
    assert!(watch.wait().unwrap().is_timeout());
    g.release();
    let closed = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    // The lease would only run out at start + 3000 ms: no waiting for it,
    // nor for a hand-back.
    assert!(
        closed < start + Duration::from_millis(LEASE),
        "waited for the lease"
    );
    assert!(watch.is_lost());
    fake.join();
}

/// A waiting claim whose heartbeats go unanswered fails at its deadline and
/// re-queues; the promotion that comes afterwards on the old connection is
/// no grant.
#[test]
fn waiting_claim_times_out_and_requeues_and_a_late_promotion_is_no_grant() {
    let fake = Fake::start(|listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &waiting());
        read_heartbeat(&mut s);
        // No ack: the client gives the claim up at its deadline.
        expect_silent_close(&mut s);
        let _ = std::io::Write::write_all(&mut s, &acquired(1));
        // The re-queued claim is granted.
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &acquired(2));
        expect_close(&mut s);
    });
    let waits = WaitCount::default();
    let c = builder(&fake.addr, Duration::from_millis(400))
        .on_waiting(waits.hook())
        .build()
        .unwrap();
    let g = c
        .acquire_timeout("requeue-late", Duration::from_secs(10))
        .unwrap();
    assert_eq!(g.token(), 2);
    assert_eq!(waits.get(), 1);
    g.check().unwrap();
    drop(g);
    fake.join();
}

#[test]
fn temporary_errors_while_waiting_requeue_and_terminal_ones_return() {
    let fake = Fake::start(|listener| {
        // First: queued, then the server goes away with 0x01.
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &waiting());
        send(&mut s, &error(0x01, "server shutting down"));
        drop(s);
        // Second: an unknown temporary code.
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &error(0x09, ""));
        drop(s);
        // Third: granted.
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &acquired(3));
        expect_close(&mut s);
        // Then a terminal error for the next acquire.
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &error(0x18, "not authorized for lock"));
        drop(s);
        // And an unknown terminal code.
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &error(0x7e, "future"));
        drop(s);
    });
    let waits = WaitCount::default();
    let c = builder(&fake.addr, Duration::from_millis(1000))
        .on_waiting(waits.hook())
        .build()
        .unwrap();
    let g = c
        .acquire_timeout("requeue", Duration::from_secs(10))
        .unwrap();
    assert_eq!(g.token(), 3);
    assert_eq!(waits.get(), 1);
    drop(g);
    let err = c
        .acquire_timeout("requeue", Duration::from_secs(10))
        .unwrap_err();
    assert!(matches!(err, Error::NotAuthorized(_)), "{err}");
    let err = c.acquire("requeue").unwrap_err();
    assert!(
        matches!(err, Error::UnknownCode { code: 0x7e, .. }),
        "{err}"
    );
    assert!(!err.is_temporary());
    fake.join();
}

#[test]
fn try_acquire_does_not_retry_a_temporary_error() {
    let fake = Fake::start(|listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &error(0x01, ""));
    });
    let err = client(&fake.addr, 1000)
        .try_acquire("try-temp")
        .unwrap_err();
    assert!(matches!(err, Error::ShuttingDown(_)), "{err}");
    assert!(err.is_temporary());
    fake.join();
}

#[test]
fn unreachable_servers_fail_try_and_time_out_wait() {
    // A port that was free a moment ago: connections are refused.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let c = client(&addr, 1000);
    let err = c.try_acquire("x").unwrap_err();
    assert!(matches!(err, Error::Io(_)), "{err:?}");
    assert!(err.to_string().contains(&addr), "names the server: {err}");
    let start = Instant::now();
    let err = c
        .acquire_timeout("x", Duration::from_millis(400))
        .unwrap_err();
    // The timeout keeps why the attempts failed, as its source too.
    match &err {
        Error::Timeout {
            last: Some(last), ..
        } => assert!(
            matches!(**last, Error::Io(ref e) if e.kind() == std::io::ErrorKind::ConnectionRefused),
            "{last:?}"
        ),
        other => panic!("want a timeout with the refused connect: {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "monolock: timed out waiting for the lock \"x\" (last attempt: connection failed: "
        ) && msg.contains(&addr)
            && msg.matches("monolock").count() == 1,
        "{msg}"
    );
    assert!(std::error::Error::source(&err).is_some());
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(390) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

#[test]
fn second_server_is_tried_when_the_first_is_down() {
    let server = Server::start();
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let c = Client::builder()
        .servers([down, server.addr.clone()])
        .lease(Duration::from_millis(1000))
        .build()
        .unwrap();
    c.try_acquire("failover").unwrap();
    c.acquire_timeout("failover", Duration::from_secs(5))
        .unwrap();
}

/// The HTTP admin port is no monolock server: the client says so as soon
/// as it answers, and does not ask it again. (The admin API answers a
/// request line at its end: a name with a newline makes it answer at once
/// instead of at its 10 s header timeout.)
#[test]
fn the_admin_port_is_not_monolock_and_says_so_at_once() {
    let server = Server::start_with_admin();
    let admin = server.admin.clone().unwrap();
    let lease = Duration::from_secs(10);
    let c = builder(&admin, lease).build().unwrap();
    let start = Instant::now();
    let err = c
        .acquire_timeout("jobs/x\n", Duration::from_secs(60))
        .unwrap_err();
    let took = start.elapsed();
    assert_eq!(
        err.to_string(),
        format!(
            "monolock: {admin} does not speak the monolock protocol \
             (it sent \"HTTP/1.1 400…\"); is this the admin port?"
        )
    );
    assert!(matches!(err, Error::NotMonolock { .. }) && !err.is_temporary());
    // At once: long before the client timeout of the claim (0.8 × lease).
    let client_timeout = lease.mul_f64(0.8);
    assert!(
        took < client_timeout,
        "not at once: took {took:?}, {:?} past the client timeout",
        took - client_timeout
    );
    // Listed before a real server, it is skipped and the lock is granted.
    let c = Client::builder()
        .servers([admin, server.addr.clone()])
        .lease(lease)
        .build()
        .unwrap();
    c.acquire_timeout("jobs/x\n", Duration::from_secs(60))
        .unwrap();
}

/// A passive server of an HA cell (ERROR 0x03) names the active one: the
/// next attempt goes straight there, past the servers between, and no
/// longer than the short pause after the answer.
#[test]
fn a_passive_server_sends_the_claim_to_the_leader_it_names() {
    let server = Server::start();
    let leader = server.addr.to_uppercase();
    let passive = Fake::start(move |listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &error(0x03, &leader));
        expect_close(&mut s);
    });
    // Between the two: never asked.
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
        .unwrap();
    passive.join();
    skipped.set_nonblocking(true).unwrap();
    let err = skipped.accept().expect_err("the skipped server was asked");
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    g.release();
}
