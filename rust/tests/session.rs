//! Sessions (protocol version 4) on the blocking client, against the real
//! server: many claims on one connection, released, kicked, lost together.

mod common;

use std::collections::HashSet;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use monolock::{Claim, Error};

const LEASE: Duration = Duration::from_secs(2);

fn client(addr: &str, lease: Duration) -> monolock::Client {
    builder(addr, lease).build().unwrap()
}

#[test]
fn fifty_pipelined_acquires_on_one_session_are_all_granted_with_distinct_tokens() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let session = c.session().unwrap();
    assert!(session.max_streams() >= 50, "{}", session.max_streams());
    let guards: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..50)
            .map(|i| {
                let session = &session;
                s.spawn(move || session.acquire(&format!("pipe/{i}"), Claim::exclusive()))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    let tokens: HashSet<u64> = guards.iter().map(|g| g.token()).collect();
    assert_eq!(tokens.len(), 50);
    assert_eq!(session.open_claims(), 50);
    for g in &guards {
        g.check().unwrap();
    }
    // Two heartbeats later, all still held: one heartbeat keeps them all.
    std::thread::sleep(LEASE / 2);
    for g in &guards {
        g.check().unwrap();
    }
    drop(guards);
    assert_eq!(session.open_claims(), 0);
    session.close();
}

#[test]
fn the_same_name_twice_in_one_session_waits_for_the_first() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let session = c.session().unwrap();
    let first = session.acquire("twice", Claim::exclusive()).unwrap();
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        let session = &session;
        s.spawn(move || {
            tx.send(session.acquire("twice", Claim::exclusive()))
                .unwrap()
        });
        // Queued behind the first, even a heartbeat later.
        assert!(rx.recv_timeout(LEASE / 2).is_err(), "granted while held");
        let first_token = first.token();
        first.release();
        let second = rx.recv_timeout(LEASE * 2).expect("granted").unwrap();
        assert!(second.token() > first_token);
        second.check().unwrap();
    });
}

#[test]
fn after_release_returns_another_client_finds_the_lock_free() {
    let server = Server::start();
    let c = client(&server.addr, Duration::from_secs(10));
    let other = client(&server.addr, Duration::from_secs(10));
    let session = c.session().unwrap();
    for round in 0..30 {
        let held = session.acquire("handover", Claim::exclusive()).unwrap();
        held.release();
        let theirs = other
            .try_acquire("handover")
            .unwrap_or_else(|e| panic!("round {round}: right after release: {e}"));
        theirs.release();
    }
}

#[test]
fn try_acquire_on_a_held_lock_is_busy_and_leaves_no_place_in_the_queue() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let other = client(&server.addr, LEASE);
    let held = other.acquire("busy").unwrap();
    let session = c.session().unwrap();
    let err = session.try_acquire("busy", Claim::exclusive()).unwrap_err();
    assert!(err.is_busy(), "{err:?}");
    assert!(
        matches!(err, Error::Busy { ref name, shared: false, limit: None } if name == "busy"),
        "{err:?}"
    );
    held.release();
    // Had the RELEASE not gone, the session's claim would hold it now.
    let third = client(&server.addr, LEASE);
    third.try_acquire("busy").unwrap().release();
    assert!(session.is_open());
    assert_eq!(session.open_claims(), 0);
}

#[test]
fn semaphores_and_shared_claims_in_a_session() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let other = client(&server.addr, LEASE);
    let session = c.session().unwrap();
    let p1 = session.acquire("sem", Claim::semaphore(2)).unwrap();
    let p2 = session.acquire("sem", Claim::semaphore(2)).unwrap();
    assert_ne!(p1.token(), p2.token());
    let err = session.try_acquire("sem", Claim::semaphore(2)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Busy {
                shared: true,
                limit: Some(2),
                ..
            }
        ),
        "{err:?}"
    );
    // A different limit is refused for that stream only.
    let err = session.acquire("sem", Claim::semaphore(3)).unwrap_err();
    assert_eq!(err.code(), Some(0x1a), "{err:?}");
    assert!(session.is_open());
    let r1 = session.acquire("rw", Claim::shared()).unwrap();
    let r2 = session.acquire("rw", Claim::shared()).unwrap();
    assert!(other.try_acquire("rw").unwrap_err().is_busy());
    drop((r1, r2));
    other.try_acquire("rw").unwrap().release();
    drop((p1, p2));
}

