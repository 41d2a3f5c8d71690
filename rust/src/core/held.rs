//! What a lock guard knows of its lock, and the answers it gives from it.
//!
//! The blocking and the tokio guard share the state differently (a mutex
//! and a condition variable, a watch channel), but what they share is the
//! same [`Standing`], and their accessors are the ones below: the guards
//! only fetch the latest standing and delegate.

use std::fmt;
use std::time::Instant;

use super::session::Session;
use crate::error::Error;

/// The grant a guard holds: the lock name and the fencing token. Fixed for
/// the life of the guard.
#[derive(Debug)]
pub(crate) struct Grant {
    name: String,
    token: u64,
}

/// Where a held lock stands, as the keeper last published it.
#[derive(Debug, Clone)]
pub(crate) struct Standing {
    /// Until when the lock is safe to use; moves with every ack.
    pub(crate) valid_until: Instant,
    /// Set once, by the keeper, when the lock is lost ([`Error::Lost`]).
    pub(crate) lost: Option<Error>,
}

impl Grant {
    /// The grant of a session that holds `name`, and its first standing.
    pub(crate) fn of(name: &str, session: &Session) -> Result<(Grant, Standing), Error> {
        let (Some(token), Some(valid_until)) = (session.token(), session.valid_until()) else {
            return Err(Error::Protocol(
                "lock guard for a session without grant".into(),
            ));
        };
        let grant = Grant {
            name: name.to_owned(),
            token,
        };
        Ok((
            grant,
            Standing {
                valid_until,
                lost: None,
            },
        ))
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

impl Standing {
    /// Whether the lock is lost, or its validity has run out at `now` (the
    /// keeper reports the loss at that instant).
    pub(crate) fn is_lost(&self, now: Instant) -> bool {
        self.lost.is_some() || now >= self.valid_until
    }

    /// `Ok(())` while the lock is held and valid at `now`, else the loss:
    /// the keeper's cause, or a timeout it has not reported yet.
    pub(crate) fn check(&self, now: Instant) -> Result<(), Error> {
        if let Some(lost) = &self.lost {
            return Err(lost.clone());
        }
        if now >= self.valid_until {
            return Err(Error::Lost(Box::new(Error::Timeout)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn standing(valid_until: Instant, lost: Option<Error>) -> Standing {
        Standing { valid_until, lost }
    }

    #[test]
    fn held_until_the_validity_runs_out() {
        let now = Instant::now();
        let s = standing(now + Duration::from_millis(10), None);
        assert!(!s.is_lost(now));
        assert!(s.check(now).is_ok());
        let later = now + Duration::from_millis(10);
        assert!(s.is_lost(later));
        let err = s.check(later).unwrap_err();
        assert!(matches!(err, Error::Lost(cause) if matches!(*cause, Error::Timeout)));
    }

    #[test]
    fn a_reported_loss_wins_over_remaining_validity() {
        let now = Instant::now();
        let cause = Error::Lost(Box::new(Error::Protocol("gone".into())));
        let s = standing(now + Duration::from_secs(60), Some(cause));
        assert!(s.is_lost(now));
        let err = s.check(now).unwrap_err();
        assert!(matches!(err, Error::Lost(cause) if matches!(*cause, Error::Protocol(_))));
    }

    #[test]
    fn no_grant_without_a_held_session() {
        let session = Session::new(1000, Instant::now());
        let err = Grant::of("x", &session).unwrap_err();
        assert!(matches!(err, Error::Protocol(_)));
    }
}
