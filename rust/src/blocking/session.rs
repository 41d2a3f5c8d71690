//! A session on `std::net` (protocol version 4): many claims on one
//! connection, one lease, one heartbeat.
//!
//! The handles and one reader thread share the core ([`Mux`]) behind a
//! monitor; every decision is the core's. The reader only reads, feeds
//! the core, wakes the waiters and closes when the core says so: it never
//! runs application code. Writes go through [`Inner::flush`], which takes
//! the core's bytes under a write lock, so frames leave in the order the
//! core queued them, and a write that blocks never holds up a polled check
//! (which needs the core, not the socket).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::monitor::Monitor;
use super::pool::{self, Task};
use super::{campaign_claim, LockGuard, Observer, Term, Watch};
use crate::addr::ServerAddr;
use crate::claim::Claim;
use crate::config::Config;
use crate::core::mux::{Input, Mux, StreamState, Turn};
use crate::core::retry::Mode;
use crate::core::session::{wait_for, Close, HoldState};
use crate::core::step::read_failed;
use crate::core::watch::Core as WatchCore;
use crate::core::watch_codec::encode_watch;
use crate::error::Error;
use crate::watch::WatchState;

/// A session: one connection to the server that carries many claims
/// (protocol version 4). Open it with [`Client::session`](crate::Client::session).
///
/// Every claim of a session shares its lease and its heartbeat, so a
/// thousand locks cost one connection and one heartbeat instead of a
/// thousand. The price is **fate-sharing**: the claims are valid until one
/// deadline (the send time of the last answered heartbeat plus 0.8 of the
/// lease), and when that passes, or the connection ends, or the server
/// ends the session, *every* claim held on it is lost at once (and told
/// first, as for a single lock). Use a session for many short or related
/// locks; take a lock that must survive the others' trouble on its own
/// connection ([`Client::acquire`](crate::Client::acquire)).
///
/// Claims return the usual [`LockGuard`]: a fencing token, the loss,
/// `proclaim`, release on drop. Nothing is retried inside a session: a
/// claim the server refuses, even for a temporary reason, returns the
/// error.
///
/// Closing the session (or dropping it) releases every claim still held:
/// their guards then report the lock as released, not lost.
///
/// ```no_run
/// use monolock::Claim;
///
/// let client = monolock::Client::builder().build()?;
/// let session = client.session()?;
/// let a = session.acquire("jobs/a", Claim::exclusive())?;
/// let b = session.try_acquire("pool/gpu", Claim::semaphore(4))?;
/// println!("tokens {} and {}", a.token(), b.token());
/// drop((a, b)); // released, one RELEASE each
/// session.close();
/// # Ok::<(), monolock::Error>(())
/// ```
pub struct Session {
    inner: Arc<Inner>,
    /// Set by a pool that lets go of a dead session: its drop then leaves
    /// the connection to the reader, which closes it when the core says.
    detached: AtomicBool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mux = self.inner.mux.lock();
        f.debug_struct("Session")
            .field("server", &self.inner.server)
            .field("max_streams", &mux.max_streams())
            .field("open_streams", &mux.open_streams())
            .field("ended", &mux.ended())
            .finish()
    }
}

/// What the handles and the reader thread share.
pub(crate) struct Inner {
    mux: Monitor<Mux>,
    conn: Conn,
    /// Held while writing, so that frames leave in the core's order.
    write: Mutex<()>,
    config: Arc<Config>,
    server: String,
    /// The reader thread, once started.
    reader: Mutex<Option<Task>>,
}

impl Session {
    /// Connects to the first server that accepts a session, in the order
    /// of the client's servers, and starts its reader thread.
    pub(crate) fn open(config: Arc<Config>) -> Result<Session, Error> {
        let mut last = None;
        for server in &config.servers {
            match Session::open_on(&config, server) {
                Ok(session) => return Ok(session),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| Error::Protocol("no server configured".into())))
    }