#[test]
fn a_value_and_proclaim_in_a_session_reach_the_watchers() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let session = c.session().unwrap();
    let guard = session
        .acquire("leader", Claim::exclusive().with_value("10.0.0.7:80"))
        .unwrap();
    let watch = c.watch("leader").unwrap();
    assert_eq!(watch.state().holders[0].value, b"10.0.0.7:80");
    guard.proclaim("10.0.0.8:80").unwrap();
    let deadline = Instant::now() + LEASE * 2;
    while watch.state().holders.first().map(|h| h.value.clone()) != Some(b"10.0.0.8:80".to_vec()) {
        assert!(Instant::now() < deadline, "the new value never showed");
        watch.wait_change_timeout(LEASE / 4);
    }
    assert_eq!(watch.state().holders[0].token, guard.token());
    // A campaign in the session: the term is the session's claim.
    let term = session.campaign("leader2", "10.0.0.9:80").unwrap();
    let other = client(&server.addr, LEASE);
    assert_eq!(other.leader("leader2").unwrap().value, b"10.0.0.9:80");
    assert!(matches!(
        session.campaign("leader3", ""),
        Err(Error::EmptyValue { .. })
    ));
    term.resign();
    // A claim without a value cannot proclaim; nothing is sent.
    let plain = session.acquire("plain", Claim::exclusive()).unwrap();
    assert!(matches!(plain.proclaim("x"), Err(Error::NoValue { .. })));
    let err = guard.proclaim(vec![b'v'; 1025]).unwrap_err();
    assert_eq!(err.code(), Some(0x1b));
    guard.check().unwrap();
    plain.check().unwrap();
}

#[test]
fn close_while_holding_releases_every_claim_without_a_loss() {
    let server = Server::start();
    let c = client(&server.addr, Duration::from_secs(10));
    let other = client(&server.addr, Duration::from_secs(10));
    let session = c.session().unwrap();
    let guards: Vec<_> = (0..3)
        .map(|i| {
            session
                .acquire(&format!("close/{i}"), Claim::exclusive())
                .unwrap()
        })
        .collect();
    let watch = guards[0].watch();
    session.close();
    for (i, g) in guards.iter().enumerate() {
        assert!(g.loss_reason().is_none(), "released, not lost");
        assert!(g.check().is_err(), "no longer held");
        other.try_acquire(&format!("close/{i}")).unwrap().release();
    }
    assert!(watch.wait().is_none(), "a released claim is no loss");
}

#[test]
fn bad_input_is_refused_before_sending_and_the_session_lives_on() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let session = c.session().unwrap();
    assert_eq!(
        session.acquire("", Claim::exclusive()).unwrap_err().code(),
        Some(0x14)
    );
    let long = "n".repeat(300);
    assert_eq!(
        session
            .acquire(&long, Claim::exclusive())
            .unwrap_err()
            .code(),
        Some(0x15)
    );
    let err = session.acquire("x", Claim::semaphore(0)).unwrap_err();
    assert_eq!(err.code(), Some(0x19));
    let err = session
        .acquire("x", Claim::exclusive().with_value(vec![0u8; 1025]))
        .unwrap_err();
    assert_eq!(err.code(), Some(0x1b));
    assert!(session.is_open());
    session.acquire("x", Claim::exclusive()).unwrap().release();
}

