//! The session pools' one rule for choosing a session, shared by the
//! blocking and the tokio pool (each only opens and locks its own way).

use std::sync::Arc;

use crate::error::Error;

/// What a pool needs to know of one of its sessions.
pub(crate) trait Member {
    fn is_open(&self) -> bool;
    /// Lets a dead session go without a close (see `Session::detach`).
    fn detach(&self);
    fn open_claims(&self) -> usize;
    fn max_streams(&self) -> u32;
    /// How many more claims the session may ever open: ids are never reused.
    fn ids_left(&self) -> u64;
}

/// A pool's sessions: those that take claims, and those that have used
/// every stream id and are kept only until their last claim ends.
pub(crate) struct Members<S> {
    pub(crate) sessions: Vec<Arc<S>>,
    pub(crate) retiring: Vec<Arc<S>>,
}

impl<S> Default for Members<S> {
    fn default() -> Self {
        Members {
            sessions: Vec::new(),
            retiring: Vec::new(),
        }
    }
}

/// Implements [`Member`] for a session type with the methods of that name
/// (the blocking and the tokio `Session`).
macro_rules! session_member {
    ($session:ty) => {
        impl $crate::pool_pick::Member for $session {
            fn is_open(&self) -> bool {
                <$session>::is_open(self)
            }
            fn detach(&self) {
                <$session>::detach(self);
            }
            fn open_claims(&self) -> usize {
                <$session>::open_claims(self)
            }
            fn max_streams(&self) -> u32 {
                <$session>::max_streams(self)
            }
            fn ids_left(&self) -> u64 {
                <$session>::ids_left(self)
            }
        }
    };
}
pub(crate) use session_member;

/// The pool's choice for the next claim.
pub(crate) enum Pick<S> {
    Use(Arc<S>),
    /// Open a new session and use it.
    Open,
}

/// Chooses the session for the next claim: dead sessions go; a session
/// without ids left moves to `retiring` (out of the count, so a new one can
/// open) and is dropped, which closes it, once its last claim has ended;
/// the least busy open session with room is taken, else a new one opens
/// while the pool has room; with every session full, the least busy (the
/// server then refuses with [`Error::TooManyStreams`]).
pub(crate) fn pick<S: Member>(
    sessions: &mut Vec<Arc<S>>,
    retiring: &mut Vec<Arc<S>>,
    size: usize,
) -> Result<Pick<S>, Error> {
    let open = |s: &Arc<S>| {
        s.is_open() || {
            s.detach();
            false
        }
    };
    sessions.retain(open);
    retiring.retain(open);
    sessions.retain(|s| {
        s.ids_left() > 0 || {
            retiring.push(Arc::clone(s));
            false
        }
    });
    retiring.retain(|s| s.open_claims() > 0); // the last handle closes it
    let least = sessions
        .iter()
        .min_by_key(|s| s.open_claims())
        .map(Arc::clone);
    if let Some(s) = &least {
        let room = s.open_claims() < s.max_streams() as usize;
        if room && (s.open_claims() == 0 || sessions.len() >= size) {
            return Ok(Pick::Use(Arc::clone(s)));
        }
    }
    if sessions.len() < size {
        return Ok(Pick::Open);
    }
    least
        .map(Pick::Use)
        .ok_or_else(|| Error::Protocol("a session pool without sessions".into()))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};

    use super::*;

    #[derive(Default)]
    struct Fake {
        closed: AtomicBool,
        claims: AtomicUsize,
        ids_left: AtomicU64,
    }

    impl Member for Fake {
        fn is_open(&self) -> bool {
            !self.closed.load(SeqCst)
        }
        fn detach(&self) {}
        fn open_claims(&self) -> usize {
            self.claims.load(SeqCst)
        }
        fn max_streams(&self) -> u32 {
            10
        }
        fn ids_left(&self) -> u64 {
            self.ids_left.load(SeqCst)
        }
    }

    fn fake(claims: usize, ids_left: u64) -> Arc<Fake> {
        let f = Fake::default();
        f.claims.store(claims, SeqCst);
        f.ids_left.store(ids_left, SeqCst);
        Arc::new(f)
    }

    #[test]
    fn a_session_without_ids_left_retires_and_goes_once_its_claims_end() {
        let spent = fake(1, 0);
        let mut sessions = vec![Arc::clone(&spent)];
        let mut retiring = Vec::new();
        // A pool of one: the spent session leaves the count, a new one opens.
        assert!(matches!(
            pick(&mut sessions, &mut retiring, 1),
            Ok(Pick::Open)
        ));
        assert!(sessions.is_empty());
        assert_eq!(retiring.len(), 1, "its claim lives on");
        let fresh = fake(0, 100);
        sessions.push(Arc::clone(&fresh));
        spent.claims.store(0, SeqCst); // its last claim ended
        match pick(&mut sessions, &mut retiring, 1) {
            Ok(Pick::Use(s)) => assert!(Arc::ptr_eq(&s, &fresh)),
            _ => panic!("the fresh session takes the claim"),
        }
        assert!(retiring.is_empty(), "dropped, which closes it");
        assert_eq!(Arc::strong_count(&spent), 1);
    }

    #[test]
    fn dead_sessions_go_and_the_least_busy_with_room_is_taken() {
        let dead = fake(0, 100);
        dead.closed.store(true, SeqCst);
        let busy = fake(3, 100);
        let idle = fake(1, 100);
        let mut sessions = vec![dead, Arc::clone(&busy), Arc::clone(&idle)];
        let mut retiring = Vec::new();
        match pick(&mut sessions, &mut retiring, 2) {
            Ok(Pick::Use(s)) => assert!(Arc::ptr_eq(&s, &idle)),
            _ => panic!("the least busy session"),
        }
        assert_eq!(sessions.len(), 2);
    }
}
