//! The blocking client, on `std::net`.

mod cancel;
mod conn;
mod guard;
mod monitor;
mod pool;
mod session;
mod session_pool;
mod watch;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use cancel::CancelHandle;
pub use guard::{LockGuard, LossWatch};
pub use session::Session;
pub use session_pool::SessionPool;
pub use watch::{Observer, Term, Watch};

use crate::addr::ServerAddr;
use crate::claim::Claim;
use crate::config::{ClientBuilder, Config};
use crate::core::retry::{log_failure, log_retry, Failure, Mode, Next, Plan};
use crate::core::session::{wait_for, Input, Session as SingleClaim, Turn};
use crate::core::step::{acquire_step, read_failed, AcquireStep};
use crate::error::Error;
use crate::watch::Observation;
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

    /// Starts watching `name` (protocol version 3): its holders with their
    /// values, its queue, every change. Returns once the first picture is
    /// known, or with the error that keeps the server from answering (the
    /// ACL, a server older than version 3); while no server answers, it
    /// keeps trying. The watch runs until it is closed or dropped.
    ///
    /// ```no_run
    /// let client = monolock::Client::builder().build()?;
    /// let watch = client.watch("jobs/nightly")?;
    /// while watch.wait_change() {
    ///     let state = watch.state();
    ///     println!("known {}: {} holders, {} waiting", state.known,
    ///         state.holders.len(), state.waiters.len());
    /// }
    /// # Ok::<(), monolock::Error>(())
    /// ```
    pub fn watch(&self, name: &str) -> Result<Watch, Error> {
        Watch::start(Arc::clone(&self.config), name, None)
    }

    /// Like [`Client::watch`], giving up with [`Error::Timeout`] when no
    /// picture is known within `timeout`.
    pub fn watch_timeout(&self, name: &str, timeout: Duration) -> Result<Watch, Error> {
        let deadline = Instant::now().checked_add(timeout);
        Watch::start(Arc::clone(&self.config), name, deadline)
    }

    /// Waits until this client is elected leader of `name`, with `value`
    /// (how followers reach it: an address, a URL). Candidates are
    /// elected in the order they campaigned; it retries as
    /// [`Client::acquire`] does. An empty value is refused
    /// ([`Error::EmptyValue`]).
    ///
    /// ```no_run
    /// let client = monolock::Client::builder().build()?;
    /// let term = client.campaign("service/leader", "10.0.0.7:8080")?;
    /// println!("leading with token {}", term.token());
    /// term.resign();
    /// # Ok::<(), monolock::Error>(())
    /// ```
    pub fn campaign(&self, name: &str, value: impl Into<Vec<u8>>) -> Result<Term, Error> {
        let claim = campaign_claim(name, value.into())?;
        self.acquire_with(name, claim).map(Term::new)
    }

    /// Follows the leadership of `name`: an iterator of every change,
    /// starting with the first known picture (see [`Observer`]).
    pub fn observe(&self, name: &str) -> Result<Observer, Error> {
        self.watch(name).map(Observer::new)
    }

    /// Who leads `name` now: one watch, its first picture, closed.
    pub fn leader(&self, name: &str) -> Result<Observation, Error> {
        let watch = self.watch(name)?;
        Ok(watch.leader())
    }

    /// Like [`Client::leader`], giving up with [`Error::Timeout`] when no
    /// picture is known within `timeout`.
    pub fn leader_timeout(&self, name: &str, timeout: Duration) -> Result<Observation, Error> {
        let watch = self.watch_timeout(name, timeout)?;
        Ok(watch.leader())
    }

    /// Opens a [`Session`] (protocol version 4): one connection that
    /// carries many claims on one lease and one heartbeat. Returns once the
    /// server has accepted it; fails at once otherwise (nothing is retried;
    /// the servers are tried in order). See [`Session`] for the trade-off:
    /// its claims share its fate.
    ///
    /// ```no_run
    /// use monolock::Claim;
    ///
    /// let client = monolock::Client::builder().build()?;
    /// let session = client.session()?;
    /// let guard = session.acquire("jobs/a", Claim::exclusive())?;
    /// guard.check()?;
    /// # Ok::<(), monolock::Error>(())
    /// ```
    pub fn session(&self) -> Result<Session, Error> {
        Session::open(Arc::clone(&self.config))
    }

    /// An opt-in pool of up to `size` sessions (at least one), opened as
    /// claims need them: for callers that take many short locks. See
    /// [`SessionPool`] for the trade-off (a session's claims share its fate).
    pub fn session_pool(&self, size: usize) -> SessionPool {
        SessionPool::new(self.clone(), size)
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
    fn run(&self, server: &ServerAddr, plan: &Plan) -> Result<(Conn, SingleClaim, Turn), Failure> {
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
        let (mut session, mut turn) = SingleClaim::connect_as(
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

/// The claim of a campaign: exclusive, with the leader's value, which must
/// not be empty (followers reach the leader by it).
pub(crate) fn campaign_claim(name: &str, value: Vec<u8>) -> Result<Claim, Error> {
    if value.is_empty() {
        return Err(Error::EmptyValue {
            name: name.to_owned(),
        });
    }
    Ok(Claim::exclusive().with_value(value))
}