#[test]
fn a_session_to_a_port_that_is_no_server_fails_at_once() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let c = client(&addr, LEASE);
    let started = Instant::now();
    assert!(c.session().is_err());
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn an_acquire_timeout_leaves_the_queue() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let other = client(&server.addr, LEASE);
    let held = other.acquire("timeout").unwrap();
    let session = c.session().unwrap();
    let err = session
        .acquire_timeout("timeout", Claim::exclusive(), Duration::from_millis(300))
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    held.release();
    client(&server.addr, LEASE)
        .try_acquire("timeout")
        .unwrap()
        .release();
}

/// Runs `monolock kick` against the server's admin API.
fn kick_lock(server: &Server, name: &str) {
    let admin = server.admin.as_ref().expect("admin API");
    let out = std::process::Command::new(server_bin())
        .args(["kick", "--admin", admin, "--lock", name])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kick: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_kick_ends_one_claim_and_the_sessions_other_claims_live_on() {
    let server = Server::start_with_admin();
    let c = client(&server.addr, LEASE);
    let session = c.session().unwrap();
    let kicked = session.acquire("kick/a", Claim::exclusive()).unwrap();
    let kept = session.acquire("kick/b", Claim::exclusive()).unwrap();
    kick_lock(&server, "kick/a");
    let loss = kicked
        .wait_lost_timeout(LEASE * 2)
        .expect("told of the kick");
    match &loss {
        Error::Lost(cause) => assert_eq!(cause.code(), Some(0x02), "{loss:?}"),
        other => panic!("{other:?}"),
    }
    // The others outlive a few heartbeats.
    std::thread::sleep(LEASE);
    kept.check().unwrap();
    assert!(session.is_open());
    let again = session.acquire("kick/c", Claim::exclusive()).unwrap();
    again.check().unwrap();
    drop(kicked);
}

#[test]
fn a_silent_link_loses_every_claim_before_the_server_could_regrant() {
    let lease = Duration::from_secs(1);
    let server = Server::start();
    let proxy = Proxy::start(&server.addr);
    let c = client(&proxy.addr, lease);
    let waiter = client(&server.addr, Duration::from_secs(10));
    let session = c.session().unwrap();
    let a = session.acquire("silent/a", Claim::exclusive()).unwrap();
    let b = session.acquire("silent/b", Claim::shared()).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let g = waiter.acquire("silent/a").unwrap();
        tx.send(Instant::now()).unwrap();
        drop(g);
    });
    std::thread::sleep(lease / 2);
    let cut = Instant::now();
    proxy.cut();
    let loss = a.wait_lost();
    let told = Instant::now();
    assert!(
        matches!(loss, Error::Lost(ref c) if matches!(**c, Error::ClientTimeout { .. })),
        "{loss:?}"
    );
    assert!(b.is_lost(), "every claim shares the session's fate");
    // The last answered heartbeat went at most an interval before the cut.
    let bound = lease.mul_f64(0.8) + lease / 4;
    assert!(
        told - cut <= bound + Duration::from_millis(200),
        "told {:?} after the cut",
        told - cut
    );
    let granted = rx
        .recv_timeout(lease * 10)
        .expect("the waiter got the lock");
    assert!(told < granted, "the loss was told after the regrant");
    assert!(!session.is_open());
}

#[test]
fn a_pool_spreads_claims_over_its_sessions() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let pool = c.session_pool(3);
    assert_eq!(pool.sessions(), 0, "opened as claims need them");
    let guards: Vec<_> = (0..9)
        .map(|i| {
            pool.acquire(&format!("pool/{i}"), Claim::exclusive())
                .unwrap()
        })
        .collect();
    assert_eq!(pool.sessions(), 3);
    let tokens: HashSet<u64> = guards.iter().map(|g| g.token()).collect();
    assert_eq!(tokens.len(), 9);
    let other = client(&server.addr, LEASE);
    assert!(other.try_acquire("pool/4").unwrap_err().is_busy());
    drop(guards);
    other.try_acquire("pool/4").unwrap().release();
}

