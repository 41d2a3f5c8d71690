//! An opt-in pool of sessions for callers that take many short locks.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{Client, LockGuard, Session};
use crate::claim::Claim;
use crate::error::Error;

/// A few [`Session`]s that claims are spread over: each claim goes to an
/// open session with room (fewer claims than its `max_streams`), the least
/// busy first; a new session opens while there are fewer than the pool's
/// size, and a session that died is replaced on the next claim. Open it
/// with [`Client::session_pool`].
///
/// **The trade-off.** Claims on one session share its fate: when its
/// connection is lost (or its heartbeat goes unanswered for 0.8 of the
/// lease, or the server ends it), every claim held on it is lost at once.
/// A pool of `n` sessions bounds that to about 1/`n` of the claims at a
/// time, and spares the connection, the handshake and the heartbeats of a
/// claim of its own. Take a lock whose loss must not follow anyone else's
/// with [`Client::acquire`].
///
/// Nothing is retried: a claim that fails returns its error (a dead
/// session is replaced on the next claim, not this one). Dropping the pool
/// closes its sessions, which releases every claim still held on them.
///
/// ```no_run
/// use monolock::Claim;
///
/// let client = monolock::Client::builder().build()?;
/// let pool = client.session_pool(4);
/// for job in 0..1000 {
///     let guard = pool.acquire(&format!("jobs/{job}"), Claim::exclusive())?;
///     // ... a short piece of work under guard.token() ...
///     guard.release();
/// }
/// # Ok::<(), monolock::Error>(())
/// ```
pub struct SessionPool {
    client: Client,
    size: usize,
    sessions: Mutex<Vec<Arc<Session>>>,
}

impl std::fmt::Debug for SessionPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionPool")
            .field("size", &self.size)
            .field("sessions", &self.lock().len())
            .finish()
    }
}

impl SessionPool {
    pub(crate) fn new(client: Client, size: usize) -> SessionPool {
        SessionPool {
            client,
            size: size.max(1),
            sessions: Mutex::new(Vec::new()),
        }
    }

    /// Claims `name` on a session of the pool, waiting in the server's
    /// queue; see [`Session::acquire`].
    pub fn acquire(&self, name: &str, claim: Claim) -> Result<LockGuard, Error> {
        self.pick()?.acquire(name, claim)
    }

    /// Like [`SessionPool::acquire`], giving up with [`Error::Timeout`]
    /// after `timeout`; see [`Session::acquire_timeout`].
    pub fn acquire_timeout(
        &self,
        name: &str,
        claim: Claim,
        timeout: Duration,
    ) -> Result<LockGuard, Error> {
        self.pick()?.acquire_timeout(name, claim, timeout)
    }

    /// Claims `name` only if it is free right now; see
    /// [`Session::try_acquire`].
    pub fn try_acquire(&self, name: &str, claim: Claim) -> Result<LockGuard, Error> {
        self.pick()?.try_acquire(name, claim)
    }

    /// How many sessions are open now (at most the pool's size).
    pub fn sessions(&self) -> usize {
        self.lock().len()
    }

    /// The session for the next claim: dead ones go, the least busy open
    /// one with room is taken, else a new one opens while the pool has
    /// room; with every session full, the least busy (the server then
    /// refuses with [`Error::TooManyStreams`]).
    fn pick(&self) -> Result<Arc<Session>, Error> {
        let mut sessions = self.lock();
        // A dead session goes without a close: see Session::detach.
        sessions.retain(|s| {
            s.is_open() || {
                s.detach();
                false
            }
        });
        let least = sessions
            .iter()
            .min_by_key(|s| s.open_claims())
            .map(Arc::clone);
        if let Some(s) = &least {
            let room = s.open_claims() < s.max_streams() as usize;
            if room && (s.open_claims() == 0 || sessions.len() >= self.size) {
                return Ok(Arc::clone(s));
            }
        }
        if sessions.len() < self.size {
            // Opened under the lock: two claims never open two sessions
            // where one was wanted.
            let session = Arc::new(self.client.session()?);
            sessions.push(Arc::clone(&session));
            return Ok(session);
        }
        least.ok_or_else(|| Error::Protocol("a session pool without sessions".into()))
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
