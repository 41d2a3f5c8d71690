//! The blocking client, on `std::net`.

mod cancel;
mod conn;
mod guard;
mod monitor;
mod pool;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use cancel::CancelHandle;
pub use guard::{LockGuard, LossWatch};

use crate::addr::ServerAddr;
use crate::claim::Claim;
use crate::config::{ClientBuilder, Config};
use crate::core::retry::{log_failure, log_retry, Failure, Mode, Next, Plan};
use crate::core::session::{wait_for, Input, Session, Turn};
use crate::core::step::{acquire_step, read_failed, AcquireStep};
use crate::error::Error;
use conn::Conn;

/// A blocking monolock client.
///
/// Each acquire opens its own connection; the returned [`LockGuard`] keeps
/// it alive with heartbeats on a background thread and releases the lock
/// when dropped. A `Client` is cheap to clone and can be shared between
/// threads.
///
/// ```no_run
/// use std::time::Duration;
///
/// let client = monolock::Client::builder()
///     .server("127.0.0.1:7117")
///     .lease(Duration::from_secs(5))
///     .build()?;
/// let guard = client.acquire_timeout("jobs/nightly", Duration::from_secs(30))?;
/// println!("holding with fencing token {}", guard.token());
/// // ... do the work, passing guard.token() to the guarded resource ...
/// guard.release();
/// # Ok::<(), monolock::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    config: Arc<Config>,
}

impl Default for ClientBuilder<Client> {
    fn default() -> Self {
        ClientBuilder::new()
    }
}

impl ClientBuilder<Client> {
    /// A builder for the blocking client with the defaults: server
    /// [`DEFAULT_SERVER`](crate::DEFAULT_SERVER), lease
    /// [`DEFAULT_LEASE`](crate::DEFAULT_LEASE), connect timeout
    /// [`DEFAULT_CONNECT_TIMEOUT`](crate::DEFAULT_CONNECT_TIMEOUT). Same as
    /// [`Client::builder`].
    pub fn new() -> ClientBuilder<Client> {
        ClientBuilder::with_defaults()
    }

    /// Builds the blocking client, after checking the settings.
    pub fn build(self) -> Result<Client, Error> {
        Ok(Client::from_config(self.finish()?))
    }
}

impl Client {
    /// Starts a [`ClientBuilder`].
    pub fn builder() -> ClientBuilder<Client> {
        ClientBuilder::new()
    }

    pub(crate) fn from_config(config: Arc<Config>) -> Client {
        Client { config }
    }

    /// Acquires `name`, waiting in the server's queue as long as it takes.
    ///
    /// Temporary errors and connection failures while waiting lead to a
    /// new connection after a backoff; terminal errors are returned.
    pub fn acquire(&self, name: &str) -> Result<LockGuard, Error> {
        self.acquire_inner(name, Claim::exclusive(), Mode::Wait, None, None)
    }

    /// Like [`Client::acquire`], with the kind of claim: a shared one
    /// ([`Claim::shared`]) or a semaphore's permit ([`Claim::semaphore`]).
    ///
    /// ```no_run
    /// use monolock::Claim;
    ///
    /// let client = monolock::Client::builder().build()?;
    /// let reader = client.acquire_with("db/schema", Claim::shared())?;
    /// println!("reading with token {}", reader.token());
    /// # Ok::<(), monolock::Error>(())
    /// ```
    pub fn acquire_with(&self, name: &str, claim: Claim) -> Result<LockGuard, Error> {
        self.acquire_inner(name, claim, Mode::Wait, None, None)
    }

    /// Acquires `name`, giving up with [`Error::Timeout`] after `timeout`.
    /// If attempts failed meanwhile (a server down, a refused connection, a
    /// TLS handshake cut short), the timeout carries the last one's error.
    /// A TLS handshake that failed on a certificate is not retried against
    /// that server: with no other server left, its error comes at once.
    pub fn acquire_timeout(&self, name: &str, timeout: Duration) -> Result<LockGuard, Error> {
        self.acquire_inner(name, Claim::exclusive(), Mode::Wait, Some(timeout), None)
    }

    /// Like [`Client::acquire_timeout`], with the kind of claim.
    pub fn acquire_timeout_with(
        &self,
        name: &str,
        timeout: Duration,
        claim: Claim,
    ) -> Result<LockGuard, Error> {
        self.acquire_inner(name, claim, Mode::Wait, Some(timeout), None)
    }

    /// Acquires `name` only if it is free right now: [`Error::Busy`] when
    /// another client holds it. Nothing is retried.
    ///
    /// ```no_run
    /// let client = monolock::Client::builder().build()?;
    /// match client.try_acquire("reports") {
    ///     Ok(guard) => println!("got it, token {}", guard.token()),
    ///     Err(e) if e.is_busy() => println!("someone else is on it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), monolock::Error>(())
    /// ```
    pub fn try_acquire(&self, name: &str) -> Result<LockGuard, Error> {
        self.acquire_inner(name, Claim::exclusive(), Mode::Try, None, None)
    }

    /// Like [`Client::try_acquire`], with the kind of claim: a shared claim
    /// or a semaphore's permit is [`Error::Busy`] when it does not fit at
    /// once, or would have to wait behind a claim queued before it.
    ///
    /// ```no_run
    /// use monolock::Claim;
    ///
    /// let client = monolock::Client::builder().build()?;
    /// match client.try_acquire_with("pool/gpu", Claim::semaphore(4)) {
    ///     Ok(permit) => println!("got one of 4 permits, token {}", permit.token()),
    ///     Err(e) if e.is_busy() => println!("all 4 permits are taken"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), monolock::Error>(())
    /// ```
    pub fn try_acquire_with(&self, name: &str, claim: Claim) -> Result<LockGuard, Error> {
        self.acquire_inner(name, claim, Mode::Try, None, None)
    }

