//! The blocking API: one thread per pending acquire, which then waits for
//! the held lock's loss. The threads are reused (see [`Threads`]).

use super::*;
use monolock::{CancelHandle, LockGuard};
use std::collections::VecDeque;
use std::sync::Condvar;

type Claim = super::Claim<CancelHandle, LockGuard>;
type Claims = super::Claims<CancelHandle, LockGuard>;

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
    command_loop(&out.clone(), |name, cmd| match name {
        "acquire" => acquire(&out, &claims, cmd),
        "release" => release(&out, &claims, cmd),
        _ => cancel(&out, &claims, cmd),
    });
    // Quit: release everything, cancel what is pending.
    let all: Vec<Claim> = lock(&claims).drain().map(|(_, c)| c).collect();
    for claim in all {
        if let Claim::Pending(cancel) = &claim {
            cancel.cancel();
        }
    }
}

fn acquire(out: &Out, claims: &Claims, cmd: &Value) {
    let Some(parsed) = start_acquire(out, claims, cmd) else {
        return;
    };
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

fn release(out: &Out, claims: &Claims, cmd: &Value) {
    let Some((id, guard)) = begin_release(out, claims, cmd) else {
        return;
    };
    if let Some(guard) = guard {
        guard.release();
    }
    end_release(out, claims, id);
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
