//! Cancelling a blocking acquire from another thread.

use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use super::monitor::Monitor;
use crate::error::Error;

/// Cancels a pending [`Client::acquire_cancellable`](crate::Client::acquire_cancellable)
/// from another thread.
///
/// Cancelling closes the connection at once, so the server drops the
/// waiter's place in the queue; the acquire returns [`Error::Cancelled`].
/// A handle serves one acquire at a time; clones share the same state.
///
/// ```
/// use monolock::CancelHandle;
///
/// let cancel = CancelHandle::new();
/// let other = cancel.clone();
/// std::thread::spawn(move || other.cancel()).join().unwrap();
/// assert!(cancel.is_cancelled());
/// ```
#[derive(Clone, Default)]
pub struct CancelHandle {
    inner: Arc<Monitor<State>>,
}

#[derive(Default)]
struct State {
    cancelled: bool,
    /// A clone of the connection in use, to shut it down on cancel.
    conn: Option<TcpStream>,
}

impl std::fmt::Debug for CancelHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelHandle")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl CancelHandle {
    /// A new, not yet cancelled handle.
    pub fn new() -> CancelHandle {
        CancelHandle::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.lock()
    }

    /// Cancels the acquire: closes its connection and wakes its backoff.
    /// Has no effect on a lock already granted.
    pub fn cancel(&self) {
        let mut state = self.state();
        state.cancelled = true;
        if let Some(conn) = state.conn.take() {
            // Ignore errors: the connection may be closed already.
            let _ = conn.shutdown(Shutdown::Both);
        }
        self.inner.notify_all();
    }

    /// Whether [`CancelHandle::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.state().cancelled
    }

    /// Registers the connection of the current attempt.
    pub(crate) fn attach(&self, tcp: &TcpStream) -> Result<(), Error> {
        let mut state = self.state();
        if state.cancelled {
            return Err(Error::Cancelled);
        }
        state.conn = Some(tcp.try_clone()?);
        Ok(())
    }

    /// Forgets the connection (the attempt ended or the lock was granted).
    pub(crate) fn detach(&self) {
        self.state().conn = None;
    }

    /// Sleeps for `delay` unless cancelled first.
    pub(crate) fn sleep(&self, delay: Duration) -> Result<(), Error> {
        let until = Instant::now() + delay;
        let state = self
            .inner
            .wait_while_until(self.state(), Some(until), |s| !s.cancelled);
        if state.cancelled {
            return Err(Error::Cancelled);
        }
        Ok(())
    }
}
