//! A held lock on tokio: the guard, and the task that heartbeats the
//! connection and watches it.

use std::time::Instant;

use ::tokio::sync::watch;
use ::tokio::task::JoinHandle;
use ::tokio::time::timeout_at;

use super::conn::Conn;
use crate::core::codec::HEARTBEAT;
use crate::core::session::Session;
use crate::core::step::hold_step;
use crate::error::Error;

/// What the keeper task publishes.
#[derive(Debug, Clone)]
struct State {
    valid_until: Instant,
    /// Set once, when the lock is lost ([`Error::Lost`]).
    lost: Option<Error>,
}

/// A held lock. Dropping it releases the lock: the keeper task is aborted
/// and the connection closed.
///
/// A spawned task sends heartbeats and reads the replies. The lock is safe
/// to use until [`LockGuard::valid_until`]; when the server ends the session
/// or no acknowledgement arrives in time, the lock is lost and
/// [`LockGuard::lost`] completes with the reason.
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
    name: String,
    token: u64,
    state: watch::Receiver<State>,
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
    /// Takes over a granted connection and spawns its keeper task.
    pub(crate) fn start(name: &str, conn: Conn, session: Session) -> Result<LockGuard, Error> {
        let (Some(token), Some(valid_until)) = (session.token(), session.valid_until()) else {
            return Err(Error::Protocol(
                "lock guard for a session without grant".into(),
            ));
        };
        let (tx, rx) = watch::channel(State {
            valid_until,
            lost: None,
        });
        let keeper = ::tokio::spawn(keep(conn, session, tx));
        Ok(LockGuard {
            name: name.to_owned(),
            token,
            state: rx,
            keeper: Some(keeper),
        })
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of this grant.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Until when the lock is safe to use (monotonic clock); moves forward
    /// with every acknowledged heartbeat.
    pub fn valid_until(&self) -> Instant {
        self.state.borrow().valid_until
    }

    /// Whether the lock is lost, or its validity has run out.
    pub fn is_lost(&self) -> bool {
        let state = self.state.borrow();
        state.lost.is_some() || Instant::now() >= state.valid_until
    }

    /// Why the lock was lost ([`Error::Lost`]), or `None` while held.
    pub fn loss_reason(&self) -> Option<Error> {
        self.state.borrow().lost.clone()
    }

    /// `Ok(())` while the lock is held and valid, else the loss.
    pub fn check(&self) -> Result<(), Error> {
        let state = self.state.borrow();
        if let Some(lost) = &state.lost {
            return Err(lost.clone());
        }
        if Instant::now() >= state.valid_until {
            return Err(Error::Lost(Box::new(Error::Timeout)));
        }
        Ok(())
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

    /// Releases the lock and waits until the connection is closed (the
    /// server then hands the lock to the next waiter). Dropping the guard
    /// does the same without waiting. Safe after a loss.
    pub async fn release(mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
            // The task (and with it the connection) is gone once this
            // returns; its outcome (cancelled) is of no interest.
            let _ = keeper.await;
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
        }
    }
}

/// Awaits the end of a held lock from another task; see
/// [`LockGuard::watch`].
#[derive(Debug, Clone)]
pub struct LossWatch {
    state: watch::Receiver<State>,
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

/// The keeper task: heartbeats and reads until the session ends, then
/// closes the connection and publishes the loss. A release aborts it.
async fn keep(mut conn: Conn, mut session: Session, tx: watch::Sender<State>) {
    let cause = run_session(&mut conn, &mut session, &tx).await;
    // Close first, then tell.
    drop(conn);
    tx.send_modify(|s| s.lost = Some(Error::Lost(Box::new(cause))));
}

/// Follows a granted session until it fails; returns the cause.
async fn run_session(conn: &mut Conn, session: &mut Session, tx: &watch::Sender<State>) -> Error {
    let mut buf = [0u8; 512];
    loop {
        let step = match hold_step(session, Instant::now()) {
            Ok(step) => step,
            Err(cause) => return cause,
        };
        tx.send_if_modified(|s| {
            let changed = s.valid_until != step.valid_until;
            s.valid_until = step.valid_until;
            changed
        });
        if step.heartbeat {
            if let Err(e) = conn.send(&HEARTBEAT).await {
                return Error::io(e);
            }
        }
        match timeout_at(step.wake.into(), conn.read(&mut buf)).await {
            Err(_elapsed) => {}
            Ok(Ok(n)) => session.feed(&buf[..n]),
            Ok(Err(e)) => return Error::io(e),
        }
    }
}