    fn open_on(config: &Arc<Config>, server: &ServerAddr) -> Result<Session, Error> {
        let conn = Conn::connect(config, server, config.connect_timeout).map_err(Error::io)?;
        let name = server.to_string();
        let mut mux = Mux::start(&name, config.lease_ms, Instant::now())?;
        conn.send(&mux.take_output()).map_err(Error::io)?;
        // This thread reads until SESSION_OK; the reader takes over after.
        let mut buf = [0u8; 512];
        while !mux.opened()? {
            let now = Instant::now();
            let wake = mux.next_wakeup().unwrap_or(now);
            let input = match conn.read_within(&mut buf, wait_for(wake, now)) {
                Ok(Some(n)) => Input::Bytes(&buf[..n]),
                Ok(None) => Input::Timer,
                Err(e) => Input::End(read_failed(server, e)),
            };
            mux.step(input, Instant::now());
        }
        let inner = Arc::new(Inner {
            mux: Monitor::new(mux),
            conn,
            write: Mutex::new(()),
            config: Arc::clone(config),
            server: name,
            reader: Mutex::new(None),
        });
        let reader_inner = Arc::clone(&inner);
        let task = pool::spawn("monolock session", move || read(&reader_inner))?;
        *lock(&inner.reader) = Some(task);
        // Anything queued meanwhile (a heartbeat due) goes now.
        inner.flush();
        Ok(Session {
            inner,
            detached: AtomicBool::new(false),
        })
    }

    /// Claims `name` on this session, waiting in the server's queue as long
    /// as it takes (or until the session ends). `claim` says what kind:
    /// [`Claim::exclusive`], [`Claim::shared`], [`Claim::semaphore`], with
    /// or without a value. Checked before sending as a single claim is.
    /// Claims may be made from many threads at once: they are pipelined on
    /// the one connection.
    pub fn acquire(&self, name: &str, claim: Claim) -> Result<LockGuard, Error> {
        self.claim(name, claim, Mode::Wait, None)
    }

    /// Like [`Session::acquire`], giving up with [`Error::Timeout`] after
    /// `timeout`; the claim then leaves the server's queue (RELEASE, and
    /// the same bounded wait for its answer as a busy try-acquire).
    pub fn acquire_timeout(
        &self,
        name: &str,
        claim: Claim,
        timeout: Duration,
    ) -> Result<LockGuard, Error> {
        let deadline = Instant::now().checked_add(timeout);
        self.claim(name, claim, Mode::Wait, deadline)
    }

    /// Claims `name` only if it is free right now: [`Error::Busy`] (the
    /// error of [`Client::try_acquire`](crate::Client::try_acquire)) when
    /// the claim would have to wait. It sends RELEASE and returns once the
    /// server answered it (at most 0.8 of the lease, at most a second,
    /// later): by then the claim is out of the queue, and the lock is never
    /// granted to it.
    pub fn try_acquire(&self, name: &str, claim: Claim) -> Result<LockGuard, Error> {
        self.claim(name, claim, Mode::Try, None)
    }

    /// Waits until this session's claim leads `name`, with `value` (how
    /// followers reach the leader), as [`Client::campaign`](crate::Client::campaign)
    /// does, but inside the session: the term shares the session's fate.
    /// Nothing is retried. An empty value is refused ([`Error::EmptyValue`]).
    pub fn campaign(&self, name: &str, value: impl Into<Vec<u8>>) -> Result<Term, Error> {
        let claim = campaign_claim(name, value.into())?;
        self.acquire(name, claim).map(Term::new)
    }

    /// Starts watching `name` inside the session (a watch stream): the
    /// same [`Watch`] as [`Client::watch`](crate::Client::watch) gives,
    /// returned once the first picture is known. Its picture is vouched
    /// for on the session's deadline, and it shares the session's fate:
    /// when the session ends, the watch ends (unknown from then on) and
    /// is not resumed; a watch that falls behind is ended alone
    /// ([`Watch::error`] says why). A server that refuses it (the ACL)
    /// ends only its stream.
    pub fn watch(&self, name: &str) -> Result<Watch, Error> {
        let inner = &self.inner;
        let lease = u64::from(inner.config.lease_ms);
        let frame = encode_watch(name.as_bytes(), lease, 0, 0)?;
        let id = inner.mux.lock().open_watch(name, &frame, Instant::now())?;
        inner.flush();
        let mut mux = inner.mux.lock();
        loop {
            let now = Instant::now();
            let Some((state, _, ended)) = mux.watch_view(id, now) else {
                return Err(Error::Cancelled);
            };
            if let Some(err) = ended {
                drop(mux);
                inner.let_go(id);
                return Err(err);
            }
            if state.known {
                drop(mux);
                let stream = StreamWatch {
                    inner: Arc::clone(inner),
                    id,
                    told: Mutex::new((0, true)),
                };
                return Ok(Watch::in_session(name, stream));
            }
            let wake = mux.deadline();
            mux = inner.mux.wait_until(mux, wake);
        }
    }

