//! Release hands the lock back before it returns: the client half-closes,
//! the server frees the lock (promoting the next waiter) and closes its
//! side, and only then does release return. So another client's
//! try_acquire right after a release finds the lock free, every time.
//! A server that never closes holds a release up for a bounded time only.

mod common;

use std::io::{Read, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;

/// Hand-overs per test: a plain close loses the race within a few.
const ROUNDS: usize = 50;
/// A broken release could take up to its bound each time; stop long before
/// the test harness would notice a hang.
const TEST_BUDGET: Duration = Duration::from_secs(60);
/// Lease of the hand-over tests: the release bound is then its 1 s cap.
const LEASE: Duration = Duration::from_secs(10);

fn blocking_client(addr: &str, lease: Duration) -> monolock::Client {
    builder(addr, lease).build().unwrap()
}

#[cfg(feature = "tokio")]
fn tokio_client(addr: &str, lease: Duration) -> monolock::tokio::Client {
    tokio_builder(addr, lease).build().unwrap()
}

/// `ROUNDS` times: `a` takes the lock and releases it, and `b` must get it
/// with a try right after; then `b` hands it back the same way.
fn blocking_handovers(a: &monolock::Client, b: &monolock::Client, name: &str) {
    let started = Instant::now();
    for round in 0..ROUNDS {
        assert!(started.elapsed() < TEST_BUDGET, "round {round}: too slow");
        let held = a
            .try_acquire(name)
            .unwrap_or_else(|e| panic!("round {round}: a right after b's drop: {e}"));
        held.release();
        let held = b
            .try_acquire(name)
            .unwrap_or_else(|e| panic!("round {round}: b right after a's release: {e}"));
        drop(held); // the same hand-back as release()
    }
}

#[test]
fn blocking_try_acquire_right_after_release_finds_the_lock_free() {
    let server = Server::start();
    let a = blocking_client(&server.addr, LEASE);
    let b = blocking_client(&server.addr, LEASE);
    blocking_handovers(&a, &b, "handover");
}

#[test]
fn blocking_release_promotes_the_waiter_before_it_returns() {
    let server = Server::start();
    let c = blocking_client(&server.addr, LEASE);
    let held = c.acquire("promote").unwrap();
    let (queued_tx, queued) = mpsc::channel();
    let waiter = builder(&server.addr, LEASE)
        .on_waiting(move |_| {
            let _ = queued_tx.send(());
        })
        .build()
        .unwrap();
    let (granted_tx, granted) = mpsc::channel();
    let (done, done_rx) = mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        let g = waiter
            .acquire_timeout("promote", Duration::from_secs(20))
            .unwrap();
        granted_tx.send(()).unwrap();
        let _ = done_rx.recv_timeout(Duration::from_secs(20));
        drop(g);
    });
    queued
        .recv_timeout(Duration::from_secs(20))
        .expect("the waiter queued");
    held.release();
    // The server promoted the waiter before it closed our side: a try
    // from here finds the lock taken, by the waiter.
    let err = c.try_acquire("promote").unwrap_err();
    assert!(err.is_busy(), "{err}");
    granted
        .recv_timeout(Duration::from_secs(20))
        .expect("the waiter got the lock");
    done.send(()).unwrap();
    t.join().unwrap();
}

