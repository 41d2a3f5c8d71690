//! A held lock: the guard the application keeps, and the keeper thread
//! that heartbeats the connection and watches it.
//!
//! The guard, its watchers and the keeper share the session behind one
//! mutex; every decision is the session's. Polled checks and push waiters
//! decide a timeout themselves at the deadline (the same decision the
//! keeper's timer makes), so the loss is told the instant it happens,
//! whichever thread looks first. The keeper only writes what the session
//! asks for (heartbeats, PROCLAIMs), reads, and closes when the session
//! says so. A PROCLAIM with nothing in flight is written by the thread that
//! proclaims: the keeper sits in a read that nothing can wake.
//!
//! Release is shared work: the guard feeds the release to the session and
//! half-closes (or closes) the connection, and reads on until the server
//! closes its side, bounded by the session's hand-back wait. On plain TCP
//! the guard's thread reads that close itself, next to the keeper, so the
//! release does not wait for the keeper to be scheduled; on TLS the keeper,
//! the stream's only reader, reads it and the guard waits for the keeper.
//!
//! Keepers run on reused threads (`pool.rs`): a thread per held lock, but
//! not a new thread per lock.

use std::io;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::monitor::Monitor;
use super::pool::{self, Task};
use super::session::StreamClaim;
use crate::core::held::{self, Grant};
use crate::core::session::{wait_for, Close, HoldState, Input, Session, Turn};
use crate::error::Error;

/// The session, shared by the guard, its watchers and the keeper thread;
/// the condition variable wakes the push waiters.
type Shared = Monitor<Session>;

/// A held lock. Dropping it releases the lock, as [`LockGuard::release`]
/// does: when either returns, the server has freed the lock (or, after a
/// loss, the connection is closed).
///
/// While the guard lives, a background thread sends heartbeats and reads
/// the server's replies. The lock is safe to use until
/// [`LockGuard::valid_until`]. When that passes without a fresh
/// acknowledgement, or the server ends the session, the lock is lost, and
/// that is told first, from the deadline instant on: [`LockGuard::is_lost`]
/// and [`LockGuard::check`] say so, and [`LockGuard::wait_lost`] and every
/// [`LossWatch`] return. Only then does anything else happen: after a
/// timeout the client stops heartbeating but keeps the connection open
/// until you release the guard (then it closes at once) or a full lease has
/// passed since the last acknowledged send, because the server only frees
/// the lock when it sees the close or the lease runs out. A lost lock is
/// never re-acquired behind your back.
///
/// ```no_run
/// let client = monolock::Client::builder().build()?;
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
    hold: Hold,
}

/// How the lock is held: on a connection of its own, or as a claim of a
/// [`Session`](super::Session).
enum Hold {
    Own(Own),
    Stream(StreamClaim),
}

/// A lock on a connection of its own.
struct Own {
    shared: Arc<Shared>,
    /// Shared with the keeper, to close it from this side.
    conn: Arc<Conn>,
    /// The keeper, on a thread of the keeper pool.
    keeper: Task,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.grant.fmt_guard(f, self.is_lost())
    }
}

impl LockGuard {
    /// Takes over a granted connection and starts its keeper on a keeper
    /// thread, beginning with what is left of the granting turn.
    pub(crate) fn start(
        name: &str,
        conn: Conn,
        session: Session,
        turn: Turn,
    ) -> Result<LockGuard, Error> {
        let grant = Grant::of(name, &session)?;
        let conn = Arc::new(conn);
        let shared = Arc::new(Monitor::new(session));
        let keeper_shared = Arc::clone(&shared);
        let keeper_conn = Arc::clone(&conn);
        let keeper = pool::spawn("monolock keeper", move || {
            keep(&keeper_conn, &keeper_shared, turn);
        })?;
        Ok(LockGuard {
            grant,
            hold: Hold::Own(Own {
                shared,
                conn,
                keeper,
            }),
        })
    }

