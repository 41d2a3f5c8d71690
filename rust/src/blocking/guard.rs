//! A held lock: the guard the application keeps, and the keeper thread
//! that heartbeats the connection and watches it.
//!
//! Release is shared work: the guard half-closes the connection (its
//! thread is the one that must not return early), and the keeper, which
//! owns the reading, reads on until the server closes its side. The guard
//! waits for the keeper, bounded by the session's release wait.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::conn::Conn;
use crate::core::codec::HEARTBEAT;
use crate::core::session::{wait_for, Session};
use crate::core::step::{hold_step, release_step, ReleaseStep};
use crate::error::Error;

/// State shared by the guard, its watchers and the keeper thread.
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    valid_until: Instant,
    /// Set once, by the keeper, when the lock is lost ([`Error::Lost`]).
    lost: Option<Error>,
    /// When the guard started the release (and half-closed).
    released: Option<Instant>,
    /// The keeper is done with the connection: it saw the server's close,
    /// gave up waiting for it, or the session had ended before.
    closed: bool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner)
    }
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
    name: String,
    token: u64,
    shared: Arc<Shared>,
    /// Shared with the keeper, to half-close it from this side.
    conn: Arc<Conn>,
    /// How long a release waits for the server's close.
    release_wait: Duration,
    keeper: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name)
            .field("token", &self.token)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl LockGuard {
    /// Takes over a granted connection and starts its keeper thread.
    pub(crate) fn start(name: &str, conn: Conn, session: Session) -> Result<LockGuard, Error> {
        let (Some(token), Some(valid_until)) = (session.token(), session.valid_until()) else {
            return Err(Error::Protocol(
                "lock guard for a session without grant".into(),
            ));
        };
        let release_wait = session.release_wait();
        let conn = Arc::new(conn);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                valid_until,
                lost: None,
                released: None,
                closed: false,
            }),
            changed: Condvar::new(),
        });
        let keeper_shared = Arc::clone(&shared);
        let keeper_conn = Arc::clone(&conn);
        let keeper = std::thread::Builder::new()
            .name(format!("monolock keeper {token}"))
            .spawn(move || keep(&keeper_conn, session, &keeper_shared))?;
        Ok(LockGuard {
            name: name.to_owned(),
            token,
            shared,
            conn,
            release_wait,
            keeper: Some(keeper),
        })
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of this grant. Tokens grow with every grant on the
    /// server: pass it to the guarded resource so it can refuse writes from
    /// an older holder.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Until when the lock is safe to use, on this process's monotonic
    /// clock: the send time of the last acknowledged message plus 0.8 of the
    /// lease. Moves forward with every acknowledged heartbeat.
    pub fn valid_until(&self) -> Instant {
        self.shared.state().valid_until
    }

    /// Whether the lock is lost, or its validity has run out (the keeper
    /// reports the loss at that instant).
    pub fn is_lost(&self) -> bool {
        let state = self.shared.state();
        state.lost.is_some() || Instant::now() >= state.valid_until
    }

    /// Why the lock was lost ([`Error::Lost`] with the cause), or `None`
    /// while it is held.
    pub fn loss_reason(&self) -> Option<Error> {
        self.shared.state().lost.clone()
    }

    /// `Ok(())` while the lock is held and valid, else the loss as
    /// [`Error::Lost`]. Call it before acting on the guarded resource.
    pub fn check(&self) -> Result<(), Error> {
        let state = self.shared.state();
        if let Some(lost) = &state.lost {
            return Err(lost.clone());
        }
        if Instant::now() >= state.valid_until {
            return Err(Error::Lost(Box::new(Error::Timeout)));
        }
        Ok(())
    }

    /// Blocks until the lock is lost and returns why ([`Error::Lost`]).
    pub fn wait_lost(&self) -> Error {
        let mut state = self.shared.state();
        loop {
            if let Some(lost) = &state.lost {
                return lost.clone();
            }
            state = self.shared.wait(state);
        }
    }

    /// Like [`LockGuard::wait_lost`], but gives up after `timeout` and
    /// returns `None` if the lock is still held.
    pub fn wait_lost_timeout(&self, timeout: Duration) -> Option<Error> {
        let until = Instant::now().checked_add(timeout);
        let mut state = self.shared.state();
        loop {
            if let Some(lost) = &state.lost {
                return Some(lost.clone());
            }
            let left = match until {
                Some(until) => until.saturating_duration_since(Instant::now()),
                None => Duration::MAX,
            };
            if left.is_zero() {
                return None;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
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
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let started = Instant::now();
        let until = started + self.release_wait;
        self.shared.state().released = Some(started);
        self.shared.changed.notify_all();
        // The keeper, blocked in a read, reads the server's close. Ignore
        // errors: after a loss the connection is closed already.
        let _ = self.conn.half_close();
        let mut state = self.shared.state();
        while !state.closed {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
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
        let mut state = self.shared.state();
        loop {
            if let Some(lost) = &state.lost {
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
        let state = self.shared.state();
        state.lost.is_some() || (state.released.is_none() && Instant::now() >= state.valid_until)
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
    let mut state = shared.state();
    state.closed = true;
    // A release that raced the loss wins: the guard is gone anyway.
    if state.released.is_none() {
        state.lost = lost;
    }
    drop(state);
    shared.changed.notify_all();
}

/// Follows a granted session until it is released or fails.
fn run_session(conn: &Conn, session: &mut Session, shared: &Shared) -> End {
    let mut buf = [0u8; 512];
    // An error after the guard's half-close (a heartbeat refused, the
    // server's close) is part of the release, not a loss.
    let end = |cause: Error| match shared.state().released {
        Some(at) => End::Released(at),
        None => End::Lost(cause),
    };
    loop {
        let now = Instant::now();
        if let Some(at) = shared.state().released {
            return End::Released(at);
        }
        let step = match hold_step(session, now) {
            Ok(step) => step,
            Err(cause) => return end(cause),
        };
        shared.state().valid_until = step.valid_until;
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
