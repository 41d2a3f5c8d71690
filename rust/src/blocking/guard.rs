//! A held lock: the guard the application keeps, and the keeper thread
//! that heartbeats the connection and watches it.
//!
//! Release is shared work: the guard half-closes the connection (its
//! thread is the one that must not return early), and the keeper, which
//! owns the reading, reads on until the server closes its side. The guard
//! waits for the keeper, bounded by the session's release wait.

use std::sync::{Arc, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::signal::Signal;
use crate::core::codec::HEARTBEAT;
use crate::core::held::{Grant, Standing};
use crate::core::session::{wait_for, Session};
use crate::core::step::{hold_step, release_step, ReleaseStep};
use crate::error::Error;

/// State shared by the guard, its watchers and the keeper thread.
type Shared = Signal<State>;

struct State {
    /// Validity and loss, as the keeper last saw them.
    held: Standing,
    /// When the guard started the release (and half-closed).
    released: Option<Instant>,
    /// The keeper is done with the connection: it saw the server's close,
    /// gave up waiting for it, or the session had ended before.
    closed: bool,
}

/// A held lock. Dropping it releases the lock, as [`LockGuard::release`]
/// does: when either returns, the server has freed the lock.
///
/// While the guard lives, a background thread sends heartbeats and reads
/// the server's replies. The lock is safe to use until
/// [`LockGuard::valid_until`]; when that passes without a fresh
/// acknowledgement, or the server ends the session, the lock is lost:
/// [`LockGuard::is_lost`] turns true and [`LockGuard::wait_lost`] returns
/// the reason. A lost lock is never re-acquired behind your back.
///
/// ```no_run
/// let client = monolock::Client::builder().build();
/// let guard = client.acquire("jobs/x")?;
/// let watch = guard.watch();
/// std::thread::spawn(move || {
///     if let Some(reason) = watch.wait() {
///         eprintln!("stop writing: {reason}");
///     }
/// });
/// // Check before each write to the guarded resource.
/// guard.check()?;
/// drop(guard); // released
/// # Ok::<(), monolock::Error>(())
/// ```
pub struct LockGuard {
    grant: Grant,
    shared: Arc<Shared>,
    /// Shared with the keeper, to half-close it from this side.
    conn: Arc<Conn>,
    /// How long a release waits for the server's close.
    release_wait: Duration,
    keeper: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.grant.fmt_guard(f, self.is_lost())
    }
}

impl LockGuard {
    /// Takes over a granted connection and starts its keeper thread.
    pub(crate) fn start(name: &str, conn: Conn, session: Session) -> Result<LockGuard, Error> {
        let (grant, held) = Grant::of(name, &session)?;
        let token = grant.token();
        let release_wait = session.release_wait();
        let conn = Arc::new(conn);
        let shared = Arc::new(Signal::new(State {
            held,
            released: None,
            closed: false,
        }));
        let keeper_shared = Arc::clone(&shared);
        let keeper_conn = Arc::clone(&conn);
        let keeper = std::thread::Builder::new()
            .name(format!("monolock keeper {token}"))
            .spawn(move || keep(&keeper_conn, session, &keeper_shared))?;
        Ok(LockGuard {
            grant,
            shared,
            conn,
            release_wait,
            keeper: Some(keeper),
        })
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.grant.name()
    }

    /// The fencing token of this grant. Tokens grow with every grant on the
    /// server: pass it to the guarded resource so it can refuse writes from
    /// an older holder.
    pub fn token(&self) -> u64 {
        self.grant.token()
    }

    /// Until when the lock is safe to use, on this process's monotonic
    /// clock: the send time of the last acknowledged message plus 0.8 of the
    /// lease. Moves forward with every acknowledged heartbeat.
    pub fn valid_until(&self) -> Instant {
        self.state().held.valid_until
    }

    /// Whether the lock is lost, or its validity has run out (the keeper
    /// reports the loss at that instant).
    pub fn is_lost(&self) -> bool {
        self.state().held.is_lost(Instant::now())
    }

    /// Why the lock was lost ([`Error::Lost`] with the cause), or `None`
    /// while it is held.
    pub fn loss_reason(&self) -> Option<Error> {
        self.state().held.lost.clone()
    }

    /// `Ok(())` while the lock is held and valid, else the loss as
    /// [`Error::Lost`]. Call it before acting on the guarded resource.
    pub fn check(&self) -> Result<(), Error> {
        self.state().held.check(Instant::now())
    }

    /// Blocks until the lock is lost and returns why ([`Error::Lost`]).
    pub fn wait_lost(&self) -> Error {
        let mut state = self.state();
        loop {
            if let Some(lost) = &state.held.lost {
                return lost.clone();
            }
            state = self.shared.wait(state);
        }
    }

    /// Like [`LockGuard::wait_lost`], but gives up after `timeout` and
    /// returns `None` if the lock is still held.
    pub fn wait_lost_timeout(&self, timeout: Duration) -> Option<Error> {
        let until = Instant::now().checked_add(timeout);
        let state = self
            .shared
            .wait_while_until(self.state(), until, |s| s.held.lost.is_none());
        state.held.lost.clone()
    }