    /// The guard of a session's claim, granted `token`.
    pub(crate) fn in_session(name: &str, token: u64, claim: StreamClaim) -> LockGuard {
        LockGuard {
            grant: Grant::new(name, token),
            hold: Hold::Stream(claim),
        }
    }

    /// Where the lock stands at this instant (the one decision, see
    /// [`poll`]).
    fn poll(&self) -> HoldState {
        match &self.hold {
            Hold::Own(own) => poll(&own.shared),
            Hold::Stream(claim) => claim.poll(),
        }
    }

    fn wait_end(&self, until: Option<Instant>) -> HoldState {
        match &self.hold {
            Hold::Own(own) => wait_end(&own.shared, until),
            Hold::Stream(claim) => claim.wait_end(until),
        }
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
    /// lease. Moves forward with every acknowledged heartbeat; stays where
    /// it was once the lock is lost. At this instant the lock is lost, even
    /// if no thread of this client has run since.
    pub fn valid_until(&self) -> Instant {
        match &self.hold {
            Hold::Own(own) => own.shared.lock().deadline(),
            Hold::Stream(claim) => claim.valid_until(),
        }
    }

    /// Whether the lock is lost: its validity has run out or the server
    /// ended the session.
    pub fn is_lost(&self) -> bool {
        !matches!(self.poll(), HoldState::Held { .. })
    }

    /// Why the lock was lost ([`Error::Lost`] with the cause), or `None`
    /// while it is held.
    pub fn loss_reason(&self) -> Option<Error> {
        self.poll().loss()
    }

    /// `Ok(())` while the lock is held and valid, else the loss as
    /// [`Error::Lost`]. Call it before acting on the guarded resource.
    pub fn check(&self) -> Result<(), Error> {
        self.poll().check()
    }

    /// Blocks until the lock is lost and returns why ([`Error::Lost`]). It
    /// returns at the validity deadline itself, before the connection is
    /// closed.
    pub fn wait_lost(&self) -> Error {
        // Only a release ends a session without a loss, and that takes
        // the guard: the fallback is never returned.
        self.wait_end(None)
            .loss()
            .unwrap_or_else(|| Error::Lost(Box::new(Error::Cancelled)))
    }

    /// Like [`LockGuard::wait_lost`], but gives up after `timeout` and
    /// returns `None` if the lock is still held.
    pub fn wait_lost_timeout(&self, timeout: Duration) -> Option<Error> {
        // A timeout too far to represent is no timeout.
        let until = Instant::now().checked_add(timeout);
        self.wait_end(until).loss()
    }

    /// Replaces the value this lock was claimed with
    /// ([`Claim::with_value`](crate::Claim::with_value)) and returns once
    /// the server has it: from then on the server's admin listing shows the
    /// new value. The token stays, and so does the lock; the PROCLAIM
    /// (protocol version 3) refreshes the lease as a heartbeat does. It
    /// waits for the request in flight, if any; a newer value from another
    /// thread replaces one not sent yet.
    ///
    /// Errors: [`Error::NoValue`] for a lock claimed without a value and
    /// [`Error::ValueTooLong`] for a value over 1024 bytes, both before
    /// anything is sent; the loss ([`Error::Lost`]) when the lock is lost,
    /// before or while waiting for the server (then the server may or may
    /// not have taken the value).
    ///
    /// ```no_run
    /// use monolock::Claim;
    ///
    /// let client = monolock::Client::builder().build()?;
    /// let claim = Claim::exclusive().with_value("10.0.0.7:8080");
    /// let guard = client.acquire_with("service/leader", claim)?;
    /// guard.proclaim("10.0.0.7:9090")?;
    /// # Ok::<(), monolock::Error>(())
    /// ```
    pub fn proclaim(&self, value: impl AsRef<[u8]>) -> Result<(), Error> {
        match &self.hold {
            Hold::Own(own) => {
                let n = own.hand_in(value.as_ref())?;
                wait_proclaimed(&own.shared, n)
            }
            // A session's claim sends ON, answered as a PROCLAIM is.
            Hold::Stream(claim) => claim.proclaim(value.as_ref()),
        }
    }

    /// A handle another thread can block on until the lock is lost or
    /// released.
    pub fn watch(&self) -> LossWatch {
        let of = match &self.hold {
            Hold::Own(own) => Watched::Own(Arc::clone(&own.shared)),
            Hold::Stream(claim) => Watched::Stream(claim.clone()),
        };
        LossWatch { of }
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
    /// notices). After a loss it closes the connection at once. The same as
    /// dropping the guard.
    ///
    /// A claim of a [`Session`](super::Session) sends RELEASE and returns
    /// when the server answers RELEASED (the lock is free then), when the
    /// session ends, or after the same bound.
    pub fn release(self) {
        drop(self);
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        match &self.hold {
            Hold::Own(own) => own.release(),
            Hold::Stream(claim) => claim.release(),
        }
    }
}

impl Own {
    fn session(&self) -> MutexGuard<'_, Session> {
        self.shared.lock()
    }

    /// Hands the value to the session and writes the PROCLAIM from this
    /// thread if nothing is in flight; otherwise the keeper writes it after
    /// the reply it waits for. Returns the PROCLAIM's number.
    fn hand_in(&self, value: &[u8]) -> Result<u64, Error> {
        let now = Instant::now();
        let (n, turn) = {
            let mut session = self.session();
            let n = held::hand_in(&mut session, value, now)?;
            (n, session.step(Input::Timer, now))
        };
        if let Err(e) = act(&self.conn, &self.shared, &turn) {
            // The connection failed: the lock is lost, told once.
            let turn = self
                .session()
                .step(Input::End(Error::io(e)), Instant::now());
            let _ = act(&self.conn, &self.shared, &turn);
        }
        Ok(n)
    }

    fn release(&self) {
        let turn = self.session().step(Input::Release, Instant::now());
        // Watchers learn of the release (or of a loss decided just now).
        self.shared.notify_all();
        if let Some(Close::HandBack { until }) = turn.close {
            if self.conn.half_close().is_ok() && self.hand_back(until) {
                // The server closed its side: the lock is free. The keeper
                // reads the same close and ends on its own.
                return;
            }
        }
        // After a loss, or past the hand-back's bound: close, which also
        // ends the keeper's read.
        self.conn.close();
        self.keeper.join();
    }
}

impl Own {
    /// Waits, after the half-close, until the server closes its side or
    /// `until` passes. True when nothing is left to do: the server closed
    /// (the keeper closes the connection) or the keeper has ended.
    ///
    /// On plain TCP this thread reads the close itself, next to the keeper
    /// (the server's close ends both reads; a late reply that either read
    /// takes is ignored by the handing-back session), so that the release
    /// returns without waiting for the keeper thread to run. A TLS stream
    /// has one reader, the keeper: this waits for it.
    fn hand_back(&self, until: Instant) -> bool {
        if self.conn.is_tls() {
            // The keeper closes the connection when the hand-back is over.
            return self.keeper.join_until(until);
        }
        let mut buf = [0u8; 64];
        loop {
            let now = Instant::now();
            if self.session().next_wakeup().is_none() {
                // The keeper read the close first, or the bound passed.
                return now < until;
            }
            let input = match self.conn.read_within(&mut buf, wait_for(until, now)) {
                Ok(Some(n)) => Input::Bytes(&buf[..n]),
                Ok(None) => Input::Timer,
                Err(e) => Input::End(Error::io(e)),
            };
            let ended = matches!(input, Input::End(_));
            self.session().step(input, Instant::now());
            if ended {
                return true;
            }
        }
    }
}

/// Waits for the end of a held lock from another thread; see
/// [`LockGuard::watch`].
#[derive(Clone)]
pub struct LossWatch {
    of: Watched,
}

#[derive(Clone)]
enum Watched {
    Own(Arc<Shared>),
    Stream(StreamClaim),
}

impl std::fmt::Debug for LossWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LossWatch").finish_non_exhaustive()
    }
}

