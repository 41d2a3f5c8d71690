//! A session on tokio (protocol version 4): many claims on one
//! connection, one lease, one heartbeat.
//!
//! The handles and one driver task share the core ([`Mux`]) in a watch
//! channel's sender, as a lock guard shares its session: every decision
//! is the core's, and a change wakes the waiters. The driver task owns the
//! connection: it writes what the core queued (a handle that queues
//! something wakes it), reads, feeds the core and closes when the core
//! says so. It never runs application code.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::tokio::sync::{watch, Notify};
use ::tokio::task::JoinHandle;
use ::tokio::time::{sleep_until, timeout, timeout_at};

use super::conn::Conn;
use super::{LockGuard, Observer, Term, Watch};
use crate::addr::ServerAddr;
use crate::blocking::campaign_claim;
use crate::claim::Claim;
use crate::config::Config;
use crate::core::mux::{Input, Mux, StreamState};
use crate::core::retry::Mode;
use crate::core::session::{Close, HoldState};
use crate::core::step::read_failed;
use crate::core::watch::Core as WatchCore;
use crate::core::watch_codec::encode_watch;
use crate::error::Error;
use crate::watch::WatchState;

/// A session: one connection to the server that carries many claims
/// (protocol version 4). Open it with
/// [`Client::session`](super::Client::session).
///
/// The same as the blocking [`Session`](crate::Session), on tokio: every
/// claim shares the session's lease and heartbeat, and its fate: when the
/// session's deadline passes, its connection ends or the server ends it,
/// every claim held on it is lost at once (told first). Claims return the
/// usual [`LockGuard`]. Nothing is retried inside a session.
///
/// Close it with [`Session::close`]`.await`, which releases every claim
/// and completes once the server has freed them. Dropping it only starts
/// that close (the driver task finishes it in the background).
///
/// ```no_run
/// # async fn demo() -> Result<(), monolock::Error> {
/// use monolock::Claim;
///
/// let client = monolock::tokio::Client::builder().build()?;
/// let session = client.session().await?;
/// let (a, b) = tokio::try_join!(
///     session.acquire("jobs/a", Claim::exclusive()),
///     session.acquire("jobs/b", Claim::exclusive()),
/// )?;
/// println!("tokens {} and {}", a.token(), b.token());
/// a.release().await;
/// session.close().await;
/// # Ok(()) }
/// ```
pub struct Session {
    inner: Arc<Inner>,
    driver: Option<JoinHandle<()>>,
    /// Set by a pool that lets go of a dead session: its drop then leaves
    /// the connection to the driver, which closes it when the core says.
    detached: AtomicBool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mux = self.inner.mux.borrow();
        f.debug_struct("Session")
            .field("server", &self.inner.server)
            .field("max_streams", &mux.max_streams())
            .field("open_streams", &mux.open_streams())
            .field("ended", &mux.ended())
            .finish()
    }
}

/// What the handles and the driver task share.
pub(crate) struct Inner {
    mux: watch::Sender<Mux>,
    /// Wakes the driver: something to write, or the session closed.
    driver: Notify,
    config: Arc<Config>,
    server: String,
}

impl Inner {
    /// Runs `f` on the core; wakes the waiters when it returns `true`.
    fn with<R>(&self, f: impl FnOnce(&mut Mux) -> (R, bool)) -> R {
        let mut out = None;
        self.mux.send_if_modified(|mux| {
            let (r, wake) = f(mux);
            out = Some(r);
            wake
        });
        out.expect("send_if_modified runs its closure")
    }

    /// Polls stream `id`, waking the waiters if this decided the loss.
    fn poll(&self, id: u32) -> StreamState {
        self.with(|mux| mux.poll(id, Instant::now()))
    }
}

impl Session {
    /// Connects to the first server that accepts a session, in the order
    /// of the client's servers, and spawns its driver task.
    pub(crate) async fn open(config: Arc<Config>) -> Result<Session, Error> {
        let mut last = None;
        for server in &config.servers {
            match Session::open_on(&config, server).await {
                Ok(session) => return Ok(session),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| Error::Protocol("no server configured".into())))
    }