/// Reads exactly `n` bytes from the fake server's connection.
fn read_n(stream: &mut std::net::TcpStream, n: usize) -> Vec<u8> {
    use std::io::Read;
    let mut buf = vec![0u8; n];
    stream.read_exact(&mut buf).unwrap();
    buf
}

/// The OPEN of stream `id` with an exclusive ACQUIRE of `name` (lease 2 s).
fn open_frame(id: u32, name: &str) -> Vec<u8> {
    let mut v = vec![0x06];
    v.extend(id.to_be_bytes());
    v.extend([0x01, 0x01]);
    v.extend(2000u32.to_be_bytes());
    v.extend((name.len() as u16).to_be_bytes());
    v.extend(name.as_bytes());
    v
}

fn stream_acquired(id: u32, token: u64) -> Vec<u8> {
    let mut v = vec![0x17];
    v.extend(id.to_be_bytes());
    v.extend(acquired(token));
    v
}

#[test]
fn a_pool_replaces_a_dead_session_on_the_next_claim() {
    let fake = Fake::start(|listener| {
        let session_ok = [0x16, 0, 0, 0, 10];
        // The first session: one grant, then the server ends it.
        let mut s = accept(&listener);
        assert_eq!(read_n(&mut s, 6), [0x05, 0x04, 0, 0, 0x07, 0xd0]);
        send(&mut s, &session_ok);
        assert_eq!(read_n(&mut s, 14), open_frame(1, "a"));
        send(&mut s, &stream_acquired(1, 1));
        // After a heartbeat, when the guard is surely out.
        read_heartbeat(&mut s);
        send(&mut s, &error(0x01, "stopping"));
        drop(s);
        // Its replacement starts its ids at 1 again.
        let mut s = accept(&listener);
        assert_eq!(read_n(&mut s, 6), [0x05, 0x04, 0, 0, 0x07, 0xd0]);
        send(&mut s, &session_ok);
        assert_eq!(read_n(&mut s, 14), open_frame(1, "b"));
        send(&mut s, &stream_acquired(1, 2));
        // Heartbeats and the RELEASE may come; then the client's close.
        let mut b = [0u8; 64];
        while std::io::Read::read(&mut s, &mut b).is_ok_and(|n| n > 0) {}
    });
    let c = client(&fake.addr, LEASE);
    let pool = c.session_pool(1);
    let a = pool.acquire("a", Claim::exclusive()).unwrap();
    let loss = a
        .wait_lost_timeout(LEASE * 2)
        .expect("the server's end is told");
    assert!(
        matches!(loss, Error::Lost(ref c) if c.code() == Some(0x01)),
        "{loss:?}"
    );
    let b = pool.acquire("b", Claim::exclusive()).unwrap();
    assert_eq!(b.token(), 2);
    assert_eq!(pool.sessions(), 1);
    drop((a, b));
    drop(pool);
    fake.join();
}

/// The fake server's side of a session whose server goes silent after two
/// grants: it reads the client's frames, answers nothing more, and sends
/// the instant the client closed.
fn silent_after_two_grants(listener: std::net::TcpListener, closed: mpsc::Sender<Instant>) {
    let mut s = accept(&listener);
    assert_eq!(read_n(&mut s, 6), [0x05, 0x04, 0, 0, 0x03, 0xe8]);
    send(&mut s, &[0x16, 0, 0, 0, 10]);
    let mut open_a = open_frame(1, "a");
    open_a[7..11].copy_from_slice(&1000u32.to_be_bytes());
    assert_eq!(read_n(&mut s, 14), open_a);
    send(&mut s, &stream_acquired(1, 7));
    let mut open_b = open_frame(2, "b");
    open_b[7..11].copy_from_slice(&1000u32.to_be_bytes());
    assert_eq!(read_n(&mut s, 14), open_b);
    send(&mut s, &stream_acquired(2, 8));
    // One heartbeat, never answered; nothing after it until the close.
    read_heartbeat(&mut s);
    closed.send(expect_silent_close(&mut s)).unwrap();
}

