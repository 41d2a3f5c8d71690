//! The blocking watch: one thread per watch keeps a connection to a
//! server that answers, from one to the next, and feeds the shared core.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::session::StreamWatch;
use super::LockGuard;
use crate::addr::ServerAddr;
use crate::config::Config;
use crate::core::session::wait_for;
use crate::core::step::read_failed;
use crate::core::watch::{Core, Link, Redial, Then};
use crate::core::watch_codec::encode_watch;
use crate::error::Error;
use crate::watch::{leader_of, next_transition, Observation, WatchState};

/// What the watch's thread and its handle share.
struct Shared {
    inner: Mutex<Inner>,
    changed: Condvar,
    /// The connection, so that a close can cut a read short.
    conn: Mutex<Option<Arc<Conn>>>,
    closed: AtomicBool,
}

struct Inner {
    core: Core,
    /// Why the watch ended for good.
    err: Option<Error>,
    /// The last connection's failure, for a timeout's message.
    last: Option<Error>,
    done: bool,
    /// Counts the changes told, the picture's end of validity included.
    generation: u64,
    told_known: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Tells of a change (`force`), or of the picture's validity ending.
    fn touch(&self, inner: &mut Inner, force: bool) {
        let known = inner.core.known(Instant::now());
        if force || known != inner.told_known {
            inner.told_known = known;
            inner.generation += 1;
            self.changed.notify_all();
        }
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(conn) = lock(&self.conn).as_ref() {
            conn.close();
        }
        let _guard = lock(&self.inner);
        self.changed.notify_all();
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// A watch of one lock name (protocol version 3): its holders with their
/// values, its queue, and every change, in the server's order. It
/// reconnects by itself, resuming where it left off, and follows the
/// active server of an HA cell.
///
/// Its state is vouched for only until the send of its last acknowledged
/// heartbeat plus 0.8 x lease, as a lock's is: after that, and whenever it
/// is between connections, [`WatchState::known`] is false, and
/// [`Watch::leader`] says [`LeaderState::Unknown`](crate::LeaderState),
/// never the last holder it saw. Dropping it ends it.
///
/// A watch opened in a session ([`Session::watch`](crate::Session::watch))
/// runs as a stream of it instead: vouched for on the session's deadline,
/// ended (not resumed) with the session.
pub struct Watch {
    name: String,
    seen: AtomicU64,
    run: Run,
}

/// What keeps the watch going: a connection of its own, or a stream of a
/// [`Session`](super::Session).
enum Run {
    Own {
        shared: Arc<Shared>,
        thread: Option<JoinHandle<()>>,
    },
    Stream(StreamWatch),
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").field("name", &self.name).finish()
    }
}

impl Watch {
    /// Starts the watch's thread and waits until its first picture is
    /// known, or it ends, or `deadline` passes.
    pub(crate) fn start(
        config: Arc<Config>,
        name: &str,
        deadline: Option<Instant>,
    ) -> Result<Watch, Error> {
        encode_watch(name.as_bytes(), u64::from(config.lease_ms), 0, 0)?;
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                core: Core::new(config.lease_ms),
                err: None,
                last: None,
                done: false,
                generation: 0,
                told_known: false,
            }),
            changed: Condvar::new(),
            conn: Mutex::new(None),
            closed: AtomicBool::new(false),
        });
        let runner = Runner {
            shared: Arc::clone(&shared),
            config,
            name: name.to_owned(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("monolock-watch {name}"))
            .spawn(move || runner.run())
            .map_err(Error::io)?;
        let watch = Watch {
            name: name.to_owned(),
            seen: AtomicU64::new(0),
            run: Run::Own {
                shared: Arc::clone(&shared),
                thread: Some(thread),
            },
        };
        watch.first_picture(&shared, deadline)?;
        Ok(watch)
    }

    /// The watch of a session's stream, whose first picture is known.
    pub(crate) fn in_session(name: &str, stream: StreamWatch) -> Watch {
        Watch {
            name: name.to_owned(),
            seen: AtomicU64::new(0),
            run: Run::Stream(stream),
        }
    }

    fn first_picture(&self, shared: &Shared, deadline: Option<Instant>) -> Result<(), Error> {
        let mut inner = lock(&shared.inner);
        loop {
            let now = Instant::now();
            if inner.core.known(now) {
                return Ok(());
            }
            if inner.done {
                return Err(inner.err.clone().unwrap_or(Error::Cancelled));
            }
            let left = match deadline {
                Some(d) if now >= d => {
                    let last = inner.last.clone().map(Box::new);
                    return Err(Error::Timeout {
                        name: self.name.clone(),
                        last,
                    });
                }
                Some(d) => d - now,
                None => Duration::from_secs(3600),
            };
            inner = wait(shared, inner, left);
        }
    }
}

