//! A held lock on tokio: the guard, and the task that heartbeats the
//! connection, watches it and, on release, hands the lock back.

use std::time::Instant;

use ::tokio::sync::oneshot::{self, error::TryRecvError};
use ::tokio::sync::watch;
use ::tokio::task::JoinHandle;
use ::tokio::time::timeout_at;

use super::conn::Conn;
use crate::core::codec::HEARTBEAT;
use crate::core::held::{Grant, Standing};
use crate::core::session::Session;
use crate::core::step::{hold_step, release_step, ReleaseStep};
use crate::error::Error;

/// A held lock. Release it with [`LockGuard::release`]`.await`, which
/// completes once the server has freed the lock.
///
/// A spawned task sends heartbeats and reads the replies. The lock is safe
/// to use until [`LockGuard::valid_until`]; when the server ends the session
/// or no acknowledgement arrives in time, the lock is lost and
/// [`LockGuard::lost`] completes with the reason.
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
/// let client = monolock::tokio::Client::builder().build_async();
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
    /// What the keeper task publishes.
    state: watch::Receiver<Standing>,
    /// Dropping it tells the keeper to hand the lock back.
    release: Option<oneshot::Sender<()>>,
    keeper: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.grant.fmt_guard(f, self.is_lost())
    }
}

impl LockGuard {
    /// Takes over a granted connection and spawns its keeper task.
    pub(crate) fn start(name: &str, conn: Conn, session: Session) -> Result<LockGuard, Error> {
        let (grant, held) = Grant::of(name, &session)?;
        let (tx, rx) = watch::channel(held);
        let (release, released) = oneshot::channel();
        let keeper = ::tokio::spawn(keep(conn, session, tx, released));
        Ok(LockGuard {
            grant,
            state: rx,
            release: Some(release),
            keeper: Some(keeper),
        })
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.grant.name()
    }

    /// The fencing token of this grant.
    pub fn token(&self) -> u64 {
        self.grant.token()
    }

    /// Until when the lock is safe to use (monotonic clock); moves forward
    /// with every acknowledged heartbeat.
    pub fn valid_until(&self) -> Instant {
        self.state.borrow().valid_until
    }

    /// Whether the lock is lost, or its validity has run out.
    pub fn is_lost(&self) -> bool {
        self.state.borrow().is_lost(Instant::now())
    }

    /// Why the lock was lost ([`Error::Lost`]), or `None` while held.
    pub fn loss_reason(&self) -> Option<Error> {
        self.state.borrow().lost.clone()
    }

    /// `Ok(())` while the lock is held and valid, else the loss.
    pub fn check(&self) -> Result<(), Error> {
        self.state.borrow().check(Instant::now())
    }

    /// Completes when the lock is lost, with the reason ([`Error::Lost`]).
    /// Cancel-safe.
    pub async fn lost(&self) -> Error {
        let mut rx = self.state.clone();
        let result = rx
            .wait_for(|s| s.lost.is_some())
            .await
            .map(|s| s.lost.clone());
        match result {
            Ok(Some(lost)) => lost,
            // The keeper is gone without a word: only a panic does that.
            _ => Error::Lost(Box::new(Error::Protocol("lock keeper task ended".into()))),
        }
    }

    /// A handle another task can await until the lock is lost or released.
    pub fn watch(&self) -> LossWatch {
        LossWatch {
            state: self.state.clone(),
        }
    }

    /// Releases the lock and completes once the server has freed it, so
    /// that another client's `try_acquire` right after this finds the lock
    /// free (or the next waiter already holding it).
    ///
    /// The keeper task half-closes the connection (after a TLS
    /// close_notify) and waits for the server to close its side, which the
    /// server does only after freeing the lock and promoting the next
    /// waiter. The wait is bounded by 0.8 of the lease, at most one second;
    /// then the connection is closed regardless. Safe after a loss.
    /// Cancelling this future leaves the release running in the background,
    /// as a drop does.
    pub async fn release(mut self) {
        drop(self.release.take());
        if let Some(keeper) = self.keeper.take() {
            // Its outcome is of no interest: a panic has nothing to release.
            let _ = keeper.await;
        }
    }
}