#[cfg(feature = "tokio")]
async fn tokio_handovers(a: &monolock::tokio::Client, b: &monolock::tokio::Client, name: &str) {
    let started = Instant::now();
    for round in 0..ROUNDS {
        assert!(started.elapsed() < TEST_BUDGET, "round {round}: too slow");
        let held = a
            .try_acquire(name)
            .await
            .unwrap_or_else(|e| panic!("round {round}: a right after b's release: {e}"));
        held.release().await;
        let held = b
            .try_acquire(name)
            .await
            .unwrap_or_else(|e| panic!("round {round}: b right after a's release: {e}"));
        held.release().await;
    }
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn tokio_try_acquire_right_after_release_finds_the_lock_free() {
    let server = Server::start();
    let a = tokio_client(&server.addr, LEASE);
    let b = tokio_client(&server.addr, LEASE);
    tokio_handovers(&a, &b, "t-handover").await;
}

/// Drop cannot wait, but it starts the release at once on the runtime.
#[cfg(feature = "tokio")]
#[tokio::test]
async fn tokio_drop_releases_in_the_background() {
    let server = Server::start();
    let a = tokio_client(&server.addr, LEASE);
    let b = tokio_client(&server.addr, LEASE);
    for _ in 0..5 {
        let held = a.try_acquire("t-drop").await.unwrap();
        drop(held);
        b.acquire_timeout("t-drop", Duration::from_secs(5))
            .await
            .unwrap()
            .release()
            .await;
    }
}

/// A guard dropped while its runtime shuts down closes the connection at
/// once; the server frees the lock when it sees the close.
#[cfg(feature = "tokio")]
#[test]
fn tokio_drop_as_the_runtime_ends_still_frees_the_lock() {
    let server = Server::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c = tokio_client(&server.addr, LEASE);
    let held = rt.block_on(c.try_acquire("t-shutdown")).unwrap();
    drop(held); // the keeper is told, but never runs again
    drop(rt);
    let g = blocking_client(&server.addr, LEASE)
        .acquire_timeout("t-shutdown", Duration::from_secs(5))
        .unwrap();
    g.release();
}

/// The TLS variants run against the real server with a certificate made
/// for this run.
#[cfg(feature = "tls")]
mod tls {
    use super::*;
    use std::sync::Arc;

    pub(super) struct TlsServer {
        pub(super) server: Server,
        pub(super) client_config: Arc<rustls::ClientConfig>,
        _files: TempDir,
    }

    impl TlsServer {
        /// A builder for this server, trusting its certificate.
        pub(super) fn builder<C>(
            &self,
            start: monolock::ClientBuilder<C>,
        ) -> monolock::ClientBuilder<C> {
            start
                .server(&self.server.addr)
                .lease(LEASE)
                .tls(Arc::clone(&self.client_config))
        }
    }

    pub(super) fn start() -> TlsServer {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
            .unwrap();
        let files = TempDir::new();
        let cert_path = files.0.join("cert.pem");
        let key_path = files.0.join("key.pem");
        std::fs::write(&cert_path, cert.cert.pem()).unwrap();
        std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
        let server = Server::start_with(&[
            "--tls-cert".as_ref(),
            cert_path.as_os_str(),
            "--tls-key".as_ref(),
            key_path.as_os_str(),
        ]);
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.cert.der().clone()).unwrap();
        let client_config = Arc::new(
            monolock::tls::config_builder()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        );
        TlsServer {
            server,
            client_config,
            _files: files,
        }
    }

    #[test]
    fn blocking_over_tls_try_acquire_right_after_release_finds_the_lock_free() {
        let s = start();
        let client = || s.builder(monolock::Client::builder()).build().unwrap();
        blocking_handovers(&client(), &client(), "tls-handover");
    }

    #[cfg(feature = "tokio")]
    #[tokio::test]
    async fn tokio_over_tls_try_acquire_right_after_release_finds_the_lock_free() {
        let s = start();
        let client = || {
            s.builder(monolock::tokio::Client::builder())
                .build()
                .unwrap()
        };
        tokio_handovers(&client(), &client(), "t-tls-handover").await;
    }
}

/// What the holder fake saw and did after the client's half-close.
struct HolderFake {
    fake: Fake,
    /// When the fake read the end of the client's stream.
    half_closed: mpsc::Receiver<Instant>,
    /// When the fake was about to close its side.
    closing: mpsc::Receiver<Instant>,
    /// Lets a fake that never closes on its own finish.
    finish: mpsc::Sender<()>,
}

