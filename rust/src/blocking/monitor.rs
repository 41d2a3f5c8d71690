//! A value behind a mutex, with a condition variable to wait for its
//! changes: the one waiting primitive of the blocking client, used by the
//! lock guard with its keeper thread and by the cancel handle.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A value that threads change and wait on (a monitor: a mutex and its
/// condition variable).
#[derive(Default)]
pub(crate) struct Monitor<T> {
    state: Mutex<T>,
    changed: Condvar,
}

impl<T> Monitor<T> {
    pub(crate) fn new(state: T) -> Monitor<T> {
        Monitor {
            state: Mutex::new(state),
            changed: Condvar::new(),
        }
    }

    /// Locks the value. A poisoned lock is used as it is: every writer
    /// leaves the value whole between its statements.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes every waiter to look at the value again.
    pub(crate) fn notify_all(&self) {
        self.changed.notify_all();
    }

    /// Waits for the next change, but no later than `until`.
    pub(crate) fn wait_until<'a>(
        &self,
        state: MutexGuard<'a, T>,
        until: Instant,
    ) -> MutexGuard<'a, T> {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return state;
        }
        self.changed
            .wait_timeout(state, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }

    /// Waits while `pending` holds, but no later than `until` (`None`: no
    /// bound). The caller looks at the returned value to tell which.
    pub(crate) fn wait_while_until<'a>(
        &self,
        mut state: MutexGuard<'a, T>,
        until: Option<Instant>,
        mut pending: impl FnMut(&T) -> bool,
    ) -> MutexGuard<'a, T> {
        while pending(&state) {
            let left = match until {
                Some(until) => until.saturating_duration_since(Instant::now()),
                None => Duration::MAX,
            };
            if left.is_zero() {
                break;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        state
    }
}