    async fn open_on(config: &Arc<Config>, server: &ServerAddr) -> Result<Session, Error> {
        let mut conn = match timeout(config.connect_timeout, Conn::connect(config, server)).await {
            Ok(conn) => conn.map_err(Error::io)?,
            Err(_) => {
                let e = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{server}: connect timed out"),
                );
                return Err(Error::io(e));
            }
        };
        let name = server.to_string();
        let mut mux = Mux::start(&name, config.lease_ms, Instant::now())?;
        conn.send(&mux.take_output()).await.map_err(Error::io)?;
        // This task reads until SESSION_OK; the driver takes over after.
        let mut buf = [0u8; 512];
        while !mux.opened()? {
            let wake = mux.next_wakeup().unwrap_or_else(Instant::now);
            let input = match timeout_at(wake.into(), conn.read(&mut buf)).await {
                Err(_elapsed) => Input::Timer,
                Ok(Ok(n)) => Input::Bytes(&buf[..n]),
                Ok(Err(e)) => Input::End(read_failed(server, e)),
            };
            mux.step(input, Instant::now());
        }
        let inner = Arc::new(Inner {
            mux: watch::Sender::new(mux),
            driver: Notify::new(),
            config: Arc::clone(config),
            server: name,
        });
        let driver = ::tokio::spawn(drive(conn, Arc::clone(&inner)));
        Ok(Session {
            inner,
            driver: Some(driver),
            detached: AtomicBool::new(false),
        })
    }

    /// Claims `name` on this session, waiting in the server's queue as long
    /// as it takes (or until the session ends); see the blocking
    /// [`Session::acquire`](crate::Session::acquire). Cancel-safe: a
    /// dropped acquire sends RELEASE for its claim, which leaves the queue
    /// (or, granted meanwhile, is released).
    pub async fn acquire(&self, name: &str, claim: Claim) -> Result<LockGuard, Error> {
        self.claim(name, claim, Mode::Wait, None).await
    }

    /// Like [`Session::acquire`], giving up with [`Error::Timeout`] after
    /// `timeout`; the claim then leaves the server's queue (RELEASE, and
    /// the same bounded wait for its answer as a busy try-acquire).
    pub async fn acquire_timeout(
        &self,
        name: &str,
        claim: Claim,
        timeout: Duration,
    ) -> Result<LockGuard, Error> {
        let deadline = Instant::now().checked_add(timeout);
        self.claim(name, claim, Mode::Wait, deadline).await
    }

    /// Claims `name` only if it is free right now: [`Error::Busy`] when
    /// the claim would have to wait. It sends RELEASE and returns once the
    /// server answered it (at most 0.8 of the lease, at most a second,
    /// later): by then the claim is out of the queue, and the lock is never
    /// granted to it.
    pub async fn try_acquire(&self, name: &str, claim: Claim) -> Result<LockGuard, Error> {
        self.claim(name, claim, Mode::Try, None).await
    }

    /// Waits until this session's claim leads `name`, with `value`; see
    /// the blocking [`Session::campaign`](crate::Session::campaign).
    pub async fn campaign(&self, name: &str, value: impl Into<Vec<u8>>) -> Result<Term, Error> {
        let claim = campaign_claim(name, value.into())?;
        self.acquire(name, claim).await.map(Term::new)
    }

    /// Starts watching `name` inside the session; see the blocking
    /// [`Session::watch`](crate::Session::watch). Completes once the first
    /// picture is known; dropping the future ends the watch stream.
    pub async fn watch(&self, name: &str) -> Result<Watch, Error> {
        let inner = &self.inner;
        let lease = u64::from(inner.config.lease_ms);
        let frame = encode_watch(name.as_bytes(), lease, 0, 0)?;
        let id = inner.with(|mux| (mux.open_watch(name, &frame, Instant::now()), false))?;
        inner.driver.notify_one();
        let mut pending = Pending {
            inner: Arc::clone(inner),
            id: Some(id),
        };
        loop {
            let mut changes = inner.mux.subscribe();
            let view = inner.with(|mux| (mux.watch_view(id, Instant::now()), false));
            let Some((state, _, ended)) = view else {
                return Err(Error::Cancelled);
            };
            if let Some(err) = ended {
                let_go(inner, id).await;
                pending.id = None;
                return Err(err);
            }
            if state.known {
                pending.id = None;
                let stream = StreamWatch {
                    inner: Arc::clone(inner),
                    id,
                    told: (0, true),
                };
                return Ok(Watch::in_session(name, stream));
            }
            let wake = inner.mux.borrow().deadline();
            ::tokio::select! {
                _ = changes.changed() => {}
                () = sleep_until(wake.into()) => {}
            }
        }
    }

    /// Follows the leadership of `name` inside the session, over
    /// [`Session::watch`]; see the blocking
    /// [`Session::observe`](crate::Session::observe).
    pub async fn observe(&self, name: &str) -> Result<Observer, Error> {
        self.watch(name).await.map(Observer::new)
    }

    /// How many claims the server lets this session have open at once.
    pub fn max_streams(&self) -> u32 {
        self.inner.mux.borrow().max_streams()
    }

    /// How many claims of this session are open now (waiting or held).
    pub fn open_claims(&self) -> usize {
        self.inner.mux.borrow().open_streams()
    }

    /// How many more claims this session may ever open: stream ids are
    /// never reused, so a session that has used them all must make way for
    /// a new one (a [`SessionPool`](super::SessionPool) retires it).
    pub fn ids_left(&self) -> u64 {
        self.inner.mux.borrow().ids_left()
    }

    /// Whether the session can still take claims: the server accepted it
    /// and nothing has ended it.
    pub fn is_open(&self) -> bool {
        self.inner.with(|mux| mux.is_open(Instant::now()))
    }

    /// Closes the session: every claim still held is released (their
    /// guards report it released, not lost), and this completes once the
    /// server has freed them, at most 0.8 of the lease and at most a
    /// second later. Cancelling it leaves the close running in the
    /// background, as a drop does.
    pub async fn close(mut self) {
        self.start_close();
        if let Some(driver) = self.driver.take() {
            // Its outcome is of no interest: a panic has nothing to close.
            let _ = driver.await;
        }
    }

    fn start_close(&self) {
        self.inner.with(|mux| (mux.close(Instant::now()), true));
        self.inner.driver.notify_one();
    }

    async fn claim(
        &self,
        name: &str,
        claim: Claim,
        mode: Mode,
        deadline: Option<Instant>,
    ) -> Result<LockGuard, Error> {
        let inner = &self.inner;
        let frame = inner.config.acquire_frame(name, &claim)?;
        let id = inner.with(|mux| (mux.open(name, claim, &frame, mode, Instant::now()), false))?;
        inner.driver.notify_one();
        // Dropped with this future before the end: RELEASE.
        let mut pending = Pending {
            inner: Arc::clone(inner),
            id: Some(id),
        };
        let mut told_waiting = false;
        loop {
            // Subscribed before looking: a change after the look wakes us.
            let mut changes = inner.mux.subscribe();
            match inner.poll(id) {
                StreamState::Held { token, .. } => {
                    pending.id = None;
                    let claim = StreamClaim {
                        inner: Arc::clone(inner),
                        id,
                    };
                    return Ok(LockGuard::in_session(name, token, claim));
                }
                StreamState::Failed(err) => {
                    // A busy try-acquire returns once it is out of the queue.
                    let_go(inner, id).await;
                    pending.id = None;
                    return Err(err);
                }
                // Granted and lost before this looked: no guard to tell.
                StreamState::Lost(err) => {
                    pending.id = None;
                    inner.with(|mux| (mux.forget(id), false));
                    return Err(err);
                }
                StreamState::Released { .. } => return Err(Error::Cancelled),
                StreamState::Waiting if !told_waiting => {
                    told_waiting = true;
                    inner.config.notify_waiting(name);
                    continue;
                }
                StreamState::Opening | StreamState::Waiting | StreamState::Watching => {}
            }
            let session_deadline = inner.mux.borrow().deadline();
            if deadline.is_some_and(|d| Instant::now() >= d) {
                // Given up: the claim leaves the queue before this returns
                // (cancelled meanwhile, `pending` still sends RELEASE).
                inner.with(|mux| (mux.release(id), false));
                inner.driver.notify_one();
                let_go(inner, id).await;
                pending.id = None;
                return Err(Error::Timeout {
                    name: name.to_owned(),
                    last: None,
                });
            }
            let wake = deadline.map_or(session_deadline, |d| d.min(session_deadline));
            ::tokio::select! {
                _ = changes.changed() => {}
                () = sleep_until(wake.into()) => {}
            }
        }
    }
}

