//! The blocking API: one thread per pending acquire and per held lock's
//! loss watcher.

use super::*;
use monolock::{CancelHandle, LockGuard};

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
        timeout,
        ..
    } = parsed;
    let cancel = CancelHandle::new();
    lock(claims).insert(id.clone(), Claim::Pending(cancel.clone()));
    let (out, claims) = (out.clone(), Arc::clone(claims));
    std::thread::spawn(move || {
        let res = if try_mode {
            client.try_acquire(&name)
        } else {
            client.acquire_cancellable(&name, timeout, &cancel)
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