impl Drop for LockGuard {
    /// Starts the release in the background; see the type's docs.
    fn drop(&mut self) {
        drop(self.release.take());
        // The keeper task runs on, detached, until the hand-back is over.
        drop(self.keeper.take());
    }
}

/// Awaits the end of a held lock from another task; see
/// [`LockGuard::watch`].
#[derive(Debug, Clone)]
pub struct LossWatch {
    state: watch::Receiver<Standing>,
}

impl LossWatch {
    /// Completes when the lock is lost (`Some` with [`Error::Lost`]) or
    /// released by its guard (`None`). Cancel-safe.
    pub async fn wait(&mut self) -> Option<Error> {
        loop {
            if let Some(lost) = &self.state.borrow_and_update().lost {
                return Some(lost.clone());
            }
            if self.state.changed().await.is_err() {
                // The keeper is gone: released, or it set `lost` just before.
                return self.state.borrow().lost.clone();
            }
        }
    }

    /// Whether the lock was lost.
    pub fn is_lost(&self) -> bool {
        self.state.borrow().lost.is_some()
    }
}

/// How the keeper's watch over a held session ended.
enum End {
    /// The guard released the lock.
    Released,
    /// The lock was lost, for this cause.
    Lost(Error),
}

/// The keeper task: heartbeats and reads until the session ends. On a
/// release it hands the lock back; on a loss it closes the connection and
/// publishes why.
async fn keep(
    mut conn: Conn,
    mut session: Session,
    tx: watch::Sender<Standing>,
    mut release: oneshot::Receiver<()>,
) {
    match run_session(&mut conn, &mut session, &tx, &mut release).await {
        End::Released => hand_back(&mut conn, &mut session).await,
        End::Lost(cause) => {
            // Close first, then tell.
            drop(conn);
            tx.send_modify(|s| s.lost = Some(Error::Lost(Box::new(cause))));
        }
    }
}

/// Follows a granted session until it is released or fails.
async fn run_session(
    conn: &mut Conn,
    session: &mut Session,
    tx: &watch::Sender<Standing>,
    release: &mut oneshot::Receiver<()>,
) -> End {
    let mut buf = [0u8; 512];
    loop {
        let step = match hold_step(session, Instant::now()) {
            Ok(step) => step,
            Err(cause) => return ended(cause, release),
        };
        tx.send_if_modified(|s| {
            let changed = s.valid_until != step.valid_until;
            s.valid_until = step.valid_until;
            changed
        });
        if step.heartbeat {
            if let Err(e) = conn.send(&HEARTBEAT).await {
                return ended(Error::io(e), release);
            }
        }
        // Conn::read is cancel-safe: a release or a timeout loses no bytes.
        let read = ::tokio::select! {
            biased;
            _ = &mut *release => return End::Released,
            read = timeout_at(step.wake.into(), conn.read(&mut buf)) => read,
        };
        match read {
            Err(_elapsed) => {}
            Ok(Ok(n)) => session.feed(&buf[..n]),
            Ok(Err(e)) => return ended(Error::io(e), release),
        }
    }
}

/// A session that failed while the guard was just being released is a
/// release: nobody holds the guard to hear of a loss.
fn ended(cause: Error, release: &mut oneshot::Receiver<()>) -> End {
    match release.try_recv() {
        Err(TryRecvError::Empty) => End::Lost(cause),
        _ => End::Released,
    }
}

/// Half-closes and reads, ignoring late acks, until the server closes its
/// side (which means it freed the lock) or the release wait runs out. The
/// caller drops the connection afterwards.
async fn hand_back(conn: &mut Conn, session: &mut Session) {
    let until = session.begin_release(Instant::now());
    // Bounded as well: a server that stopped reading could stall the write
    // of the close_notify.
    if !matches!(
        timeout_at(until.into(), conn.half_close()).await,
        Ok(Ok(()))
    ) {
        return;
    }
    let mut buf = [0u8; 512];
    loop {
        let until = match release_step(session, Instant::now()) {
            ReleaseStep::Done => return,
            ReleaseStep::ReadUntil(until) => until,
        };
        match timeout_at(until.into(), conn.read(&mut buf)).await {
            Err(_elapsed) => {} // the next step says Done
            Ok(Ok(n)) => session.feed(&buf[..n]),
            // The server's close: the lock is free.
            Ok(Err(_)) => return,
        }
    }
}