    /// Follows the leadership of `name` inside the session: an iterator of
    /// every change, as [`Client::observe`](crate::Client::observe), over
    /// [`Session::watch`].
    pub fn observe(&self, name: &str) -> Result<Observer, Error> {
        self.watch(name).map(Observer::new)
    }

    /// How many claims the server lets this session have open at once
    /// (its SESSION_OK). One more is refused with
    /// [`Error::TooManyStreams`] (temporary).
    pub fn max_streams(&self) -> u32 {
        self.inner.mux.lock().max_streams()
    }

    /// How many claims of this session are open now (waiting or held).
    pub fn open_claims(&self) -> usize {
        self.inner.mux.lock().open_streams()
    }

    /// How many more claims this session may ever open: stream ids are
    /// never reused, so a session that has used them all must make way for
    /// a new one (a [`SessionPool`](super::SessionPool) retires it).
    pub fn ids_left(&self) -> u64 {
        self.inner.mux.lock().ids_left()
    }

    /// Whether the session can still take claims: the server accepted it
    /// and nothing has ended it (a loss of the connection, the deadline, a
    /// server's ERROR, [`Session::close`]).
    pub fn is_open(&self) -> bool {
        let (open, newly) = self.inner.mux.lock().is_open(Instant::now());
        if newly {
            self.inner.mux.notify_all();
        }
        open
    }

    /// Closes the session: every claim still held is released (their
    /// guards report it released, not lost), and this returns once the
    /// server has freed them (it closes its side after that), at most 0.8
    /// of the lease and at most a second later. The same as dropping it.
    pub fn close(self) {
        drop(self);
    }

    fn claim(
        &self,
        name: &str,
        claim: Claim,
        mode: Mode,
        deadline: Option<Instant>,
    ) -> Result<LockGuard, Error> {
        let inner = &self.inner;
        let frame = inner.config.acquire_frame(name, &claim)?;
        let id = inner
            .mux
            .lock()
            .open(name, claim, &frame, mode, Instant::now())?;
        inner.flush();
        let mut told_waiting = false;
        let mut mux = inner.mux.lock();
        loop {
            let now = Instant::now();
            let (state, newly) = mux.poll(id, now);
            if newly {
                inner.mux.notify_all();
            }
            match state {
                StreamState::Held { token, .. } => {
                    drop(mux);
                    let claim = StreamClaim {
                        inner: Arc::clone(inner),
                        id,
                    };
                    return Ok(LockGuard::in_session(name, token, claim));
                }
                StreamState::Failed(err) => {
                    // A busy try-acquire returns once it is out of the queue.
                    drop(mux);
                    inner.let_go(id);
                    return Err(err);
                }
                // Granted and lost before this looked: no guard to tell.
                StreamState::Lost(err) => {
                    mux.forget(id);
                    return Err(err);
                }
                // The session was closed meanwhile.
                StreamState::Released { .. } => {
                    mux.forget(id);
                    return Err(Error::Cancelled);
                }
                StreamState::Waiting if !told_waiting => {
                    told_waiting = true;
                    // The application's hook runs on this thread, unlocked.
                    drop(mux);
                    inner.config.notify_waiting(name);
                    mux = inner.mux.lock();
                    continue;
                }
                StreamState::Opening | StreamState::Waiting | StreamState::Watching => {}
            }
            if deadline.is_some_and(|d| now >= d) {
                // Given up: the claim leaves the queue before this returns.
                mux.release(id);
                drop(mux);
                inner.let_go(id);
                return Err(Error::Timeout {
                    name: name.to_owned(),
                    last: None,
                });
            }
            let wake = deadline.map_or(mux.deadline(), |d| d.min(mux.deadline()));
            mux = inner.mux.wait_until(mux, wake);
        }
    }
}

