//! What a lock guard knows of its lock: the fixed grant, and the answers
//! its accessors give from the session's [`HoldState`].
//!
//! The blocking and the tokio guard share the session with their keeper
//! differently (a mutex and a condition variable, a watch channel), but
//! every polled check and push waiter asks [`Session::poll`] and answers
//! from the state it returns: one decision.

use std::fmt;
use std::time::Instant;

use super::session::{HoldState, Session};
use crate::error::Error;

/// The grant a guard holds: the lock name and the fencing token. Fixed for
/// the life of the guard.
#[derive(Debug)]
pub(crate) struct Grant {
    name: String,
    token: u64,
}

impl Grant {
    /// The grant of a session that was granted `name`.
    pub(crate) fn of(name: &str, session: &Session) -> Result<Grant, Error> {
        let Some(token) = session.token() else {
            return Err(Error::Protocol(
                "lock guard for a session without grant".into(),
            ));
        };
        Ok(Grant {
            name: name.to_owned(),
            token,
        })
    }

    /// The grant of a session's claim on `name`, with `token`.
    pub(crate) fn new(name: &str, token: u64) -> Grant {
        Grant {
            name: name.to_owned(),
            token,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    /// The `Debug` output of both `LockGuard` types.
    pub(crate) fn fmt_guard(&self, f: &mut fmt::Formatter<'_>, lost: bool) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name)
            .field("token", &self.token)
            .field("lost", &lost)
            .finish()
    }
}

impl HoldState {
    /// `Ok(())` while held, else the loss ([`Error::Lost`]).
    pub(crate) fn check(self) -> Result<(), Error> {
        match self {
            HoldState::Held { .. } => Ok(()),
            HoldState::Lost { loss, .. } => Err(loss),
            HoldState::Ended => Err(released()),
        }
    }

    /// The loss, if lost.
    pub(crate) fn loss(self) -> Option<Error> {
        match self {
            HoldState::Lost { loss, .. } => Some(loss),
            _ => None,
        }
    }
}

/// The error of a lock that ended without a loss. Only a released guard
/// has, and nobody asks it any more.
fn released() -> Error {
    Error::Lost(Box::new(Error::Cancelled))
}

/// Hands a new value of a held lock to its session and returns the number
/// its acknowledgement reaches ([`Session::proclaimed`]); the session's next
/// step sends it. Refused before anything is handed in: a lock claimed
/// without a value, a value over 1024 bytes; a lock no longer held says
/// why (its loss).
pub(crate) fn hand_in(session: &mut Session, value: &[u8], now: Instant) -> Result<u64, Error> {
    let frame = session.proclaim_frame(value)?;
    match session.proclaim(frame) {
        // Neither waits nor holds: a loss decided before, so no poll
        // decides one now (nobody needs waking).
        0 => Err(session.poll(now).loss().unwrap_or_else(released)),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::core::retry::Mode;

    #[test]
    fn no_grant_without_a_granted_session() {
        let (session, _) = Session::connect("test:1", 1000, Mode::Wait, Instant::now());
        let err = Grant::of("x", &session).unwrap_err();
        assert!(matches!(err, Error::Protocol(_)));
    }
}