fn wait<'a>(shared: &Shared, inner: MutexGuard<'a, Inner>, d: Duration) -> MutexGuard<'a, Inner> {
    let (inner, _) = shared
        .changed
        .wait_timeout(inner, d)
        .unwrap_or_else(PoisonError::into_inner);
    inner
}

impl Watch {
    /// The watched name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current picture. `known` is decided at the call: a watch whose
    /// server went silent reads unknown at its deadline even if nothing
    /// has run since.
    pub fn state(&self) -> WatchState {
        match &self.run {
            Run::Own { shared, .. } => lock(&shared.inner).core.state(Instant::now()),
            Run::Stream(stream) => stream.state(),
        }
    }

    /// The picture read as an election: the first holder is the leader.
    pub fn leader(&self) -> Observation {
        leader_of(&self.state(), Instant::now())
    }

    /// Waits for the next change of the picture (an event, a new
    /// acknowledgement, the end of its validity, a reconnect) since the
    /// last wait returned. False when the watch has ended.
    pub fn wait_change(&self) -> bool {
        loop {
            if self.wait_change_timeout(Duration::from_secs(3600)) {
                return true;
            }
            if self.is_ended() {
                return false;
            }
        }
    }

    /// Like [`Watch::wait_change`], waiting at most `timeout`: false when
    /// nothing changed in time, or the watch has ended.
    pub fn wait_change_timeout(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let shared = match &self.run {
            Run::Own { shared, .. } => shared,
            Run::Stream(stream) => return stream.wait_change(deadline),
        };
        let mut inner = lock(&shared.inner);
        loop {
            let seen = self.seen.load(Ordering::SeqCst);
            if inner.generation != seen {
                self.seen.store(inner.generation, Ordering::SeqCst);
                return true;
            }
            let now = Instant::now();
            if inner.done || now >= deadline {
                return false;
            }
            inner = wait(shared, inner, deadline - now);
        }
    }

    /// Whether the watch has ended: [`Watch::close`], or an error that
    /// retrying cannot cure ([`Watch::error`]).
    pub fn is_ended(&self) -> bool {
        match &self.run {
            Run::Own { shared, .. } => lock(&shared.inner).done,
            Run::Stream(stream) => stream.ended().is_some(),
        }
    }

    /// Why the watch ended (`None` while it runs, and after a close).
    pub fn error(&self) -> Option<Error> {
        match &self.run {
            Run::Own { shared, .. } => lock(&shared.inner).err.clone(),
            Run::Stream(stream) => stream.ended().filter(|e| !matches!(e, Error::Cancelled)),
        }
    }

    /// Ends the watch and its connection (a session's watch: its stream),
    /// and waits for its thread.
    pub fn close(mut self) {
        match &mut self.run {
            Run::Own { shared, thread } => {
                shared.close();
                if let Some(thread) = thread.take() {
                    let _ = thread.join();
                }
            }
            Run::Stream(stream) => stream.close(),
        }
    }
}

impl Drop for Watch {
    /// Ends the watch; its thread exits on its own.
    fn drop(&mut self) {
        match &self.run {
            Run::Own { shared, .. } => shared.close(),
            Run::Stream(stream) => stream.close(),
        }
    }
}

/// The watch's thread.
struct Runner {
    shared: Arc<Shared>,
    config: Arc<Config>,
    name: String,
}