impl Session {
    /// Lets go of a session that is over without closing it: one lost at
    /// its deadline keeps its connection until the lease since its last
    /// answered request (the driver closes it then), as a lost single
    /// claim does until its guard is released.
    pub(crate) fn detach(&self) {
        self.detached.store(true, Ordering::SeqCst);
    }
}

impl Drop for Session {
    /// Starts the close; the driver task finishes it in the background.
    fn drop(&mut self) {
        if self.driver.is_some() && !self.detached.load(Ordering::SeqCst) {
            self.start_close();
        }
    }
}

/// Waits (bounded) until the RELEASE of stream `id` is answered, so that
/// the claim is out of the queue, and drops the stream's record.
async fn let_go(inner: &Inner, id: u32) {
    let until = Instant::now() + inner.mux.borrow().release_wait();
    loop {
        let mut changes = inner.mux.subscribe();
        inner.poll(id);
        if !inner.mux.borrow().unreleased(id) || Instant::now() >= until {
            break;
        }
        ::tokio::select! {
            _ = changes.changed() => {}
            () = sleep_until(until.into()) => {}
        }
    }
    inner.with(|mux| (mux.forget(id), false));
}

/// A claim not yet granted: dropped (an acquire cancelled or timed out),
/// it lets go of its place in the queue.
struct Pending {
    inner: Arc<Inner>,
    id: Option<u32>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.inner.with(|mux| {
                mux.release(id);
                mux.forget(id);
                ((), false)
            });
            self.inner.driver.notify_one();
        }
    }
}