    /// Like [`Client::acquire`] (with an optional timeout), but can be
    /// cancelled from another thread through `cancel`, which closes the
    /// connection at once. A cancelled acquire returns [`Error::Cancelled`].
    ///
    /// ```no_run
    /// use monolock::{CancelHandle, Client};
    ///
    /// let client = Client::builder().build()?;
    /// let cancel = CancelHandle::new();
    /// let canceller = cancel.clone();
    /// std::thread::spawn(move || {
    ///     std::thread::sleep(std::time::Duration::from_secs(1));
    ///     canceller.cancel();
    /// });
    /// let res = client.acquire_cancellable("jobs/x", None, &cancel);
    /// assert!(matches!(res, Ok(_) | Err(monolock::Error::Cancelled)));
    /// # Ok::<(), monolock::Error>(())
    /// ```
    pub fn acquire_cancellable(
        &self,
        name: &str,
        timeout: Option<Duration>,
        cancel: &CancelHandle,
    ) -> Result<LockGuard, Error> {
        self.acquire_inner(name, Claim::exclusive(), Mode::Wait, timeout, Some(cancel))
    }

    /// Like [`Client::acquire_cancellable`], with the kind of claim.
    pub fn acquire_cancellable_with(
        &self,
        name: &str,
        timeout: Option<Duration>,
        cancel: &CancelHandle,
        claim: Claim,
    ) -> Result<LockGuard, Error> {
        self.acquire_inner(name, claim, Mode::Wait, timeout, Some(cancel))
    }

    fn acquire_inner(
        &self,
        name: &str,
        claim: Claim,
        mode: Mode,
        timeout: Option<Duration>,
        cancel: Option<&CancelHandle>,
    ) -> Result<LockGuard, Error> {
        let frame = self.config.acquire_frame(name, &claim)?;
        // A deadline too far to represent is no deadline.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut plan = Plan::new(mode, self.config.servers.len(), deadline).for_lock(name);
        let attempt = Attempt {
            config: &self.config,
            name,
            frame: &frame,
            claim: &claim,
            cancel,
        };
        loop {
            if cancel.is_some_and(CancelHandle::is_cancelled) {
                return Err(Error::Cancelled);
            }
            match plan.next(Instant::now()) {
                Next::Connect(server) => {
                    let server = &self.config.servers[server];
                    match attempt.run(server, &plan) {
                        Ok((conn, session, turn)) => {
                            return LockGuard::start(name, conn, session, turn)
                        }
                        Err(failure) => {
                            if let Some(cancel) = cancel {
                                cancel.detach();
                            }
                            log_failure(name, server, &failure);
                            plan.report(failure, &self.config.servers);
                        }
                    }
                }
                Next::Sleep(delay) => {
                    log_retry(name, delay, &plan, &self.config.servers);
                    match cancel {
                        Some(cancel) => cancel.sleep(delay)?,
                        None => std::thread::sleep(delay),
                    }
                }
                Next::GiveUp(err) => return Err(err),
            }
        }
    }
}

/// One connection's worth of an acquire.
struct Attempt<'a> {
    config: &'a Config,
    name: &'a str,
    frame: &'a [u8],
    claim: &'a Claim,
    cancel: Option<&'a CancelHandle>,
}

impl Attempt<'_> {
    fn cancelled(&self) -> bool {
        self.cancel.is_some_and(CancelHandle::is_cancelled)
    }

    /// Connects, sends ACQUIRE and follows the session until it is granted
    /// or fails. Dropping the connection on a failure closes it.
    fn run(&self, server: &ServerAddr, plan: &Plan) -> Result<(Conn, Session, Turn), Failure> {
        let mut connect_timeout = self.config.connect_timeout;
        if let Some(deadline) = plan.deadline() {
            connect_timeout =
                connect_timeout.min(deadline.saturating_duration_since(Instant::now()));
        }
        let conn = Conn::connect(self.config, server, connect_timeout)
            .map_err(|e| Failure::Connect(Error::io(e)))?;
        if let Some(cancel) = self.cancel {
            cancel.attach(conn.tcp()).map_err(Failure::Final)?;
        }
        let (mut session, mut turn) = Session::connect_as(
            &server.to_string(),
            self.name,
            self.claim.clone(),
            self.config.lease_ms,
            plan.mode(),
            Instant::now(),
        );
        let mut buf = [0u8; 512];
        let mut on_waiting = || self.config.notify_waiting(self.name);
        loop {
            let now = Instant::now();
            let (send, wake) = match acquire_step(&session, &mut turn, plan, now, &mut on_waiting)?
            {
                AcquireStep::Granted => {
                    if let Some(cancel) = self.cancel {
                        cancel.detach();
                    }
                    return Ok((conn, session, turn));
                }
                AcquireStep::Continue { send, wake } => (send, wake),
            };
            let sent = match send {
                Some(request) => conn.send(request.bytes(self.frame)),
                None => Ok(()),
            };
            let read = sent.and_then(|()| conn.read_within(&mut buf, wait_for(wake, now)));
            if self.cancelled() {
                return Err(Failure::Final(Error::Cancelled));
            }
            let input = match read {
                Ok(Some(n)) => Input::Bytes(&buf[..n]),
                Ok(None) => Input::Timer,
                Err(e) => Input::End(read_failed(server, e)),
            };
            turn = session.step(input, Instant::now());
        }
    }
}
