//! The async client, on tokio (feature `tokio`).
//!
//! It mirrors the blocking [`Client`](crate::Client): the same builder, the
//! same errors, the same protocol core. Acquire futures are
//! cancellation-safe: dropping one (a `select!` branch losing, a timeout, an
//! aborted task) closes its connection, so the server drops the queue place
//! at once.
//!
//! ```no_run
//! # async fn demo() -> Result<(), monolock::Error> {
//! use std::time::Duration;
//!
//! let client = monolock::tokio::Client::builder()
//!     .server("127.0.0.1:7117")
//!     .lease(Duration::from_secs(5))
//!     .build_async();
//! let guard = client.acquire_timeout("jobs/nightly", Duration::from_secs(30)).await?;
//! tokio::select! {
//!     reason = guard.lost() => eprintln!("lost the lock: {reason}"),
//!     _ = tokio::time::sleep(Duration::from_secs(1)) => println!("work done"),
//! }
//! guard.release().await;
//! # Ok(()) }
//! ```

mod conn;
mod guard;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ::tokio::time::{sleep, timeout, timeout_at};

pub use guard::{LockGuard, LossWatch};

use crate::config::{ClientBuilder, Config};
use crate::core::codec::HEARTBEAT;
use crate::core::retry::{Failure, Mode, Plan};
use crate::core::session::Session;
use crate::core::step::{acquire_step, AcquireStep};
use crate::error::Error;
use conn::Conn;

/// An async monolock client for tokio. Cheap to clone.
///
/// Build it with [`ClientBuilder::build_async`]. It needs a tokio runtime
/// (any flavour) with timers enabled; each held lock runs one spawned task.
#[derive(Debug, Clone)]
pub struct Client {
    config: Arc<Config>,
}

impl Client {
    /// Starts a [`ClientBuilder`]; finish it with
    /// [`ClientBuilder::build_async`].
    pub fn builder() -> ClientBuilder {
        ClientBuilder::new()
    }

    pub(crate) fn from_config(config: Arc<Config>) -> Client {
        Client { config }
    }

    /// Acquires `name`, waiting in the server's queue as long as it takes.
    /// Drop the future to give up.
    pub async fn acquire(&self, name: &str) -> Result<LockGuard, Error> {
        self.acquire_inner(name, Mode::Wait, None).await
    }

    /// Acquires `name`, giving up with [`Error::Timeout`] after `timeout`.
    pub async fn acquire_timeout(&self, name: &str, timeout: Duration) -> Result<LockGuard, Error> {
        self.acquire_inner(name, Mode::Wait, Some(timeout)).await
    }

    /// Acquires `name` only if it is free right now: [`Error::Busy`] when
    /// another client holds it.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), monolock::Error> {
    /// let client = monolock::tokio::Client::builder().build_async();
    /// match client.try_acquire("reports").await {
    ///     Ok(guard) => println!("got it, token {}", guard.token()),
    ///     Err(e) if e.is_busy() => println!("someone else is on it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, name: &str) -> Result<LockGuard, Error> {
        self.acquire_inner(name, Mode::Try, None).await
    }

    async fn acquire_inner(
        &self,
        name: &str,
        mode: Mode,
        timeout: Option<Duration>,
    ) -> Result<LockGuard, Error> {
        let (frame, lease_ms) = self.config.acquire_frame(name)?;
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut plan = Plan::new(mode, self.config.servers.len(), deadline);
        loop {
            if plan.expired(Instant::now()) {
                return Err(Error::Timeout);
            }
            let server = &self.config.servers[plan.next_server()];
            let failure = match self
                .attempt(server, name, &frame, lease_ms, &mut plan)
                .await
            {
                Ok((conn, session)) => return LockGuard::start(name, conn, session),
                Err(failure) => failure,
            };
            let delay = plan.after_failure(failure, Instant::now())?;
            sleep(delay).await;
        }
    }

    /// One connection's worth of an acquire: connect, send ACQUIRE, follow
    /// the session until it is granted or fails.
    async fn attempt(
        &self,
        server: &str,
        name: &str,
        frame: &[u8],
        lease_ms: u32,
        plan: &mut Plan,
    ) -> Result<(Conn, Session), Failure> {
        let mut connect_timeout = self.config.connect_timeout;
        if let Some(deadline) = plan.deadline() {
            connect_timeout =
                connect_timeout.min(deadline.saturating_duration_since(Instant::now()));
        }
        let mut conn = match timeout(connect_timeout, Conn::connect(&self.config, server)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(Failure::Connect(Error::io(e))),
            Err(_) => {
                let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out");
                return Err(Failure::Connect(Error::io(e)));
            }
        };
        let session_io = |e| Failure::Session(Error::io(e));
        conn.send(frame).await.map_err(session_io)?;
        let mut session = Session::new(lease_ms, Instant::now());
        let mut buf = [0u8; 512];
        let mut on_waiting = || self.config.notify_waiting(name);
        loop {
            let now = Instant::now();
            let wake = match acquire_step(&mut session, plan, now, &mut on_waiting)? {
                AcquireStep::Granted => return Ok((conn, session)),
                AcquireStep::Continue { heartbeat, wake } => {
                    if heartbeat {
                        conn.send(&HEARTBEAT).await.map_err(session_io)?;
                    }
                    wake
                }
            };
            // Conn::read is cancel-safe: a timeout loses no bytes.
            match timeout_at(wake.into(), conn.read(&mut buf)).await {
                Err(_elapsed) => {}
                Ok(Ok(n)) => session.feed(&buf[..n]),
                Ok(Err(e)) => return Err(session_io(e)),
            }
        }
    }
}
