//! The tokio API: a current-thread runtime, one task per pending acquire
//! and per held lock's loss watcher. Cancel drops the acquire future.

use super::*;
use monolock::tokio::LockGuard;
use tokio::sync::{mpsc, oneshot};

type Claim = super::Claim<oneshot::Sender<()>, LockGuard>;
type Claims = super::Claims<oneshot::Sender<()>, LockGuard>;

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
        while let Some((name, cmd)) = rx.recv().await {
            match name.as_str() {
                "acquire" => acquire(&out, &claims, &cmd),
                "release" => release(&out, &claims, &cmd).await,
                _ => cancel(&claims, &cmd),
            }
        }
        let all: Vec<Claim> = lock(&claims).drain().map(|(_, c)| c).collect();
        for claim in all {
            if let Claim::Held(guard) = claim {
                guard.release().await;
            }
        }
    });
}

fn acquire(out: &Out, claims: &Claims, cmd: &Value) {
    let Some(parsed) = start_acquire(out, claims, cmd) else {
        return;
    };
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

async fn release(out: &Out, claims: &Claims, cmd: &Value) {
    let Some((id, guard)) = begin_release(out, claims, cmd) else {
        return;
    };
    if let Some(guard) = guard {
        guard.release().await;
    }
    end_release(out, claims, id);
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