impl LossWatch {
    /// Blocks until the lock is lost (`Some` with [`Error::Lost`]) or
    /// released by its guard (`None`). It returns at the validity deadline
    /// itself, before the connection is closed.
    pub fn wait(&self) -> Option<Error> {
        match &self.of {
            Watched::Own(shared) => wait_end(shared, None).loss(),
            Watched::Stream(claim) => claim.wait_end(None).loss(),
        }
    }

    /// Whether the lock was lost: its validity has run out or the server
    /// ended the session (the same decision as [`LockGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        let state = match &self.of {
            Watched::Own(shared) => poll(shared),
            Watched::Stream(claim) => claim.poll(),
        };
        matches!(state, HoldState::Lost { .. })
    }
}

/// Asks the session where the lock stands at this instant, and wakes the
/// push waiters if that decided the loss.
fn poll(shared: &Shared) -> HoldState {
    let state = shared.lock().poll(Instant::now());
    if let HoldState::Lost { newly: true, .. } = state {
        shared.notify_all();
    }
    state
}

/// Blocks until the lock is lost or released, or until `until`. It wakes
/// at the validity deadline to decide a timeout itself, so the push signal
/// never waits for the keeper thread.
fn wait_end(shared: &Shared, until: Option<Instant>) -> HoldState {
    let mut session = shared.lock();
    loop {
        let now = Instant::now();
        let state = session.poll(now);
        let valid_until = match state {
            HoldState::Held { valid_until } => valid_until,
            HoldState::Lost { newly: true, .. } => {
                drop(session);
                shared.notify_all();
                return state;
            }
            _ => return state,
        };
        if until.is_some_and(|until| now >= until) {
            return state;
        }
        let wake = until.map_or(valid_until, |until| until.min(valid_until));
        session = shared.wait_until(session, wake);
    }
}

