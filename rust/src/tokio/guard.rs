//! A held lock on tokio: the guard, and the task that heartbeats the
//! connection, watches it and, on release, hands the lock back.
//!
//! The guard, its watches and the keeper task share the session in a
//! watch channel's sender; every decision is the session's. Polled checks
//! and push waiters decide a timeout themselves at the deadline (the same
//! decision the keeper's timer makes), so the loss is told the instant it
//! happens, whichever looks first. The keeper only writes what the
//! session asks for (heartbeats, PROCLAIMs), reads, and closes when the
//! session says so; a PROCLAIM handed in wakes it.

use std::sync::Arc;
use std::time::Instant;

use ::tokio::sync::{oneshot, watch, Notify};
use ::tokio::task::JoinHandle;
use ::tokio::time::{sleep_until, timeout_at};

use super::conn::Conn;
use super::session::StreamClaim;
use crate::core::held::{self, Grant};
use crate::core::session::{Close, HoldState, Input, Session, Turn};
use crate::error::Error;

/// The session, shared by the guard, its watches and the keeper task; a
/// change of its state (a loss, the end) wakes the waiters.
type Shared = watch::Sender<Session>;

/// A held lock. Release it with [`LockGuard::release`]`.await`, which
/// completes once the server has freed the lock.
///
/// A spawned task sends heartbeats and reads the replies. The lock is safe
/// to use until [`LockGuard::valid_until`]. When no acknowledgement arrives
/// in time, or the server ends the session, the lock is lost, and that is
/// told first, from the deadline instant on: [`LockGuard::is_lost`] and
/// [`LockGuard::check`] say so, and [`LockGuard::lost`] and every
/// [`LossWatch`] complete. Only then does anything else happen: after a
/// timeout the task stops heartbeating but keeps the connection open until
/// you release the guard (then it closes at once) or a full lease has
/// passed since the last acknowledged send, because the server only frees
/// the lock when it sees the close or the lease runs out.
///
/// # Dropping
///
/// `Drop` cannot await, so dropping the guard only *starts* the release:
/// the keeper task, on the runtime it was spawned on, half-closes the
/// connection and waits (bounded) for the server's close in the
/// background. The lock is free a moment after the drop, not at once: a
/// `try_acquire` right after a drop may still find it busy. If that
/// runtime is shutting down, the task is dropped with its connection,
/// which closes it at once; the server frees the lock when it sees the
/// close. Use `release().await` whenever the next step relies on the lock
/// being free.
///
/// ```no_run
/// # async fn demo() -> Result<(), monolock::Error> {
/// let client = monolock::tokio::Client::builder().build()?;
/// let guard = client.acquire("jobs/x").await?;
/// let mut watch = guard.watch();
/// tokio::spawn(async move {
///     if let Some(reason) = watch.wait().await {
///         eprintln!("stop writing: {reason}");
///     }
/// });
/// guard.check()?;
/// guard.release().await;
/// # Ok(()) }
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
    /// Dropping it tells the keeper to let go.
    release: Option<oneshot::Sender<()>>,
    /// Wakes the keeper to send a PROCLAIM handed in.
    handed_in: Arc<Notify>,
    keeper: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.grant.fmt_guard(f, self.is_lost())
    }
}