#[test]
fn a_silent_server_loses_every_claim_and_it_is_told_before_the_close() {
    let lease = Duration::from_secs(1);
    let (tx, rx) = mpsc::channel();
    let fake = Fake::start(move |listener| silent_after_two_grants(listener, tx));
    let c = client(&fake.addr, lease);
    let session = c.session().unwrap();
    let started = Instant::now();
    let a = session.acquire("a", Claim::exclusive()).unwrap();
    let b = session.acquire("b", Claim::exclusive()).unwrap();
    let watch_b = b.watch();
    let loss = a.wait_lost();
    let told = Instant::now();
    assert!(
        matches!(loss, Error::Lost(ref c) if matches!(**c, Error::ClientTimeout { lease_ms: 1000 })),
        "{loss:?}"
    );
    assert!(watch_b.wait().is_some(), "b is lost with a");
    assert!(told - started <= lease.mul_f64(0.8) + Duration::from_millis(300));
    // The connection stays open, silent, until the lease since the last
    // answered request: the server cannot hand a lock on before this.
    let closed = rx.recv_timeout(lease * 5).expect("the client closed");
    assert!(told < closed, "closed before the loss was told");
    assert!(
        closed - told >= Duration::from_millis(100),
        "closed {:?} after the loss",
        closed - told
    );
    assert!(!session.is_open());
    // A claim on a session that is over fails at once.
    let err = session.acquire("c", Claim::exclusive()).unwrap_err();
    assert!(matches!(err, Error::ClientTimeout { .. }), "{err:?}");
    drop((a, b));
    fake.join();
}

/// Waits on `watch` until `cond` holds for its state, within `limit`.
fn watch_until(
    watch: &monolock::Watch,
    limit: Duration,
    what: &str,
    cond: impl Fn(&monolock::WatchState) -> bool,
) {
    let deadline = Instant::now() + limit;
    while !cond(&watch.state()) {
        assert!(
            Instant::now() < deadline,
            "never saw {what}: {:?}",
            watch.state()
        );
        watch.wait_change_timeout(Duration::from_millis(100));
    }
}

#[test]
fn a_watch_in_a_session_follows_every_change_and_shares_the_sessions_fate() {
    let lease = Duration::from_secs(1);
    let server = Server::start();
    let proxy = Proxy::start(&server.addr);
    let c = client(&proxy.addr, lease);
    let other = client(&server.addr, Duration::from_secs(10));
    let session = c.session().unwrap();
    let mine = session.acquire("swatch/mine", Claim::exclusive()).unwrap();
    let watch = session.watch("swatch/x").unwrap();
    assert!(watch.state().known && watch.state().holders.is_empty());
    let held = other.acquire("swatch/x").unwrap();
    watch_until(&watch, lease * 2, "the holder", |s| {
        s.holders.first().map(|h| h.token) == Some(held.token())
    });
    // Several heartbeats later the picture is still vouched for: the
    // session's ALIVE vouches for the watch.
    std::thread::sleep(lease * 2);
    let st = watch.state();
    assert!(st.known, "{st:?}");
    assert!(st.valid_until.unwrap() > Instant::now());
    held.release();
    watch_until(&watch, lease * 2, "no holder", |s| {
        s.holders.is_empty() && s.known
    });
    // Cut: unknown within the client timeout, and the watch ends with the
    // session (and with its claim).
    let cut = Instant::now();
    proxy.cut();
    watch_until(&watch, lease * 3, "unknown", |s| !s.known);
    let after = cut.elapsed();
    assert!(
        after <= lease.mul_f64(0.8) + lease / 4 + Duration::from_millis(300),
        "{after:?}"
    );
    assert!(mine.is_lost());
    assert!(watch.is_ended());
    assert!(
        matches!(watch.error(), Some(Error::ClientTimeout { .. })),
        "{:?}",
        watch.error()
    );
    assert!(!watch.wait_change_timeout(Duration::from_millis(10)) || watch.is_ended());
}