/// A fake server that grants the lock and acks heartbeats. When the client
/// half-closes it still sends one late ack (which the client must ignore),
/// then closes its side after `close_after`, or never (until `finish`).
fn holder_fake(close_after: Option<Duration>) -> HolderFake {
    let (half_tx, half_closed) = mpsc::channel();
    let (closing_tx, closing) = mpsc::channel();
    let (finish, finish_rx) = mpsc::channel::<()>();
    let fake = Fake::start(move |listener| {
        let mut s = accept(&listener);
        read_acquire(&mut s);
        send(&mut s, &acquired(1));
        let mut b = [0u8; 1];
        loop {
            match s.read(&mut b) {
                Ok(0) => break,
                Ok(_) => {
                    assert_eq!(b[0], 0x02, "only heartbeats before the half-close");
                    send(&mut s, &acquired(1));
                }
                Err(e) => panic!("expected a half-close, got {e}"),
            }
        }
        half_tx.send(Instant::now()).unwrap();
        // Our side is still open; the client may have closed by now.
        let _ = s.write_all(&acquired(1));
        match close_after {
            Some(delay) => std::thread::sleep(delay),
            None => {
                let _ = finish_rx.recv_timeout(Duration::from_secs(30));
            }
        }
        closing_tx.send(Instant::now()).unwrap();
        drop(s);
    });
    HolderFake {
        fake,
        half_closed,
        closing,
        finish,
    }
}

/// Checks a release that the fake never answered with a close: it took the
/// bound, not less, and not much more.
fn assert_gave_up_at_the_bound(
    fake: HolderFake,
    began: Instant,
    returned: Instant,
    bound: Duration,
) {
    let half_closed = fake
        .half_closed
        .recv_timeout(Duration::from_secs(5))
        .expect("the fake saw the half-close");
    assert!(half_closed >= began && half_closed <= returned);
    let took = returned - began;
    assert!(
        took >= bound,
        "release returned after {took:?}, before {bound:?}"
    );
    assert!(
        took < bound + Duration::from_secs(3),
        "release took {took:?} for a bound of {bound:?}"
    );
    fake.finish.send(()).unwrap();
    fake.fake.join();
}

/// Checks a release the fake answered with a close after a delay: it
/// waited for that close and returned well before the bound.
fn assert_waited_for_the_close(
    fake: HolderFake,
    began: Instant,
    returned: Instant,
    bound: Duration,
) {
    let closing = fake
        .closing
        .recv_timeout(Duration::from_secs(5))
        .expect("the fake closed");
    assert!(
        closing <= returned,
        "release returned before the server closed"
    );
    let took = returned - began;
    assert!(took < bound, "release took {took:?}: it hit the bound");
    fake.fake.join();
}

/// (lease, release bound): 0.8 of the lease, capped at one second.
const BOUNDS: [(Duration, Duration); 2] = [
    (Duration::from_millis(500), Duration::from_millis(400)),
    (Duration::from_secs(10), Duration::from_secs(1)),
];

#[test]
fn blocking_release_gives_up_on_a_server_that_never_closes() {
    for (lease, bound) in BOUNDS {
        let fake = holder_fake(None);
        let g = blocking_client(&fake.fake.addr, lease)
            .acquire("never-closes")
            .unwrap();
        let began = Instant::now();
        g.release();
        assert_gave_up_at_the_bound(fake, began, Instant::now(), bound);
    }
}

#[test]
fn blocking_release_returns_when_the_server_closes() {
    let fake = holder_fake(Some(Duration::from_millis(100)));
    let g = blocking_client(&fake.fake.addr, LEASE)
        .acquire("closes")
        .unwrap();
    let began = Instant::now();
    g.release();
    assert_waited_for_the_close(fake, began, Instant::now(), Duration::from_secs(1));
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn tokio_release_gives_up_on_a_server_that_never_closes() {
    for (lease, bound) in BOUNDS {
        let fake = holder_fake(None);
        let g = tokio_client(&fake.fake.addr, lease)
            .acquire("t-never-closes")
            .await
            .unwrap();
        let began = Instant::now();
        g.release().await;
        let returned = Instant::now();
        tokio::task::spawn_blocking(move || {
            assert_gave_up_at_the_bound(fake, began, returned, bound)
        })
        .await
        .unwrap();
    }
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn tokio_release_returns_when_the_server_closes() {
    let fake = holder_fake(Some(Duration::from_millis(100)));
    let g = tokio_client(&fake.fake.addr, LEASE)
        .acquire("t-closes")
        .await
        .unwrap();
    let began = Instant::now();
    g.release().await;
    let returned = Instant::now();
    tokio::task::spawn_blocking(move || {
        assert_waited_for_the_close(fake, began, returned, Duration::from_secs(1))
    })
    .await
    .unwrap();
}
