//! The tokio API: a current-thread runtime, one task per pending acquire
//! and per held lock's loss watcher, per proclaim in flight and per
//! observe. Cancel drops the acquire future, a stop the observe's.

use super::*;
use monolock::tokio::{LockGuard, Observer, Session};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

type Claim = super::Claim<oneshot::Sender<()>, LockGuard>;
type Claims = super::Claims<oneshot::Sender<()>, LockGuard>;
/// An observe's stop and its task.
type Observes = HashMap<String, (oneshot::Sender<()>, JoinHandle<()>)>;

impl Guard for LockGuard {
    type Watch = monolock::tokio::LossWatch;
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // stdin is read on a plain thread and fed to the runtime.
    let (tx, mut rx) = mpsc::unbounded_channel::<(String, Value)>();
    let reader_out = out.clone();
    std::thread::spawn(move || {
        command_loop(&reader_out, |name, cmd| {
            let _ = tx.send((name.to_owned(), cmd.clone()));
        });
        // Dropping tx ends the receive loop: quit.
    });
    rt.block_on(async move {
        out.emit(json!({"event": "ready", "client": "rust-tokio", "capabilities": capabilities()}));
        let claims: Claims = Arc::default();
        let mut observes = Observes::new();
        let mut sessions = Sessions::new();
        while let Some((name, cmd)) = rx.recv().await {
            match name.as_str() {
                "acquire" => acquire(&out, &claims, &sessions, &cmd),
                "release" => release(&out, &claims, &mut observes, &mut sessions, &cmd).await,
                "proclaim" => proclaim(&out, &claims, &cmd),
                "observe" => observe(&out, &claims, &mut observes, &cmd),
                "session" => session(&out, &mut sessions, &cmd),
                _ => cancel(&claims, &cmd),
            }
        }
        for (_, entry) in sessions.drain() {
            if let Some(session) = entry.take().await {
                sole(session).await.close().await;
            }
        }
        for (_, observe) in observes.drain() {
            stop(observe).await;
        }
        let all: Vec<Claim> = lock(&claims).drain().map(|(_, c)| c).collect();
        for claim in all {
            if let Claim::Held(guard) = claim {
                sole(guard).await.release().await;
            }
        }
    });
}

/// A `session` command's session, once it opened (`settled` turns true
/// when it opened or failed to).
#[derive(Clone)]
struct SessionEntry {
    settled: tokio::sync::watch::Receiver<bool>,
    session: Arc<Mutex<Option<Arc<Session>>>>,
    waiting: WaitingIds,
}

impl SessionEntry {
    async fn wait(&self) -> Option<Arc<Session>> {
        let mut settled = self.settled.clone();
        let _ = settled.wait_for(|s| *s).await;
        lock(&self.session).clone()
    }

    /// Takes the session out (to close it): later waits find none.
    async fn take(&self) -> Option<Arc<Session>> {
        let session = self.wait().await;
        lock(&self.session).take();
        session
    }
}

type Sessions = HashMap<String, SessionEntry>;

fn session(out: &Out, sessions: &mut Sessions, cmd: &Value) {
    let parsed = match SessionCmd::parse(cmd) {
        Ok(p) => p,
        Err(e) => return out.driver_error(e),
    };
    if sessions.contains_key(&parsed.id) {
        return out.driver_error(format!("id {} is already used", parsed.id));
    }
    let (tx, rx) = tokio::sync::watch::channel(false);
    let waiting = WaitingIds::default();
    let builder = parsed
        .endpoint
        .configure(monolock::tokio::Client::builder());
    let client = builder.on_waiting(waiting.hook(out)).build();
    let entry = SessionEntry {
        settled: rx,
        session: Arc::default(),
        waiting,
    };
    let cell = Arc::clone(&entry.session);
    sessions.insert(parsed.id.clone(), entry);
    let (out, id) = (out.clone(), parsed.id);
    tokio::spawn(async move {
        let opened = match client {
            Ok(client) => client.session().await,
            Err(err) => Err(err),
        };
        match opened {
            Ok(session) => {
                *lock(&cell) = Some(Arc::new(session));
                let _ = tx.send(true);
                out.emit(json!({"event": "opened", "id": id}));
            }
            Err(err) => {
                let _ = tx.send(true);
                out.error(&id, &err);
            }
        }
    });
}