#[test]
fn observe_in_a_session_tells_the_leader() {
    let server = Server::start();
    let c = client(&server.addr, LEASE);
    let other = client(&server.addr, LEASE);
    let session = c.session().unwrap();
    let mut observer = session.observe("sobs").unwrap();
    let first = observer.next().unwrap();
    assert_eq!(first.state, monolock::LeaderState::NoLeader);
    let term = other.campaign("sobs", "10.1.1.1:80").unwrap();
    let leading = observer
        .find(|o| o.state == monolock::LeaderState::Leading)
        .unwrap();
    assert_eq!(leading.token, term.token());
    assert_eq!(leading.value, b"10.1.1.1:80");
    observer.watch().state();
    drop(observer);
    // The watch stream is released; the session lives on.
    assert!(session.is_open());
    session
        .acquire("sobs2", Claim::exclusive())
        .unwrap()
        .release();
}

#[test]
fn a_server_without_sessions_is_told_apart_and_not_retried() {
    let fake = Fake::start(|listener| {
        // A version 3 server reads SESSION's type byte as unknown.
        let mut s = accept(&listener);
        assert_eq!(read_n(&mut s, 6)[0], 0x05);
        send(&mut s, &error(0x13, "unknown message type: 0x05"));
        let mut b = [0u8; 16];
        while std::io::Read::read(&mut s, &mut b).is_ok_and(|n| n > 0) {}
    });
    let c = client(&fake.addr, LEASE);
    let err = c.session().unwrap_err();
    assert!(
        matches!(err, Error::SessionsUnsupported { ref addr, .. } if addr == &fake.addr),
        "{err:?}"
    );
    assert_eq!(err.code(), Some(0x13));
    assert!(!err.is_temporary());
    fake.join(); // one connection only: nothing retried
}

#[test]
fn a_pool_lets_go_of_a_lost_session_without_closing_it_before_the_lease() {
    let lease = Duration::from_secs(1);
    let (tx, rx) = mpsc::channel();
    let fake = Fake::start(move |listener| {
        let session_ok = [0x16, 0, 0, 0, 10];
        let lease_bytes = 1000u32.to_be_bytes();
        let mut s = accept(&listener);
        assert_eq!(read_n(&mut s, 6)[2..], lease_bytes);
        send(&mut s, &session_ok);
        let mut open_a = open_frame(1, "a");
        open_a[7..11].copy_from_slice(&lease_bytes);
        assert_eq!(read_n(&mut s, 14), open_a);
        send(&mut s, &stream_acquired(1, 1));
        // Silent from here on; the close is timed on its own thread.
        read_heartbeat(&mut s);
        let closed = std::thread::spawn(move || expect_silent_close(&mut s));
        let mut s2 = accept(&listener);
        assert_eq!(read_n(&mut s2, 6)[2..], lease_bytes);
        send(&mut s2, &session_ok);
        let mut open_b = open_frame(1, "b");
        open_b[7..11].copy_from_slice(&lease_bytes);
        assert_eq!(read_n(&mut s2, 14), open_b);
        send(&mut s2, &stream_acquired(1, 2));
        tx.send(closed.join().unwrap()).unwrap();
        let mut b = [0u8; 64];
        while std::io::Read::read(&mut s2, &mut b).is_ok_and(|n| n > 0) {}
    });
    let c = client(&fake.addr, lease);
    let pool = c.session_pool(1);
    let a = pool.acquire("a", Claim::exclusive()).unwrap();
    a.wait_lost();
    let lost = Instant::now();
    let b = pool.acquire("b", Claim::exclusive()).unwrap();
    assert_eq!(b.token(), 2);
    let closed = rx.recv_timeout(lease * 5).expect("the lost session closed");
    assert!(
        closed >= lost + Duration::from_millis(100),
        "the pool closed the lost session {:?} after the loss, before the lease",
        closed.saturating_duration_since(lost)
    );
    drop((a, b, pool));
    fake.join();
}