impl Session {
    /// Lets go of a session that is over without closing it: one lost at
    /// its deadline keeps its connection until the lease since its last
    /// answered request (the reader closes it then), as a lost single
    /// claim does until its guard is released.
    pub(crate) fn detach(&self) {
        self.detached.store(true, Ordering::SeqCst);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.detached.load(Ordering::SeqCst) {
            self.inner.close();
        }
    }
}

impl Inner {
    /// Writes what the core queued, in order. A failed write ends the
    /// session: the loss is told, then the connection closes.
    fn flush(&self) {
        let failed = {
            let _writing = lock(&self.write);
            let out = self.mux.lock().take_output();
            if out.is_empty() {
                return;
            }
            match self.conn.send(&out) {
                Ok(()) => return,
                Err(e) => e,
            }
        };
        let turn = self
            .mux
            .lock()
            .step(Input::End(Error::io(failed)), Instant::now());
        self.act_close(&turn);
    }

    /// Writes a RELEASE queued for stream `id`, waits (bounded) until the
    /// server answered it, so that the claim is out of the queue, and
    /// drops the stream's record.
    fn let_go(&self, id: u32) {
        self.flush();
        let mut mux = self.mux.lock();
        let until = Instant::now() + mux.release_wait();
        while mux.unreleased(id) && Instant::now() < until {
            mux = self.mux.wait_until(mux, until);
            mux.poll(id, Instant::now());
        }
        mux.forget(id);
    }

    /// Does what a turn says: wake the waiters (the news first), write,
    /// close.
    fn act(&self, turn: &Turn) {
        if turn.wake {
            self.mux.notify_all();
        }
        self.flush();
        self.act_close(turn);
    }

    fn act_close(&self, turn: &Turn) {
        if turn.wake {
            self.mux.notify_all();
        }
        match turn.close {
            Some(Close::Now) => self.conn.close(),
            // The reader reads the server's close, or the bound passes.
            Some(Close::HandBack { .. }) if self.conn.half_close().is_err() => self.conn.close(),
            Some(Close::HandBack { .. }) => {}
            None => {}
        }
    }

    /// Closes the session and waits for the hand-back (see [`Session::close`]).
    fn close(&self) {
        let turn = self.mux.lock().close(Instant::now());
        // A close queues nothing to write: no wait for a writer stuck on a
        // server that stopped reading (the close unblocks it).
        self.act_close(&turn);
        let reader = lock(&self.reader).take();
        if let Some(reader) = reader {
            let until = match turn.close {
                Some(Close::HandBack { until }) => until,
                _ => Instant::now(),
            };
            if !reader.join_until(until) {
                self.conn.close();
                reader.join();
            }
        }
        self.conn.close();
    }
}

/// The reader thread: reads until the instant the core names, feeds it
/// what came, and does what each turn says. It ends when the core is done
/// with the connection.
fn read(inner: &Inner) {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let now = Instant::now();
        let Some(wake) = inner.mux.lock().next_wakeup() else {
            break;
        };
        let input = match inner.conn.read_within(&mut buf, wait_for(wake, now)) {
            Ok(Some(n)) => Input::Bytes(&buf[..n]),
            Ok(None) => Input::Timer,
            Err(e) => Input::End(Error::io(e)),
        };
        let turn = inner.mux.lock().step(input, Instant::now());
        inner.act(&turn);
    }
    inner.conn.close();
    inner.mux.notify_all();
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A claim of a session, as its [`LockGuard`] and [`LossWatch`](super::LossWatch)
/// see it.
#[derive(Clone)]
pub(crate) struct StreamClaim {
    inner: Arc<Inner>,
    id: u32,
}

impl StreamClaim {
    /// Where the claim stands now; wakes the waiters if this decided the
    /// loss (at the session's deadline).
    pub(crate) fn poll(&self) -> HoldState {
        let (state, newly) = self.inner.mux.lock().poll(self.id, Instant::now());
        if newly {
            self.inner.mux.notify_all();
        }
        state.hold(newly)
    }

    pub(crate) fn valid_until(&self) -> Instant {
        self.inner.mux.lock().deadline()
    }

