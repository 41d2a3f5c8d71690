//! The blocking API: one thread per pending acquire, which then waits for
//! the held lock's loss, one per proclaim in flight and one per observe.
//! The threads are reused (see [`Threads`]).

use super::*;
use monolock::{CancelHandle, LockGuard, Session, Watch};
use std::collections::VecDeque;
use std::sync::Condvar;

type Claim = super::Claim<CancelHandle, LockGuard>;
type Claims = super::Claims<CancelHandle, LockGuard>;
type Observes = Arc<Mutex<HashMap<String, Arc<Stop>>>>;

impl Guard for LockGuard {
    type Watch = monolock::LossWatch;
    fn token(&self) -> u64 {
        self.token()
    }
    fn valid_until(&self) -> Instant {
        self.valid_until()
    }
    fn watch(&self) -> Self::Watch {
        self.watch()
    }
}

pub fn run(out: Out) {
    out.emit(json!({"event": "ready", "client": "rust-blocking", "capabilities": capabilities()}));
    let claims: Claims = Arc::default();
    let observes: Observes = Arc::default();
    let sessions: Sessions = Arc::default();
    command_loop(&out.clone(), |name, cmd| match name {
        "acquire" => acquire(&out, &claims, &sessions, cmd),
        "release" => release(&out, &claims, &observes, &sessions, cmd),
        "proclaim" => proclaim(&out, &claims, cmd),
        "observe" => observe(&out, &claims, &observes, cmd),
        "session" => session(&out, &sessions, cmd),
        _ => cancel(&out, &claims, cmd),
    });
    for (_, entry) in lock(&sessions).drain() {
        if let Some(session) = entry.take() {
            sole(session).close();
        }
    }
    // Quit: stop the observes, release everything, cancel what is pending.
    for (_, stop) in lock(&observes).drain() {
        stop.stop();
    }
    let all: Vec<Claim> = lock(&claims).drain().map(|(_, c)| c).collect();
    for claim in all {
        if let Claim::Pending(cancel) = &claim {
            cancel.cancel();
        }
    }
}

/// `None` until the session opened (`Some(Some)`) or failed (`Some(None)`).
type Opened = Mutex<Option<Option<Arc<Session>>>>;

/// A `session` command's session, once it opened.
#[derive(Clone, Default)]
struct SessionEntry {
    opened: Arc<(Opened, Condvar)>,
    waiting: WaitingIds,
}

