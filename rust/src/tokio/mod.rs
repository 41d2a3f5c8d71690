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
//!     .build()?;
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
mod session;
mod session_pool;
mod watch;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ::tokio::time::{sleep, timeout, timeout_at};

pub use guard::{LockGuard, LossWatch};
pub use session::Session;
pub use session_pool::SessionPool;
pub use watch::{Observer, Term, Watch};

use crate::addr::ServerAddr;
use crate::blocking::campaign_claim;
use crate::claim::Claim;
use crate::config::Config;
use crate::core::retry::{log_failure, log_retry, Failure, Mode, Next, Plan};
use crate::core::session::{Input, Session as SingleClaim, Turn};
use crate::core::step::{acquire_step, read_failed, AcquireStep};
use crate::error::Error;
use crate::watch::Observation;
use conn::Conn;

/// The builder of the tokio client: [`Client::builder`] starts one, and
/// its `build` returns a [`Client`]. The settings are those of the
/// blocking client's builder.
pub type ClientBuilder = crate::config::ClientBuilder<Client>;

/// An async monolock client for tokio. Cheap to clone.
///
/// Build it with [`Client::builder`]. It needs a tokio runtime
/// (any flavour) with timers enabled; each held lock runs one spawned task.
#[derive(Debug, Clone)]
pub struct Client {
    config: Arc<Config>,
}

impl ClientBuilder {
    /// Builds the async client for tokio, after checking the settings.
    pub fn build(self) -> Result<Client, Error> {
        Ok(Client::from_config(self.finish()?))
    }
}

impl Client {
    /// Starts a [`ClientBuilder`] for this client, with the defaults of
    /// [`crate::ClientBuilder::new`]; its `build` returns a tokio
    /// [`Client`].
    pub fn builder() -> ClientBuilder {
        ClientBuilder::with_defaults()
    }

    pub(crate) fn from_config(config: Arc<Config>) -> Client {
        Client { config }
    }

    /// Acquires `name`, waiting in the server's queue as long as it takes.
    /// Drop the future to give up.
    pub async fn acquire(&self, name: &str) -> Result<LockGuard, Error> {
        self.acquire_inner(name, Claim::exclusive(), Mode::Wait, None)
            .await
    }

    /// Like [`Client::acquire`], with the kind of claim: a shared one
    /// ([`Claim::shared`]) or a semaphore's permit ([`Claim::semaphore`]).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), monolock::Error> {
    /// use monolock::Claim;
    ///
    /// let client = monolock::tokio::Client::builder().build()?;
    /// let reader = client.acquire_with("db/schema", Claim::shared()).await?;
    /// println!("reading with token {}", reader.token());
    /// # Ok(()) }
    /// ```
    pub async fn acquire_with(&self, name: &str, claim: Claim) -> Result<LockGuard, Error> {
        self.acquire_inner(name, claim, Mode::Wait, None).await
    }

    /// Acquires `name`, giving up with [`Error::Timeout`] after `timeout`.
    /// If attempts failed meanwhile (a server down, a refused connection, a
    /// TLS handshake cut short), the timeout carries the last one's error.
    /// A TLS handshake that failed on a certificate is not retried against
    /// that server: with no other server left, its error comes at once.
    pub async fn acquire_timeout(&self, name: &str, timeout: Duration) -> Result<LockGuard, Error> {
        self.acquire_inner(name, Claim::exclusive(), Mode::Wait, Some(timeout))
            .await
    }

    /// Like [`Client::acquire_timeout`], with the kind of claim.
    pub async fn acquire_timeout_with(
        &self,
        name: &str,
        timeout: Duration,
        claim: Claim,
    ) -> Result<LockGuard, Error> {
        self.acquire_inner(name, claim, Mode::Wait, Some(timeout))
            .await
    }