/// An acquire on a session: the claim goes on its connection. Cancel
/// drops the acquire future, which sends RELEASE for its stream.
fn session_acquire(out: &Out, claims: &Claims, entry: SessionEntry, parsed: AcquireCmd) {
    let AcquireCmd {
        id,
        name,
        try_mode,
        claim,
        timeout,
        ..
    } = parsed;
    let (cancel_tx, cancel_rx) = oneshot::channel();
    lock(claims).insert(id.clone(), Claim::Pending(cancel_tx));
    let (out, claims) = (out.clone(), Arc::clone(claims));
    tokio::spawn(async move {
        let Some(session) = entry.wait().await else {
            record::<_, LockGuard>(&out, &claims, &id, Err(Error::Cancelled));
            return;
        };
        entry.waiting.add(&name, &id);
        let attempt = async {
            match (try_mode, timeout) {
                (true, _) => session.try_acquire(&name, claim).await,
                (false, Some(t)) => session.acquire_timeout(&name, claim, t).await,
                (false, None) => session.acquire(&name, claim).await,
            }
        };
        let res = tokio::select! {
            res = attempt => res,
            _ = cancel_rx => Err(Error::Cancelled),
        };
        entry.waiting.remove(&name, &id);
        drop(session);
        if let Some(mut watch) = record(&out, &claims, &id, res) {
            if let Some(lost) = watch.wait().await {
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
        let Some(entry) = sessions.get(sid).cloned() else {
            return out.driver_error(format!("acquire {}: no session {sid}", parsed.id));
        };
        return session_acquire(out, claims, entry, parsed);
    }
    let client = match parsed.configure(monolock::tokio::Client::builder()).build() {
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
    let (cancel_tx, cancel_rx) = oneshot::channel();
    lock(claims).insert(id.clone(), Claim::Pending(cancel_tx));
    let (out, claims) = (out.clone(), Arc::clone(claims));
    tokio::spawn(async move {
        let attempt = async {
            match (try_mode, timeout) {
                (true, _) => client.try_acquire_with(&name, claim).await,
                (false, Some(t)) => client.acquire_timeout_with(&name, t, claim).await,
                (false, None) => client.acquire_with(&name, claim).await,
            }
        };
        // Cancel = drop the acquire future, which closes its connection.
        let res = tokio::select! {
            res = attempt => res,
            _ = cancel_rx => Err(Error::Cancelled),
        };
        // `record` takes the claims lock and lets go before any await.
        if let Some(mut watch) = record(&out, &claims, &id, res) {
            if let Some(lost) = watch.wait().await {
                out.lost(&id, &lost);
            }
        }
    });
}

async fn release(
    out: &Out,
    claims: &Claims,
    observes: &mut Observes,
    sessions: &mut Sessions,
    cmd: &Value,
) {
    if let Some(entry) = sessions.remove(cmd["id"].as_str().unwrap_or_default()) {
        // Closing releases what it holds, nothing told lost.
        if let Some(session) = entry.take().await {
            sole(session).await.close().await;
        }
        out.emit(json!({"event": "released", "id": cmd["id"]}));
        return;
    }
    if let Some(observe) = observes.remove(cmd["id"].as_str().unwrap_or_default()) {
        stop(observe).await;
        out.emit(json!({"event": "released", "id": cmd["id"]}));
        return;
    }
    let Some((id, guard)) = begin_release(out, claims, cmd) else {
        return;
    };
    if let Some(guard) = guard {
        sole(guard).await.release().await;
    }
    end_release(out, claims, id);
}

/// The guard alone: a proclaim in flight shares it until the server
/// acknowledges or the lock is lost, and `release` (which takes the guard)
/// cannot run beside it, so the release waits for that.
async fn sole<T>(mut guard: Arc<T>) -> T {
    loop {
        match Arc::try_unwrap(guard) {
            Ok(guard) => return guard,
            Err(shared) => guard = shared,
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn proclaim(out: &Out, claims: &Claims, cmd: &Value) {
    let Some((id, guard, value)) = start_proclaim(out, claims, cmd) else {
        return;
    };
    let out = out.clone();
    tokio::spawn(async move { end_proclaim(&out, &id, guard.proclaim(value).await) });
}

fn observe(out: &Out, claims: &Claims, observes: &mut Observes, cmd: &Value) {
    let observing = |id: &str| observes.contains_key(id);
    let Some(parsed) = start_observe(out, claims, observing, cmd) else {
        return;
    };
    let client = match parsed
        .endpoint
        .configure(monolock::tokio::Client::builder())
        .build()
    {
        Ok(client) => client,
        Err(err) => return out.error(&parsed.id, &err),
    };
    let (stop_tx, stop_rx) = oneshot::channel();
    let (out, id) = (out.clone(), parsed.id.clone());
    let task = tokio::spawn(async move {
        let follow = async {
            match client.observe(&parsed.name).await {
                Ok(observer) => follow(&out, &id, observer).await,
                Err(err) => out.error(&id, &err),
            }
        };
        // The stop first: once it is sent, no event of this observe goes
        // out, even one that is ready in the same poll.
        tokio::select! {
            biased;
            _ = stop_rx => {}
            () = follow => {}
        }
    });
    observes.insert(parsed.id, (stop_tx, task));
}

/// Reports each change of the leadership until the watch ends (then with
/// its error, if any).
async fn follow(out: &Out, id: &str, mut observer: Observer) {
    let mut changes = Changes::new(id);
    while let Some(o) = observer.next().await {
        if let Some(event) = changes.news(&o) {
            out.emit(event);
        }
    }
    if let Some(err) = observer.error() {
        out.error(id, &err);
    }
}

/// Stops an observe and waits until its task is gone, the observer (and so
/// its watch) dropped with it.
async fn stop((stop, task): (oneshot::Sender<()>, JoinHandle<()>)) {
    let _ = stop.send(());
    let _ = task.await;
}

fn cancel(claims: &Claims, cmd: &Value) {
    let id = cmd["id"].as_str().unwrap_or_default();
    let claim = lock(claims).remove(id);
    match claim {
        Some(Claim::Pending(cancel)) => {
            let _ = cancel.send(());
            // The acquire task records the outcome.
        }
        Some(other) => {
            lock(claims).insert(id.to_owned(), other);
            eprintln!("rust-tokio driver: cancel: nothing pending for id {id}");
        }
        None => eprintln!("rust-tokio driver: cancel: unknown id {id}"),
    }
}