    /// A handle another thread can block on until the lock is lost or
    /// released.
    pub fn watch(&self) -> LossWatch {
        LossWatch {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Releases the lock and returns once the server has freed it, so that
    /// another client's [`Client::try_acquire`](crate::Client::try_acquire)
    /// right after this finds the lock free (or the next waiter already
    /// holding it).
    ///
    /// It half-closes the connection (after a TLS close_notify) and waits
    /// for the server to close its side, which the server does only after
    /// freeing the lock and promoting the next waiter. The wait is bounded
    /// by 0.8 of the lease, at most one second; then the connection is
    /// closed regardless (the server frees the lock on its own once it
    /// notices). The same as dropping the guard; safe after a loss.
    pub fn release(self) {
        drop(self);
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let started = Instant::now();
        let until = started + self.release_wait;
        self.state().released = Some(started);
        self.shared.notify_all();
        // The keeper, blocked in a read, reads the server's close. Ignore
        // errors: after a loss the connection is closed already.
        let _ = self.conn.half_close();
        let state = self
            .shared
            .wait_while_until(self.state(), Some(until), |s| !s.closed);
        drop(state);
        // Past the bound the keeper may still sit in a read: end it.
        self.conn.close();
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
    }
}

/// Waits for the end of a held lock from another thread; see
/// [`LockGuard::watch`].
#[derive(Clone)]
pub struct LossWatch {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LossWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LossWatch").finish_non_exhaustive()
    }
}

impl LossWatch {
    /// Blocks until the lock is lost (`Some` with [`Error::Lost`]) or
    /// released by its guard (`None`).
    pub fn wait(&self) -> Option<Error> {
        let mut state = self.shared.lock();
        loop {
            if let Some(lost) = &state.held.lost {
                return Some(lost.clone());
            }
            if state.released.is_some() {
                return None;
            }
            state = self.shared.wait(state);
        }
    }

    /// Whether the lock was lost (its validity ran out or the keeper saw it).
    pub fn is_lost(&self) -> bool {
        let state = self.shared.lock();
        // After a release only a reported loss counts: validity no longer
        // moves, and its running out is not a loss.
        match state.released {
            None => state.held.is_lost(Instant::now()),
            Some(_) => state.held.lost.is_some(),
        }
    }
}

/// How the keeper's watch over a held session ended.
enum End {
    /// The guard released the lock at this instant.
    Released(Instant),
    /// The lock was lost, for this cause.
    Lost(Error),
}

/// The keeper thread: heartbeats and reads until the session ends. On a
/// release it reads on until the server closes; on a loss it records why.
/// Either way it closes the connection and says so.
fn keep(conn: &Conn, mut session: Session, shared: &Shared) {
    let lost = match run_session(conn, &mut session, shared) {
        End::Released(at) => {
            await_server_close(conn, &mut session, at);
            None
        }
        End::Lost(cause) => Some(Error::Lost(Box::new(cause))),
    };
    // Close first, then tell: once the application hears "lost", the
    // connection is gone.
    conn.close();
    let mut state = shared.lock();
    state.closed = true;
    // A release that raced the loss wins: the guard is gone anyway.
    if state.released.is_none() {
        state.held.lost = lost;
    }
    drop(state);
    shared.notify_all();
}

/// Follows a granted session until it is released or fails.
fn run_session(conn: &Conn, session: &mut Session, shared: &Shared) -> End {
    let mut buf = [0u8; 512];
    // An error after the guard's half-close (a heartbeat refused, the
    // server's close) is part of the release, not a loss.
    let end = |cause: Error| match shared.lock().released {
        Some(at) => End::Released(at),
        None => End::Lost(cause),
    };
    loop {
        let now = Instant::now();
        if let Some(at) = shared.lock().released {
            return End::Released(at);
        }
        let step = match hold_step(session, now) {
            Ok(step) => step,
            Err(cause) => return end(cause),
        };
        shared.lock().held.valid_until = step.valid_until;
        if step.heartbeat {
            if let Err(e) = conn.send(&HEARTBEAT) {
                return end(Error::io(e));
            }
        }
        match conn.read_within(&mut buf, wait_for(step.wake, now)) {
            Ok(Some(n)) => session.feed(&buf[..n]),
            Ok(None) => {}
            Err(e) => return end(Error::io(e)),
        }
    }
}

/// Reads, ignoring late acks, until the server closes its side (which
/// means it freed the lock) or the release wait from `at` runs out. The
/// guard already half-closed; it also cuts this short at the bound.
fn await_server_close(conn: &Conn, session: &mut Session, at: Instant) {
    session.begin_release(at);
    let mut buf = [0u8; 512];
    loop {
        let now = Instant::now();
        let until = match release_step(session, now) {
            ReleaseStep::Done => return,
            ReleaseStep::ReadUntil(until) => until,
        };
        match conn.read_within(&mut buf, wait_for(until, now)) {
            Ok(Some(n)) => session.feed(&buf[..n]),
            Ok(None) => {}
            // The server's close (or the guard's, at the bound).
            Err(_) => return,
        }
    }
}