impl SessionEntry {
    /// Waits until the session opened (`Some`) or failed to (`None`).
    fn wait(&self) -> Option<Arc<Session>> {
        let (cell, changed) = &*self.opened;
        let mut cell = lock(cell);
        loop {
            if let Some(opened) = &*cell {
                return opened.clone();
            }
            cell = changed.wait(cell).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Takes the session out (to close it): later waits find none.
    fn take(&self) -> Option<Arc<Session>> {
        let session = self.wait();
        *lock(&self.opened.0) = Some(None);
        session
    }

    fn set(&self, opened: Option<Session>) {
        let (cell, changed) = &*self.opened;
        *lock(cell) = Some(opened.map(Arc::new));
        changed.notify_all();
    }
}

type Sessions = Arc<Mutex<HashMap<String, SessionEntry>>>;

fn session(out: &Out, sessions: &Sessions, cmd: &Value) {
    let parsed = match SessionCmd::parse(cmd) {
        Ok(p) => p,
        Err(e) => return out.driver_error(e),
    };
    if lock(sessions).contains_key(&parsed.id) {
        return out.driver_error(format!("id {} is already used", parsed.id));
    }
    let entry = SessionEntry::default();
    let builder = parsed.endpoint.configure(monolock::Client::builder());
    let client = builder.on_waiting(entry.waiting.hook(out)).build();
    lock(sessions).insert(parsed.id.clone(), entry.clone());
    let (out, id) = (out.clone(), parsed.id);
    THREADS.run(move || match client.and_then(|c| c.session()) {
        Ok(session) => {
            entry.set(Some(session));
            out.emit(json!({"event": "opened", "id": id}));
        }
        Err(err) => {
            entry.set(None);
            out.error(&id, &err);
        }
    });
}

/// An acquire on a session: the claim goes on its connection.
fn session_acquire(out: &Out, claims: &Claims, entry: SessionEntry, parsed: AcquireCmd) {
    let AcquireCmd {
        id,
        name,
        try_mode,
        claim,
        timeout,
        ..
    } = parsed;
    lock(claims).insert(id.clone(), Claim::Pending(CancelHandle::new()));
    let (out, claims) = (out.clone(), Arc::clone(claims));
    THREADS.run(move || {
        let Some(session) = entry.wait() else {
            record::<_, LockGuard>(&out, &claims, &id, Err(Error::Cancelled));
            return;
        };
        entry.waiting.add(&name, &id);
        let res = match (try_mode, timeout) {
            (true, _) => session.try_acquire(&name, claim),
            (false, Some(t)) => session.acquire_timeout(&name, claim, t),
            (false, None) => session.acquire(&name, claim),
        };
        entry.waiting.remove(&name, &id);
        drop(session);
        if let Some(watch) = record(&out, &claims, &id, res) {
            if let Some(lost) = watch.wait() {
                out.lost(&id, &lost);
            }
        }
    });
}

fn acquire(out: &Out, claims: &Claims, sessions: &Sessions, cmd: &Value) {
    let Some(parsed) = start_acquire(out, claims, cmd) else {
        return;
    };
    if let Some(sid) = cmd["session"].as_str() {
        let Some(entry) = lock(sessions).get(sid).cloned() else {
            return out.driver_error(format!("acquire {}: no session {sid}", parsed.id));
        };
        return session_acquire(out, claims, entry, parsed);
    }
    let client = match parsed.configure(monolock::Client::builder()).build() {
        Ok(client) => client,
        Err(err) => {
            record::<_, LockGuard>(out, claims, &parsed.id, Err(err));
            return;
        }
    };
    let AcquireCmd {
        id,
        name,
        try_mode,
        claim,
        timeout,
        ..
    } = parsed;
    let cancel = CancelHandle::new();
    lock(claims).insert(id.clone(), Claim::Pending(cancel.clone()));
    let (out, claims) = (out.clone(), Arc::clone(claims));
    THREADS.run(move || {
        let res = if try_mode {
            client.try_acquire_with(&name, claim)
        } else {
            client.acquire_cancellable_with(&name, timeout, &cancel, claim)
        };
        if let Some(watch) = record(&out, &claims, &id, res) {
            if let Some(lost) = watch.wait() {
                out.lost(&id, &lost);
            }
        }
    });
}

fn release(out: &Out, claims: &Claims, observes: &Observes, sessions: &Sessions, cmd: &Value) {
    let session = lock(sessions).remove(cmd["id"].as_str().unwrap_or_default());
    if let Some(entry) = session {
        // Closing releases what it holds, nothing told lost.
        if let Some(session) = entry.take() {
            sole(session).close();
        }
        out.emit(json!({"event": "released", "id": cmd["id"]}));
        return;
    }
    let observe = lock(observes).remove(cmd["id"].as_str().unwrap_or_default());
    if let Some(stop) = observe {
        stop.stop();
        out.emit(json!({"event": "released", "id": cmd["id"]}));
        return;
    }
    let Some((id, guard)) = begin_release(out, claims, cmd) else {
        return;
    };
    if let Some(guard) = guard {
        sole(guard).release();
    }
    end_release(out, claims, id);
}

/// The guard alone: a proclaim in flight shares it until the server
/// acknowledges or the lock is lost, and `release` (which takes the guard)
/// cannot run beside it, so the release waits for that.
fn sole<T>(mut guard: Arc<T>) -> T {
    loop {
        match Arc::try_unwrap(guard) {
            Ok(guard) => return guard,
            Err(shared) => guard = shared,
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn proclaim(out: &Out, claims: &Claims, cmd: &Value) {
    let Some((id, guard, value)) = start_proclaim(out, claims, cmd) else {
        return;
    };
    let out = out.clone();
    // proclaim blocks until the server acknowledges: off the command loop.
    THREADS.run(move || end_proclaim(&out, &id, guard.proclaim(value)));
}

/// An observe's stop: set by release or quit, checked under the same lock
/// as each event goes out, so that nothing follows the released event.
#[derive(Default)]
struct Stop(Mutex<bool>);

impl Stop {
    fn stop(&self) {
        *lock(&self.0) = true;
    }

    fn is_stopped(&self) -> bool {
        *lock(&self.0)
    }

    /// Runs `emit` unless stopped; false when stopped.
    fn tell(&self, emit: impl FnOnce()) -> bool {
        let stopped = lock(&self.0);
        if !*stopped {
            emit();
        }
        !*stopped
    }
}

fn observe(out: &Out, claims: &Claims, observes: &Observes, cmd: &Value) {
    let observing = |id: &str| lock(observes).contains_key(id);
    let Some(parsed) = start_observe(out, claims, observing, cmd) else {
        return;
    };
    let client = match parsed
        .endpoint
        .configure(monolock::Client::builder())
        .build()
    {
        Ok(client) => client,
        Err(err) => return out.error(&parsed.id, &err),
    };
    let stop = Arc::new(Stop::default());
    lock(observes).insert(parsed.id.clone(), Arc::clone(&stop));
    let out = out.clone();
    // watch returns once the first picture is known; a stop meanwhile is
    // seen after that.
    THREADS.run(move || match client.watch(&parsed.name) {
        Ok(watch) => follow(&out, &parsed.id, watch, &stop),
        Err(err) => {
            stop.tell(|| out.error(&parsed.id, &err));
        }
    });
}

/// Reports each change of the leadership until the observe is stopped or
/// the watch ends (then with its error, if any). The crate's Observer
/// cannot be stopped from another thread (it owns its watch and waits
/// inside `next` until the leadership changes), so this reads the watch
/// itself, waking every `TICK` at least to see a stop, and the end of the
/// picture's validity, which no event marks.
fn follow(out: &Out, id: &str, watch: Watch, stop: &Stop) {
    const TICK: Duration = Duration::from_millis(20);
    let mut changes = Changes::new(id);
    while !stop.is_stopped() {
        if let Some(event) = changes.news(&watch.leader()) {
            if !stop.tell(|| out.emit(event)) {
                break;
            }
        }
        if watch.is_ended() {
            if let Some(err) = watch.error() {
                stop.tell(|| out.error(id, &err));
            }
            break;
        }
        watch.wait_change_timeout(TICK);
    }
    watch.close();
}

fn cancel(out: &Out, claims: &Claims, cmd: &Value) {
    let id = cmd["id"].as_str().unwrap_or_default();
    match lock(claims).get(id) {
        Some(Claim::Pending(cancel)) => cancel.cancel(),
        _ => eprintln!("rust-blocking driver: cancel: nothing pending for id {id}"),
    }
    let _ = out;
}

type Job = Box<dyn FnOnce() + Send>;

/// The claims' threads: one that finished its claim waits a while for the
/// next one instead of exiting, so that a stream of short claims does not
/// start a thread each (that would measure thread starts, not the client).
struct Threads {
    state: Mutex<(VecDeque<Job>, usize)>, // jobs queued, threads idle
    work: Condvar,
}

static THREADS: Threads = Threads {
    state: Mutex::new((VecDeque::new(), 0)),
    work: Condvar::new(),
};

impl Threads {
    fn run(&'static self, job: impl FnOnce() + Send + 'static) {
        let job: Job = Box::new(job);
        let mut state = lock(&self.state);
        if state.1 > 0 {
            state.1 -= 1;
            state.0.push_back(job);
            drop(state);
            self.work.notify_one();
        } else {
            drop(state);
            std::thread::spawn(move || self.work(job));
        }
    }

    fn work(&self, mut job: Job) {
        const IDLE: Duration = Duration::from_secs(5);
        loop {
            job();
            let mut state = lock(&self.state);
            state.1 += 1;
            job = loop {
                if let Some(next) = state.0.pop_front() {
                    break next;
                }
                let (next, waited) = self
                    .work
                    .wait_timeout(state, IDLE)
                    .unwrap_or_else(PoisonError::into_inner);
                state = next;
                if waited.timed_out() && state.0.is_empty() {
                    state.1 -= 1;
                    return;
                }
            };
        }
    }
}
