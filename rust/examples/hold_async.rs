//! Holds a lock for a while, with the tokio client.
//!
//! ```text
//! monolock serve &
//! cargo run --features tokio --example hold_async -- 127.0.0.1:7117 jobs/nightly 3
//! ```

use std::time::{Duration, Instant};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), monolock::Error> {
    let mut args = std::env::args().skip(1);
    let server = args
        .next()
        .unwrap_or_else(|| monolock::DEFAULT_SERVER.to_owned());
    let name = args.next().unwrap_or_else(|| "example".to_owned());
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2);

    let client = monolock::tokio::Client::builder()
        .server(server)
        .lease(Duration::from_secs(2))
        .on_waiting(|name| println!("waiting for {name}"))
        .build()?;
    let guard = client
        .acquire_timeout(&name, Duration::from_secs(30))
        .await?;
    println!("acquired {name} with token {}", guard.token());

    // Work until done, or until the lock is lost.
    tokio::select! {
        reason = guard.lost() => {
            eprintln!("{reason}");
            return Err(reason);
        }
        _ = tokio::time::sleep(Duration::from_secs(secs)) => {}
    }
    let left = guard
        .valid_until()
        .saturating_duration_since(Instant::now());
    println!("done, lock valid for another {left:?}");
    guard.release().await;
    println!("released {name}");
    Ok(())
}
