//! The async watch: one spawned task per watch keeps a connection to a
//! server that answers, from one to the next, and feeds the shared core.

use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use ::tokio::sync::watch as signal;
use ::tokio::task::JoinHandle;
use ::tokio::time::{sleep, timeout, timeout_at};

use super::conn::Conn;
use super::session::StreamWatch;
use super::LockGuard;
use crate::addr::ServerAddr;
use crate::config::Config;
use crate::core::step::read_failed;
use crate::core::watch::{Core, Link, Redial, Then};
use crate::core::watch_codec::encode_watch;
use crate::error::Error;
use crate::watch::{leader_of, next_transition, Observation, WatchState};

/// What the watch's task and its handle share.
struct Shared {
    inner: Mutex<Inner>,
    /// Counts the changes told, the picture's end of validity included.
    changed: signal::Sender<u64>,
}

struct Inner {
    core: Core,
    /// Why the watch ended for good.
    err: Option<Error>,
    done: bool,
    told_known: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// Tells of a change (`force`), or of the picture's validity ending.
    fn touch(&self, inner: &mut Inner, force: bool) {
        let known = inner.core.known(Instant::now());
        if force || known != inner.told_known {
            inner.told_known = known;
            self.changed.send_modify(|g| *g += 1);
        }
    }
}

/// A watch of one lock name (protocol version 3), for tokio: its holders
/// with their values, its queue, and every change, in the server's order.
/// It reconnects by itself, resuming where it left off, and follows the
/// active server of an HA cell.
///
/// Its state is vouched for only until the send of its last acknowledged
/// heartbeat plus 0.8 x lease: after that, and between connections,
/// [`WatchState::known`] is false and [`Watch::leader`] says
/// [`LeaderState::Unknown`](crate::LeaderState), never the last holder it
/// saw. Dropping it ends it.
///
/// A watch opened in a session ([`Session::watch`](super::Session::watch))
/// runs as a stream of it instead: vouched for on the session's deadline, ended (not resumed)
/// with the session.
pub struct Watch {
    name: String,
    run: Run,
}

/// What keeps the watch going: a task and a connection of its own, or a
/// stream of a [`Session`](super::Session).
enum Run {
    Own {
        shared: Arc<Shared>,
        changed: signal::Receiver<u64>,
        task: JoinHandle<()>,
    },
    Stream(StreamWatch),
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").field("name", &self.name).finish()
    }
}

impl Watch {
    /// Spawns the watch's task and waits until its first picture is
    /// known, or it ends. Dropping this future ends the watch.
    pub(crate) async fn start(config: Arc<Config>, name: &str) -> Result<Watch, Error> {
        encode_watch(name.as_bytes(), u64::from(config.lease_ms), 0, 0)?;
        let (tx, rx) = signal::channel(0);
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                core: Core::new(config.lease_ms),
                err: None,
                done: false,
                told_known: false,
            }),
            changed: tx,
        });
        let runner = Runner {
            shared: Arc::clone(&shared),
            config,
            name: name.to_owned(),
        };
        // The handle first: its drop aborts the task, also while waiting.
        let mut watch = Watch {
            name: name.to_owned(),
            run: Run::Own {
                shared,
                changed: rx,
                task: ::tokio::spawn(runner.run()),
            },
        };
        loop {
            if watch.state().known {
                return Ok(watch);
            }
            if !watch.changed().await {
                return Err(watch.error().unwrap_or(Error::Cancelled));
            }
        }
    }

    /// The watch of a session's stream, whose first picture is known.
    pub(crate) fn in_session(name: &str, stream: StreamWatch) -> Watch {
        Watch {
            name: name.to_owned(),
            run: Run::Stream(stream),
        }
    }

    /// The watched name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current picture. `known` is decided at the call: a watch whose
    /// server went silent reads unknown at its deadline even if nothing
    /// has run since.
    pub fn state(&self) -> WatchState {
        match &self.run {
            Run::Own { shared, .. } => shared.lock().core.state(Instant::now()),
            Run::Stream(stream) => stream.state(),
        }
    }

    /// The picture read as an election: the first holder is the leader.
    pub fn leader(&self) -> Observation {
        leader_of(&self.state(), Instant::now())
    }

    /// Waits for the next change of the picture (an event, a new
    /// acknowledgement, the end of its validity, a reconnect) since the
    /// last one this handle saw. False when the watch has ended.
    /// Cancel-safe.
    pub async fn changed(&mut self) -> bool {
        let (shared, changed) = match &mut self.run {
            Run::Own {
                shared, changed, ..
            } => (shared, changed),
            Run::Stream(stream) => return stream.changed().await,
        };
        if changed.has_changed().unwrap_or(false) {
            changed.borrow_and_update();
            return true;
        }
        if shared.lock().done {
            return false;
        }
        // An error: the task is gone, and told its end before.
        changed.changed().await.is_ok()
    }

    /// Whether the watch has ended: an error that retrying cannot cure
    /// ([`Watch::error`]).
    pub fn is_ended(&self) -> bool {
        match &self.run {
            Run::Own { shared, .. } => shared.lock().done,
            Run::Stream(stream) => stream.ended().is_some(),
        }
    }

    /// Why the watch ended (`None` while it runs).
    pub fn error(&self) -> Option<Error> {
        match &self.run {
            Run::Own { shared, .. } => shared.lock().err.clone(),
            Run::Stream(stream) => stream.ended().filter(|e| !matches!(e, Error::Cancelled)),
        }
    }

    /// Ends the watch and closes its connection (a session's watch: its
    /// stream).
    pub async fn close(mut self) {
        match &mut self.run {
            Run::Own { task, .. } => {
                task.abort();
                let _ = task.await;
            }
            Run::Stream(stream) => stream.close(),
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        match &self.run {
            Run::Own { task, .. } => task.abort(),
            Run::Stream(stream) => stream.close(),
        }
    }
}