/// The driver task: writes what the core queued, reads until the instant
/// the core names, feeds it, and closes when it says so. A handle that
/// queued something (or closed the session) wakes it.
async fn drive(mut conn: Conn, inner: Arc<Inner>) {
    let mut buf = vec![0u8; 16 << 10];
    let mut half_closed = false;
    loop {
        let (out, bound) = inner.with(|mux| ((mux.take_output(), mux.write_bound()), false));
        let mut input = None;
        if let (false, Some(bound)) = (out.is_empty(), bound) {
            input = match timeout_at(bound.into(), conn.send(&out)).await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(Input::End(Error::io(e))),
                Err(_elapsed) => {
                    let e = std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the server stopped reading",
                    );
                    Some(Input::End(Error::io(e)))
                }
            };
        }
        let (wake, handing_back) = {
            let mux = inner.mux.borrow();
            (mux.next_wakeup(), mux.handing_back())
        };
        let Some(wake) = wake else { break };
        if handing_back && !half_closed {
            half_closed = true;
            // Bounded: a server that stopped reading could stall it.
            if !matches!(timeout_at(wake.into(), conn.half_close()).await, Ok(Ok(()))) {
                break;
            }
        }
        let input = match input {
            Some(input) => input,
            // Conn::read is cancel-safe: a wake-up loses no bytes.
            None => ::tokio::select! {
                biased;
                () = inner.driver.notified() => continue,
                read = timeout_at(wake.into(), conn.read(&mut buf)) => match read {
                    Err(_elapsed) => Input::Timer,
                    Ok(Ok(n)) => Input::Bytes(&buf[..n]),
                    Ok(Err(e)) => Input::End(Error::io(e)),
                },
            },
        };
        // The news is told inside `with`, before any close.
        let turn = inner.with(|mux| {
            let turn = mux.step(input, Instant::now());
            let wake = turn.wake;
            (turn, wake)
        });
        if turn.close == Some(Close::Now) {
            break;
        }
    }
    // Dropping the connection closes it; waiters look once more.
    drop(conn);
    inner.mux.send_modify(|_| {});
}

/// A claim of a session, as its [`LockGuard`] and
/// [`LossWatch`](super::LossWatch) see it.
#[derive(Clone)]
pub(crate) struct StreamClaim {
    inner: Arc<Inner>,
    id: u32,
}

impl StreamClaim {
    /// Where the claim stands now; wakes the waiters if this decided the
    /// loss (at the session's deadline).
    pub(crate) fn poll(&self) -> HoldState {
        let (state, newly) = self.inner.with(|mux| {
            let (state, newly) = mux.poll(self.id, Instant::now());
            ((state, newly), newly)
        });
        state.hold(newly)
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.inner.mux.borrow().deadline()
    }

    /// Completes when the claim is lost (`Some`) or released (`None`),
    /// waking at the deadline to decide a timeout itself.
    pub(crate) async fn wait_end(&self) -> Option<Error> {
        loop {
            let mut changes = self.inner.mux.subscribe();
            let valid_until = match self.poll() {
                HoldState::Held { valid_until } => valid_until,
                HoldState::Lost { loss, .. } => return Some(loss),
                HoldState::Ended => return None,
            };
            ::tokio::select! {
                _ = changes.changed() => {}
                () = sleep_until(valid_until.into()) => {}
            }
        }
    }