impl Runner {
    /// Keeps a connection to a server that answers: a silent or lost one
    /// is retried with backoff, a passive server sends it to the active
    /// one, a terminal error ends the watch.
    fn run(self) {
        let servers = &self.config.servers;
        let mut redial = Redial::new();
        while !self.shared.is_closed() {
            let server = &servers[redial.server(servers.len())];
            let mut vouched = false;
            let err = self.connect(server, &mut vouched);
            *lock(&self.shared.conn) = None;
            let then = redial.after(&err, vouched, servers);
            let mut inner = lock(&self.shared.inner);
            inner.core.disconnected();
            self.shared.touch(&mut inner, true);
            if self.shared.is_closed() {
                break;
            }
            log_at!(
                debug,
                "watch {:?}: connection to {server} ended: {}",
                self.name,
                err.bare()
            );
            match then {
                Then::Stop => {
                    inner.err = Some(err);
                    break;
                }
                Then::Retry(delay) => {
                    inner.last = Some(err);
                    self.sleep(inner, delay);
                }
            }
        }
        let mut inner = lock(&self.shared.inner);
        inner.done = true;
        self.shared.touch(&mut inner, true);
    }

    /// Sleeps `delay`, or less when the watch is closed.
    fn sleep(&self, mut inner: MutexGuard<'_, Inner>, delay: Duration) {
        let until = Instant::now() + delay;
        while !self.shared.is_closed() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            inner = self
                .shared
                .changed
                .wait_timeout(inner, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Runs one connection until it fails or the watch is closed; sets
    /// `vouched` once the server answered a request on it.
    fn connect(&self, server: &ServerAddr, vouched: &mut bool) -> Error {
        let conn = match Conn::connect(&self.config, server, self.config.connect_timeout) {
            Ok(conn) => Arc::new(conn),
            Err(e) => return Error::io(e),
        };
        *lock(&self.shared.conn) = Some(Arc::clone(&conn));
        if self.shared.is_closed() {
            return Error::Cancelled;
        }
        let opened = {
            let mut inner = lock(&self.shared.inner);
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
        let res = conn
            .send(&frame)
            .map_err(Error::io)
            .and_then(|()| self.serve(server, &conn, &mut link));
        *vouched = link.vouched();
        match res {
            Ok(never) => match never {},
            Err(e) => e,
        }
    }

    /// Sends heartbeats on schedule and feeds what the server says to the
    /// core, until something ends the connection.
    fn serve(
        &self,
        server: &ServerAddr,
        conn: &Conn,
        link: &mut Link,
    ) -> Result<std::convert::Infallible, Error> {
        let mut buf = [0u8; 4096];
        loop {
            let now = Instant::now();
            let due = {
                let mut inner = lock(&self.shared.inner);
                let due = link.poll(&mut inner.core, now);
                self.shared.touch(&mut inner, false);
                due?
            };
            if let Some(bytes) = due.send {
                conn.send(bytes).map_err(Error::io)?;
            }
            let read = conn.read_within(&mut buf, wait_for(due.wake, now));
            if self.shared.is_closed() {
                return Err(Error::Cancelled);
            }
            let n = match read {
                Ok(Some(n)) => n,
                Ok(None) => continue,
                Err(e) => return Err(read_failed(server, e)),
            };
            let mut inner = lock(&self.shared.inner);
            let fed = link.feed(&mut inner.core, &buf[..n], Instant::now());
            self.shared.touch(&mut inner, true);
            fed?;
        }
    }
}

/// Follows the leadership of a name: an iterator of [`Observation`]s, one
/// per change (a new leader, a new value, no leader, a hold, unknown),
/// the first as soon as the watch is known. It ends when the watch does
/// ([`Observer::error`] says why). A slow reader misses nothing that still
/// holds: each item is the state at that moment.
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

    /// Why the watch ended, when the iterator did.
    pub fn error(&self) -> Option<Error> {
        self.watch.error()
    }
}

impl Iterator for Observer {
    type Item = Observation;

    fn next(&mut self) -> Option<Observation> {
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
            self.watch
                .wait_change_timeout(next_transition(&st, &o, now));
        }
    }
}

/// One leadership of a name: the lock the candidate was granted, with its
/// fencing token. It derefs to the [`LockGuard`]: watch its loss and stop
/// leading when it is lost. Dropping it resigns.
#[derive(Debug)]
pub struct Term {
    guard: LockGuard,
}

impl Term {
    pub(crate) fn new(guard: LockGuard) -> Term {
        Term { guard }
    }

    /// Ends the term: the next candidate is elected at once.
    pub fn resign(self) {
        self.guard.release();
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