    /// Acquires `name` only if it is free right now: [`Error::Busy`] when
    /// another client holds it.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), monolock::Error> {
    /// let client = monolock::tokio::Client::builder().build()?;
    /// match client.try_acquire("reports").await {
    ///     Ok(guard) => println!("got it, token {}", guard.token()),
    ///     Err(e) if e.is_busy() => println!("someone else is on it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, name: &str) -> Result<LockGuard, Error> {
        self.acquire_inner(name, Claim::exclusive(), Mode::Try, None)
            .await
    }

    /// Like [`Client::try_acquire`], with the kind of claim: a shared claim
    /// or a semaphore's permit is [`Error::Busy`] when it does not fit at
    /// once, or would have to wait behind a claim queued before it.
    pub async fn try_acquire_with(&self, name: &str, claim: Claim) -> Result<LockGuard, Error> {
        self.acquire_inner(name, claim, Mode::Try, None).await
    }

    /// Starts watching `name` (protocol version 3): its holders with their
    /// values, its queue, every change. Returns once the first picture is
    /// known, or with the error that keeps the server from answering (the
    /// ACL, a server older than version 3); while no server answers, it
    /// keeps trying: bound it with a timeout. The watch runs until it is
    /// closed or dropped.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), monolock::Error> {
    /// let client = monolock::tokio::Client::builder().build()?;
    /// let mut watch = client.watch("jobs/nightly").await?;
    /// while watch.changed().await {
    ///     let state = watch.state();
    ///     println!("known {}: {} holders", state.known, state.holders.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn watch(&self, name: &str) -> Result<Watch, Error> {
        Watch::start(Arc::clone(&self.config), name).await
    }

    /// Waits until this client is elected leader of `name`, with `value`
    /// (how followers reach it: an address, a URL). Candidates are
    /// elected in the order they campaigned; it retries as
    /// [`Client::acquire`] does. An empty value is refused
    /// ([`Error::EmptyValue`]).
    pub async fn campaign(&self, name: &str, value: impl Into<Vec<u8>>) -> Result<Term, Error> {
        let claim = campaign_claim(name, value.into())?;
        self.acquire_with(name, claim).await.map(Term::new)
    }

    /// Follows the leadership of `name`: [`Observer::next`] gives every
    /// change, starting with the first known picture.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), monolock::Error> {
    /// let client = monolock::tokio::Client::builder().build()?;
    /// let mut leaders = client.observe("service/leader").await?;
    /// while let Some(o) = leaders.next().await {
    ///     println!("{}: {}", o.state, String::from_utf8_lossy(&o.value));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn observe(&self, name: &str) -> Result<Observer, Error> {
        self.watch(name).await.map(Observer::new)
    }

    /// Who leads `name` now: one watch, its first picture, closed.
    pub async fn leader(&self, name: &str) -> Result<Observation, Error> {
        let watch = self.watch(name).await?;
        let o = watch.leader();
        watch.close().await;
        Ok(o)
    }

    /// Opens a [`Session`] (protocol version 4): one connection that
    /// carries many claims on one lease and one heartbeat; see the
    /// blocking [`Client::session`](crate::Client::session).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), monolock::Error> {
    /// use monolock::Claim;
    ///
    /// let client = monolock::tokio::Client::builder().build()?;
    /// let session = client.session().await?;
    /// let guard = session.acquire("jobs/a", Claim::exclusive()).await?;
    /// guard.release().await;
    /// # Ok(()) }
    /// ```
    pub async fn session(&self) -> Result<Session, Error> {
        Session::open(Arc::clone(&self.config)).await
    }

    /// An opt-in pool of up to `size` sessions (at least one), opened as
    /// claims need them; see the blocking
    /// [`Client::session_pool`](crate::Client::session_pool).
    pub fn session_pool(&self, size: usize) -> SessionPool {
        SessionPool::new(self.clone(), size)
    }

    async fn acquire_inner(
        &self,
        name: &str,
        claim: Claim,
        mode: Mode,
        timeout: Option<Duration>,
    ) -> Result<LockGuard, Error> {
        let frame = self.config.acquire_frame(name, &claim)?;
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut plan = Plan::new(mode, self.config.servers.len(), deadline).for_lock(name);
        loop {
            match plan.next(Instant::now()) {
                Next::Connect(server) => {
                    let server = &self.config.servers[server];
                    match self.attempt(server, name, &frame, &claim, &plan).await {
                        Ok((conn, session, turn)) => {
                            return LockGuard::start(name, conn, session, turn)
                        }
                        Err(failure) => {
                            log_failure(name, server, &failure);
                            plan.report(failure, &self.config.servers);
                        }
                    }
                }
                Next::Sleep(delay) => {
                    log_retry(name, delay, &plan, &self.config.servers);
                    sleep(delay).await;
                }
                Next::GiveUp(err) => return Err(err),
            }
        }
    }

    /// One connection's worth of an acquire: connect, send ACQUIRE, follow
    /// the session until it is granted or fails. Dropping the connection on
    /// a failure (or with this future) closes it.
    async fn attempt(
        &self,
        server: &ServerAddr,
        name: &str,
        frame: &[u8],
        claim: &Claim,
        plan: &Plan,
    ) -> Result<(Conn, SingleClaim, Turn), Failure> {
        let mut connect_timeout = self.config.connect_timeout;
        if let Some(deadline) = plan.deadline() {
            connect_timeout =
                connect_timeout.min(deadline.saturating_duration_since(Instant::now()));
        }
        let mut conn = match timeout(connect_timeout, Conn::connect(&self.config, server)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(Failure::Connect(Error::io(e))),
            Err(_) => {
                let e = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{server}: connect timed out"),
                );
                return Err(Failure::Connect(Error::io(e)));
            }
        };
        let (mut session, mut turn) = SingleClaim::connect_as(
            &server.to_string(),
            name,
            claim.clone(),
            self.config.lease_ms,
            plan.mode(),
            Instant::now(),
        );
        let mut buf = [0u8; 512];
        let mut on_waiting = || self.config.notify_waiting(name);
        loop {
            let now = Instant::now();
            let (send, wake) = match acquire_step(&session, &mut turn, plan, now, &mut on_waiting)?
            {
                AcquireStep::Granted => return Ok((conn, session, turn)),
                AcquireStep::Continue { send, wake } => (send, wake),
            };
            let sent = match send {
                Some(request) => conn.send(request.bytes(frame)).await,
                None => Ok(()),
            };
            let input = match sent {
                Err(e) => Input::End(Error::io(e)),
                // Conn::read is cancel-safe: a timeout loses no bytes.
                Ok(()) => match timeout_at(wake.into(), conn.read(&mut buf)).await {
                    Err(_elapsed) => Input::Timer,
                    Ok(Ok(n)) => Input::Bytes(&buf[..n]),
                    Ok(Err(e)) => Input::End(read_failed(server, e)),
                },
            };
            turn = session.step(input, Instant::now());
        }
    }
}