/// Blocks until the PROCLAIM numbered `n` is acknowledged, or the lock is
/// lost (its loss). It wakes at the validity deadline to decide a timeout
/// itself, so it never waits for the keeper thread.
fn wait_proclaimed(shared: &Shared, n: u64) -> Result<(), Error> {
    let mut session = shared.lock();
    while session.proclaimed() < n {
        let state = session.poll(Instant::now());
        let HoldState::Held { valid_until } = state else {
            drop(session);
            if let HoldState::Lost { newly: true, .. } = state {
                shared.notify_all();
            }
            return state.check();
        };
        session = shared.wait_until(session, valid_until);
    }
    Ok(())
}

/// Does what a turn says, in order: tell (wake the waiters of a loss or
/// of an acknowledged PROCLAIM; polled checks see it already), write,
/// close. Returns how the write went.
fn act(conn: &Conn, shared: &Shared, turn: &Turn) -> io::Result<()> {
    if turn.lost.is_some() || turn.proclaimed.is_some() {
        shared.notify_all();
    }
    let sent = match &turn.send {
        // A held session never asks for its ACQUIRE again.
        Some(request) => conn.send(request.bytes(&[])),
        None => Ok(()),
    };
    if turn.close.is_some() {
        conn.close();
    }
    sent
}

/// The keeper thread: does what each turn of the session says, in order
/// (tell, write, close), and reads until the instant the session names.
/// It starts with the rest of the granting turn and ends when the session
/// is done with the connection.
fn keep(conn: &Conn, shared: &Shared, first: Turn) {
    let mut buf = [0u8; 512];
    let mut turn = first;
    loop {
        let sent = act(conn, shared, &turn);
        let now = Instant::now();
        let Some(wake) = shared.lock().next_wakeup() else {
            break;
        };
        let input = match sent.and_then(|()| conn.read_within(&mut buf, wait_for(wake, now))) {
            Ok(Some(n)) => Input::Bytes(&buf[..n]),
            Ok(None) => Input::Timer,
            Err(e) => Input::End(Error::io(e)),
        };
        turn = shared.lock().step(input, Instant::now());
    }
    // Done: the hand-back is over, or the session closed.
    conn.close();
    shared.notify_all();
}