    /// Blocks until the claim is lost or released, or until `until`.
    pub(crate) fn wait_end(&self, until: Option<Instant>) -> HoldState {
        let mut mux = self.inner.mux.lock();
        loop {
            let now = Instant::now();
            let (state, newly) = mux.poll(self.id, now);
            if newly {
                self.inner.mux.notify_all();
            }
            let state = state.hold(newly);
            let HoldState::Held { valid_until } = state else {
                return state;
            };
            if until.is_some_and(|until| now >= until) {
                return state;
            }
            let wake = until.map_or(valid_until, |until| until.min(valid_until));
            mux = self.inner.mux.wait_until(mux, wake);
        }
    }

    /// Sends ON with the new value and waits for its answer, or the loss.
    pub(crate) fn proclaim(&self, value: &[u8]) -> Result<(), Error> {
        let n = self
            .inner
            .mux
            .lock()
            .proclaim(self.id, value, Instant::now())?;
        self.inner.flush();
        let mut mux = self.inner.mux.lock();
        while mux.proclaimed(self.id) < n {
            let (state, newly) = mux.poll(self.id, Instant::now());
            if newly {
                self.inner.mux.notify_all();
            }
            match state.hold(newly) {
                HoldState::Held { valid_until } => {
                    mux = self.inner.mux.wait_until(mux, valid_until);
                }
                state => return state.check(),
            }
        }
        Ok(())
    }

    /// Sends RELEASE and waits until the server answers RELEASED (the lock
    /// is free), the session ends, or the release wait passes.
    pub(crate) fn release(&self) {
        let inner = &self.inner;
        let until = {
            let mut mux = inner.mux.lock();
            mux.release(self.id);
            Instant::now() + mux.release_wait()
        };
        inner.mux.notify_all();
        inner.flush();
        let mut mux = inner.mux.lock();
        loop {
            match mux.poll(self.id, Instant::now()).0 {
                StreamState::Released { acked: false } if Instant::now() < until => {
                    mux = inner.mux.wait_until(mux, until);
                }
                // Kept after a loss: its watches still say so.
                StreamState::Lost(_) => return,
                _ => break,
            }
        }
        mux.forget(self.id);
    }
}

/// A watch stream of a session, as its [`Watch`] sees it.
pub(crate) struct StreamWatch {
    inner: Arc<Inner>,
    id: u32,
    /// The change count and the validity last told by a wait.
    told: Mutex<(u64, bool)>,
}

impl StreamWatch {
    pub(crate) fn state(&self) -> WatchState {
        let view = self.inner.mux.lock().watch_view(self.id, Instant::now());
        // Only a closed watch has no view, and nobody asks it any more.
        view.map_or_else(
            || WatchCore::new(self.inner.config.lease_ms).state(Instant::now()),
            |(state, _, _)| state,
        )
    }

    /// Why the watch ended (`Cancelled` once closed), if it did.
    pub(crate) fn ended(&self) -> Option<Error> {
        let view = self.inner.mux.lock().watch_view(self.id, Instant::now());
        view.map_or(Some(Error::Cancelled), |(_, _, ended)| ended)
    }

    /// Waits for a change of the picture or of its validity since the last
    /// wait, until `deadline`; false when nothing changed or it ended.
    pub(crate) fn wait_change(&self, deadline: Instant) -> bool {
        let mut mux = self.inner.mux.lock();
        loop {
            let now = Instant::now();
            let Some((state, generation, ended)) = mux.watch_view(self.id, now) else {
                return false;
            };
            let mut told = lock(&self.told);
            if *told != (generation, state.known) {
                *told = (generation, state.known);
                return true;
            }
            drop(told);
            if ended.is_some() || now >= deadline {
                return false;
            }
            // Wake when the picture's validity ends, to tell it.
            let wake = match state.valid_until.filter(|_| state.known) {
                Some(until) => until.min(deadline),
                None => deadline,
            };
            mux = self.inner.mux.wait_until(mux, wake);
        }
    }

    /// Ends the watch stream (RELEASE) without waiting.
    pub(crate) fn close(&self) {
        {
            let mut mux = self.inner.mux.lock();
            mux.release(self.id);
            mux.forget(self.id);
        }
        self.inner.mux.notify_all();
        self.inner.flush();
    }
}