/// The watch's task.
struct Runner {
    shared: Arc<Shared>,
    config: Arc<Config>,
    name: String,
}

impl Runner {
    /// Keeps a connection to a server that answers: a silent or lost one
    /// is retried with backoff, a passive server sends it to the active
    /// one, a terminal error ends the watch.
    async fn run(self) {
        let servers = &self.config.servers;
        let mut redial = Redial::new();
        loop {
            let server = &servers[redial.server(servers.len())];
            let mut vouched = false;
            let err = self.connect(server, &mut vouched).await;
            let then = redial.after(&err, vouched, servers);
            {
                let mut inner = self.shared.lock();
                inner.core.disconnected();
                self.shared.touch(&mut inner, true);
            }
            log_at!(
                debug,
                "watch {:?}: connection to {server} ended: {}",
                self.name,
                err.bare()
            );
            match then {
                Then::Stop => {
                    self.shared.lock().err = Some(err);
                    break;
                }
                Then::Retry(delay) => sleep(delay).await,
            }
        }
        let mut inner = self.shared.lock();
        inner.done = true;
        self.shared.touch(&mut inner, true);
    }

    /// Runs one connection until it fails; sets `vouched` once the server
    /// answered a request on it.
    async fn connect(&self, server: &ServerAddr, vouched: &mut bool) -> Error {
        let connecting = Conn::connect(&self.config, server);
        let mut conn = match timeout(self.config.connect_timeout, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Error::io(e),
            Err(_) => {
                let e = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("{server}: connect timed out"),
                );
                return Error::io(e);
            }
        };
        let opened = {
            let mut inner = self.shared.lock();
            Link::open(
                &mut inner.core,
                &self.name,
                self.config.lease_ms,
                Instant::now(),
            )
        };
        let (mut link, frame) = match opened {
            Ok(opened) => opened,
            Err(e) => return e,
        };
        let res = match conn.send(&frame).await {
            Ok(()) => self.serve(server, &mut conn, &mut link).await,
            Err(e) => Err(Error::io(e)),
        };
        *vouched = link.vouched();
        match res {
            Ok(never) => match never {},
            Err(e) => e,
        }
    }

    /// Sends heartbeats on schedule and feeds what the server says to the
    /// core, until something ends the connection.
    async fn serve(
        &self,
        server: &ServerAddr,
        conn: &mut Conn,
        link: &mut Link,
    ) -> Result<std::convert::Infallible, Error> {
        let mut buf = [0u8; 4096];
        loop {
            let due = {
                let mut inner = self.shared.lock();
                let due = link.poll(&mut inner.core, Instant::now());
                self.shared.touch(&mut inner, false);
                due?
            };
            if let Some(bytes) = due.send {
                conn.send(bytes).await.map_err(Error::io)?;
            }
            // Conn::read is cancel-safe: a timeout loses no bytes.
            let n = match timeout_at(due.wake.into(), conn.read(&mut buf)).await {
                Err(_elapsed) => continue,
                Ok(Ok(n)) => n,
                Ok(Err(e)) => return Err(read_failed(server, e)),
            };
            let mut inner = self.shared.lock();
            let fed = link.feed(&mut inner.core, &buf[..n], Instant::now());
            self.shared.touch(&mut inner, true);
            fed?;
        }
    }
}

/// Follows the leadership of a name: [`Observer::next`] gives one
/// [`Observation`] per change (a new leader, a new value, no leader, a
/// hold, unknown), the first as soon as the watch is known, and `None`
/// once the watch has ended ([`Observer::error`] says why). A slow reader
/// misses nothing that still holds: each is the state at that moment.
#[derive(Debug)]
pub struct Observer {
    watch: Watch,
    last: Option<Observation>,
}

impl Observer {
    pub(crate) fn new(watch: Watch) -> Observer {
        Observer { watch, last: None }
    }

    /// The watch underneath.
    pub fn watch(&self) -> &Watch {
        &self.watch
    }

    /// Why the watch ended, once [`Observer::next`] said `None`.
    pub fn error(&self) -> Option<Error> {
        self.watch.error()
    }

    /// The next change of the leadership. Cancel-safe.
    #[allow(clippy::should_implement_trait)] // an async next, as a stream's
    pub async fn next(&mut self) -> Option<Observation> {
        loop {
            let now = Instant::now();
            let st = self.watch.state();
            let o = leader_of(&st, now);
            if self.last.as_ref() != Some(&o) {
                self.last = Some(o.clone());
                return Some(o);
            }
            if self.watch.is_ended() {
                return None;
            }
            let wait = next_transition(&st, &o, now);
            ::tokio::select! {
                _ = self.watch.changed() => {}
                _ = sleep(wait) => {}
            }
        }
    }
}

/// One leadership of a name: the lock the candidate was granted, with its
/// fencing token. It derefs to the [`LockGuard`]: watch its loss
/// ([`LockGuard::lost`]) and stop leading when it is lost. Dropping it
/// resigns.
#[derive(Debug)]
pub struct Term {
    guard: LockGuard,
}

impl Term {
    pub(crate) fn new(guard: LockGuard) -> Term {
        Term { guard }
    }

    /// Ends the term: the next candidate is elected at once.
    pub async fn resign(self) {
        self.guard.release().await;
    }

    /// The lock guard of the term.
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }
}

impl Deref for Term {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}
