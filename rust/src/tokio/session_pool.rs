//! An opt-in pool of sessions on tokio, for callers that take many short
//! locks.

use std::sync::Arc;
use std::time::Duration;

use ::tokio::sync::Mutex;

use super::{Client, LockGuard, Session};
use crate::claim::Claim;
use crate::error::Error;
use crate::pool_pick::{self, Pick};

/// The tokio [`SessionPool`](crate::SessionPool): a few [`Session`]s that claims are spread over: each claim goes to an
/// open session with room (fewer claims than its `max_streams`), the least
/// busy first; a new session opens while there are fewer than the pool's
/// size, and a session that died is replaced on the next claim. A session
/// that has used every stream id (ids are never reused) takes no new
/// claim and leaves the pool's count; it is closed once its last claim
/// has ended. Open it
/// with [`Client::session_pool`](super::Client::session_pool).
///
/// **The trade-off.** Claims on one session share its fate: when its
/// connection is lost (or its heartbeat goes unanswered for 0.8 of the
/// lease, or the server ends it), every claim held on it is lost at once.
/// A pool of `n` sessions bounds that to about 1/`n` of the claims at a
/// time, and spares the connection, the handshake and the heartbeats of a
/// claim of its own. Take a lock whose loss must not follow anyone else's
/// with [`Client::acquire`](super::Client::acquire).
///
/// Nothing is retried: a claim that fails returns its error (a dead
/// session is replaced on the next claim, not this one). Dropping the pool
/// closes its sessions, which releases every claim still held on them.
///
/// ```no_run
/// # async fn demo() -> Result<(), monolock::Error> {
/// use monolock::Claim;
///
/// let client = monolock::tokio::Client::builder().build()?;
/// let pool = client.session_pool(4);
/// for job in 0..1000 {
///     let guard = pool.acquire(&format!("jobs/{job}"), Claim::exclusive()).await?;
///     // ... a short piece of work under guard.token() ...
///     guard.release().await;
/// }
/// # Ok(()) }
/// ```
pub struct SessionPool {
    client: Client,
    size: usize,
    sessions: Mutex<pool_pick::Members<Session>>,
}

pool_pick::session_member!(Session);

impl std::fmt::Debug for SessionPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionPool")
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl SessionPool {
    pub(crate) fn new(client: Client, size: usize) -> SessionPool {
        SessionPool {
            client,
            size: size.max(1),
            sessions: Mutex::new(pool_pick::Members::default()),
        }
    }

    /// Claims `name` on a session of the pool, waiting in the server's
    /// queue; see [`Session::acquire`].
    pub async fn acquire(&self, name: &str, claim: Claim) -> Result<LockGuard, Error> {
        self.pick().await?.acquire(name, claim).await
    }

    /// Like [`SessionPool::acquire`], giving up with [`Error::Timeout`]
    /// after `timeout`; see [`Session::acquire_timeout`].
    pub async fn acquire_timeout(
        &self,
        name: &str,
        claim: Claim,
        timeout: Duration,
    ) -> Result<LockGuard, Error> {
        self.pick()
            .await?
            .acquire_timeout(name, claim, timeout)
            .await
    }

    /// Claims `name` only if it is free right now; see
    /// [`Session::try_acquire`].
    pub async fn try_acquire(&self, name: &str, claim: Claim) -> Result<LockGuard, Error> {
        self.pick().await?.try_acquire(name, claim).await
    }

    /// How many sessions are open now (at most the pool's size).
    pub async fn sessions(&self) -> usize {
        self.sessions.lock().await.sessions.len()
    }

    /// The session for the next claim: dead ones go, the least busy open
    /// one with room is taken, else a new one opens while the pool has
    /// room; with every session full, the least busy (the server then
    /// refuses with [`Error::TooManyStreams`]).
    async fn pick(&self) -> Result<Arc<Session>, Error> {
        let mut guard = self.sessions.lock().await;
        let pool_pick::Members { sessions, retiring } = &mut *guard;
        match pool_pick::pick(sessions, retiring, self.size)? {
            Pick::Use(session) => Ok(session),
            Pick::Open => {
                // Opened under the lock: two claims never open two sessions
                // where one was wanted.
                let session = Arc::new(self.client.session().await?);
                sessions.push(Arc::clone(&session));
                Ok(session)
            }
        }
    }
}