    /// Sends ON with the new value and completes when it is answered, or
    /// with the loss.
    pub(crate) async fn proclaim(&self, value: &[u8]) -> Result<(), Error> {
        let n = self
            .inner
            .with(|mux| (mux.proclaim(self.id, value, Instant::now()), false))?;
        self.inner.driver.notify_one();
        loop {
            let mut changes = self.inner.mux.subscribe();
            if self.inner.mux.borrow().proclaimed(self.id) >= n {
                return Ok(());
            }
            let valid_until = match self.poll() {
                HoldState::Held { valid_until } => valid_until,
                state => return state.check(),
            };
            ::tokio::select! {
                _ = changes.changed() => {}
                () = sleep_until(valid_until.into()) => {}
            }
        }
    }

    /// Starts the release: RELEASE is queued and the claim counts as
    /// released from now on. Returns until when to wait for RELEASED.
    pub(crate) fn start_release(&self) -> Instant {
        let until = self.inner.with(|mux| {
            mux.release(self.id);
            (Instant::now() + mux.release_wait(), true)
        });
        self.inner.driver.notify_one();
        until
    }

    /// Releases and completes when the server answers RELEASED (the lock
    /// is free), the session ends, or the release wait passes.
    pub(crate) async fn release(&self) {
        let until = self.start_release();
        loop {
            let mut changes = self.inner.mux.subscribe();
            match self.inner.poll(self.id) {
                StreamState::Released { acked: false } if Instant::now() < until => {}
                // Kept after a loss: its watches still say so.
                StreamState::Lost(_) => return,
                _ => break,
            }
            ::tokio::select! {
                _ = changes.changed() => {}
                () = sleep_until(until.into()) => {}
            }
        }
        self.forget();
    }

    /// Drops the claim's record, unless it was lost (its watches still say
    /// so); a RELEASED still to come is dropped too.
    pub(crate) fn forget(&self) {
        self.inner.with(|mux| {
            if !matches!(mux.poll(self.id, Instant::now()).0, StreamState::Lost(_)) {
                mux.forget(self.id);
            }
            ((), false)
        });
    }
}

/// A watch stream of a session, as its [`Watch`] sees it.
pub(crate) struct StreamWatch {
    inner: Arc<Inner>,
    id: u32,
    /// The change count and the validity last told by `changed`.
    told: (u64, bool),
}

impl StreamWatch {
    pub(crate) fn state(&self) -> WatchState {
        let view = self
            .inner
            .with(|mux| (mux.watch_view(self.id, Instant::now()), false));
        // Only a closed watch has no view, and nobody asks it any more.
        view.map_or_else(
            || WatchCore::new(self.inner.config.lease_ms).state(Instant::now()),
            |(state, _, _)| state,
        )
    }

    /// Why the watch ended (`Cancelled` once closed), if it did.
    pub(crate) fn ended(&self) -> Option<Error> {
        let view = self
            .inner
            .with(|mux| (mux.watch_view(self.id, Instant::now()), false));
        view.map_or(Some(Error::Cancelled), |(_, _, ended)| ended)
    }

    /// Completes at the next change of the picture or of its validity
    /// since the last one told; false once the watch has ended.
    pub(crate) async fn changed(&mut self) -> bool {
        loop {
            let mut changes = self.inner.mux.subscribe();
            let view = self
                .inner
                .with(|mux| (mux.watch_view(self.id, Instant::now()), false));
            let Some((state, generation, ended)) = view else {
                return false;
            };
            if self.told != (generation, state.known) {
                self.told = (generation, state.known);
                return true;
            }
            if ended.is_some() {
                return false;
            }
            // Wake when the picture's validity ends, to tell it.
            let wake = state.valid_until.filter(|_| state.known);
            let far = Instant::now() + Duration::from_secs(3600);
            ::tokio::select! {
                _ = changes.changed() => {}
                () = sleep_until(wake.unwrap_or(far).into()) => {}
            }
        }
    }

    /// Ends the watch stream (RELEASE) without waiting.
    pub(crate) fn close(&self) {
        self.inner.with(|mux| {
            mux.release(self.id);
            mux.forget(self.id);
            ((), true)
        });
        self.inner.driver.notify_one();
    }
}