impl LockGuard {
    /// Takes over a granted connection and spawns its keeper task, which
    /// begins with what is left of the granting turn.
    pub(crate) fn start(
        name: &str,
        conn: Conn,
        session: Session,
        turn: Turn,
    ) -> Result<LockGuard, Error> {
        let grant = Grant::of(name, &session)?;
        let shared = Arc::new(watch::Sender::new(session));
        let (release, released) = oneshot::channel();
        let handed_in = Arc::new(Notify::new());
        let keeper = Keeper {
            shared: Arc::clone(&shared),
            release: released,
            handed_in: Arc::clone(&handed_in),
        };
        let keeper = ::tokio::spawn(keep(conn, keeper, turn));
        Ok(LockGuard {
            grant,
            hold: Hold::Own(Own {
                shared,
                release: Some(release),
                handed_in,
                keeper: Some(keeper),
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

    /// Where the lock stands at this instant (the one decision).
    fn poll(&self) -> HoldState {
        match &self.hold {
            Hold::Own(own) => poll(&own.shared),
            Hold::Stream(claim) => claim.poll(),
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.grant.name()
    }

    /// The fencing token of this grant.
    pub fn token(&self) -> u64 {
        self.grant.token()
    }

    /// Until when the lock is safe to use (monotonic clock): the send time
    /// of the last acknowledged message plus 0.8 of the lease. Moves
    /// forward with every acknowledged heartbeat; stays where it was once
    /// the lock is lost. At this instant the lock is lost, even if the
    /// keeper task has not run since.
    pub fn valid_until(&self) -> Instant {
        match &self.hold {
            Hold::Own(own) => own.shared.borrow().deadline(),
            Hold::Stream(claim) => claim.valid_until(),
        }
    }

    /// Whether the lock is lost: its validity has run out or the server
    /// ended the session.
    pub fn is_lost(&self) -> bool {
        !matches!(self.poll(), HoldState::Held { .. })
    }

    /// Why the lock was lost ([`Error::Lost`]), or `None` while held.
    pub fn loss_reason(&self) -> Option<Error> {
        self.poll().loss()
    }

    /// `Ok(())` while the lock is held and valid, else the loss.
    pub fn check(&self) -> Result<(), Error> {
        self.poll().check()
    }

    /// Completes when the lock is lost, with the reason ([`Error::Lost`]):
    /// at the validity deadline itself, before the connection is closed.
    /// Cancel-safe.
    pub async fn lost(&self) -> Error {
        // Only a release ends a session without a loss, and that takes the
        // guard: the fallback is never returned.
        let end = match &self.hold {
            Hold::Own(own) => wait_end(&own.shared).await,
            Hold::Stream(claim) => claim.wait_end().await,
        };
        end.unwrap_or_else(|| Error::Lost(Box::new(Error::Cancelled)))
    }

    /// Replaces the value this lock was claimed with
    /// ([`Claim::with_value`](crate::Claim::with_value)) and completes once
    /// the server has it: from then on the server's admin listing shows the
    /// new value. The token stays, and so does the lock; the PROCLAIM
    /// (protocol version 3) refreshes the lease as a heartbeat does. It
    /// waits for the request in flight, if any; a newer value from another
    /// task replaces one not sent yet. Cancelling it does not take the
    /// value back: the keeper task sends it all the same.
    ///
    /// Errors: [`Error::NoValue`] for a lock claimed without a value and
    /// [`Error::ValueTooLong`] for a value over 1024 bytes, both before
    /// anything is sent; the loss ([`Error::Lost`]) when the lock is lost,
    /// before or while waiting for the server (then the server may or may
    /// not have taken the value).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), monolock::Error> {
    /// use monolock::Claim;
    ///
    /// let client = monolock::tokio::Client::builder().build()?;
    /// let claim = Claim::exclusive().with_value("10.0.0.7:8080");
    /// let guard = client.acquire_with("service/leader", claim).await?;
    /// guard.proclaim("10.0.0.7:9090").await?;
    /// # Ok(()) }
    /// ```
    pub async fn proclaim(&self, value: impl AsRef<[u8]>) -> Result<(), Error> {
        let own = match &self.hold {
            Hold::Own(own) => own,
            // A session's claim sends ON, answered as a PROCLAIM is.
            Hold::Stream(claim) => return claim.proclaim(value.as_ref()).await,
        };
        let mut handed_in = Ok(0);
        own.shared.send_if_modified(|session| {
            handed_in = held::hand_in(session, value.as_ref(), Instant::now());
            false // nothing to tell the waiters yet
        });
        let n = handed_in?;
        // The keeper sends it: at once, or after the reply it waits for.
        own.handed_in.notify_one();
        wait_proclaimed(&own.shared, n).await
    }

    /// A handle another task can await until the lock is lost or released.
    pub fn watch(&self) -> LossWatch {
        let of = match &self.hold {
            Hold::Own(own) => Watched::Own(Arc::clone(&own.shared)),
            Hold::Stream(claim) => Watched::Stream(claim.clone()),
        };
        LossWatch { of }
    }

    /// Releases the lock and completes once the server has freed it, so
    /// that another client's `try_acquire` right after this finds the lock
    /// free (or the next waiter already holding it).
    ///
    /// The keeper task half-closes the connection (after a TLS
    /// close_notify) and waits for the server to close its side, which the
    /// server does only after freeing the lock and promoting the next
    /// waiter. The wait is bounded by 0.8 of the lease, at most one second;
    /// then the connection is closed regardless. After a loss it closes the
    /// connection at once. Cancelling this future leaves the release
    /// running in the background, as a drop does.
    ///
    /// A claim of a [`Session`](super::Session) sends RELEASE and completes
    /// when the server answers RELEASED (the lock is free then), when the
    /// session ends, or after the same bound.
    pub async fn release(mut self) {
        match &mut self.hold {
            Hold::Own(own) => {
                drop(own.release.take());
                if let Some(keeper) = own.keeper.take() {
                    // Its outcome is of no interest: a panic has nothing to release.
                    let _ = keeper.await;
                }
            }
            Hold::Stream(claim) => claim.release().await,
        }
    }
}

impl Drop for LockGuard {
    /// Starts the release in the background; see the type's docs.
    fn drop(&mut self) {
        match &mut self.hold {
            Hold::Own(own) => {
                drop(own.release.take());
                // The keeper task runs on, detached, until the hand-back is over.
                drop(own.keeper.take());
            }
            // RELEASE goes; its RELEASED is not awaited. After a release()
            // that did, this finds nothing left to do.
            Hold::Stream(claim) => {
                claim.start_release();
                claim.forget();
            }
        }
    }
}

/// Awaits the end of a held lock from another task; see
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
    /// Completes when the lock is lost (`Some` with [`Error::Lost`]) or
    /// released by its guard (`None`): a loss at the validity deadline
    /// itself, before the connection is closed. Cancel-safe.
    pub async fn wait(&mut self) -> Option<Error> {
        match &self.of {
            Watched::Own(shared) => wait_end(shared).await,
            Watched::Stream(claim) => claim.wait_end().await,
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

/// Asks the session where the lock stands at this instant; if that decided
/// the loss, the waiters are woken.
fn poll(shared: &Shared) -> HoldState {
    let mut state = HoldState::Ended;
    shared.send_if_modified(|session| {
        state = session.poll(Instant::now());
        matches!(state, HoldState::Lost { newly: true, .. })
    });
    state
}

/// Completes when the lock is lost (`Some`) or released (`None`). It wakes
/// at the validity deadline to decide a timeout itself, so the push signal
/// never waits for the keeper task.
async fn wait_end(shared: &Shared) -> Option<Error> {
    loop {
        // Subscribed before looking: a change after the look wakes us.
        let mut changes = shared.subscribe();
        let valid_until = match poll(shared) {
            HoldState::Held { valid_until } => valid_until,
            HoldState::Lost { loss, .. } => return Some(loss),
            HoldState::Ended => return None,
        };
        ::tokio::select! {
            // The sender lives as long as `shared`: this never fails.
            _ = changes.changed() => {}
            () = sleep_until(valid_until.into()) => {}
        }
    }
}

/// Completes when the PROCLAIM numbered `n` is acknowledged, or the lock
/// is lost (its loss). It wakes at the validity deadline to decide a
/// timeout itself, so it never waits for the keeper task.
async fn wait_proclaimed(shared: &Shared, n: u64) -> Result<(), Error> {
    loop {
        // Subscribed before looking: a change after the look wakes us.
        let mut changes = shared.subscribe();
        if shared.borrow().proclaimed() >= n {
            return Ok(());
        }
        let valid_until = match poll(shared) {
            HoldState::Held { valid_until } => valid_until,
            state => return state.check(),
        };
        ::tokio::select! {
            _ = changes.changed() => {}
            () = sleep_until(valid_until.into()) => {}
        }
    }
}

/// Runs a step of the session, waking the waiters when it tells a loss or
/// an acknowledged PROCLAIM, or closes.
fn step(shared: &Shared, input: Input<'_>) -> Turn {
    let mut turn = Turn::default();
    shared.send_if_modified(|session| {
        turn = session.step(input, Instant::now());
        turn.lost.is_some() || turn.proclaimed.is_some() || turn.close.is_some()
    });
    turn
}

/// What the keeper task shares with its guard.
struct Keeper {
    shared: Arc<Shared>,
    /// Completes (or fails) when the guard lets go.
    release: oneshot::Receiver<()>,
    /// A PROCLAIM was handed in.
    handed_in: Arc<Notify>,
}

/// The keeper task: does what each turn of the session says, in order
/// (tell, write, close), and reads until the instant the session names. It
/// starts with the rest of the granting turn; a release from the guard is
/// one more input, and so is a PROCLAIM handed in (a timer: the session
/// sends it when nothing is in flight). It ends, dropping (closing) the
/// connection, when the session is done with it.
async fn keep(mut conn: Conn, keeper: Keeper, first: Turn) {
    let Keeper {
        shared,
        mut release,
        handed_in,
    } = keeper;
    let mut buf = [0u8; 512];
    let mut turn = first;
    let mut let_go = false;
    loop {
        // The loss, if any, was told inside `step`, before this.
        let mut input = None;
        if let Some(request) = &turn.send {
            // A held session never asks for its ACQUIRE again.
            if let Err(e) = conn.send(request.bytes(&[])).await {
                input = Some(Input::End(Error::io(e)));
            }
        }
        let gone = match turn.close {
            Some(Close::Now) => true,
            // Bounded: a server that stopped reading could stall the write
            // of the close_notify. A failed half-close ends the hand-back.
            Some(Close::HandBack { until }) => !matches!(
                timeout_at(until.into(), conn.half_close()).await,
                Ok(Ok(()))
            ),
            None => false,
        };
        if gone {
            break;
        }
        let Some(wake) = shared.borrow().next_wakeup() else {
            break;
        };
        let input = match input {
            Some(input) => input,
            // Conn::read is cancel-safe: a release or a timeout loses no bytes.
            None => ::tokio::select! {
                biased;
                _ = &mut release, if !let_go => {
                    let_go = true;
                    Input::Release
                }
                () = handed_in.notified() => Input::Timer,
                read = timeout_at(wake.into(), conn.read(&mut buf)) => match read {
                    Err(_elapsed) => Input::Timer,
                    Ok(Ok(n)) => Input::Bytes(&buf[..n]),
                    Ok(Err(e)) => Input::End(Error::io(e)),
                },
            },
        };
        turn = step(&shared, input);
    }
}
