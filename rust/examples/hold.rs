//! Holds a lock for a while, with the blocking client.
//!
//! ```text
//! monolock serve &
//! cargo run --example hold -- 127.0.0.1:7117 jobs/nightly 3
//! ```

use std::time::{Duration, Instant};

fn main() -> Result<(), monolock::Error> {
    let mut args = std::env::args().skip(1);
    let server = args
        .next()
        .unwrap_or_else(|| monolock::DEFAULT_SERVER.to_owned());
    let name = args.next().unwrap_or_else(|| "example".to_owned());
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2);

    let client = monolock::Client::builder()
        .server(server)
        .lease(Duration::from_secs(2))
        .on_waiting(|name| println!("waiting for {name}"))
        .build()?;
    let guard = client.acquire_timeout(&name, Duration::from_secs(30))?;
    println!("acquired {name} with token {}", guard.token());

    // Work until done, or until the lock is lost.
    let done = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < done {
        if let Some(reason) = guard.wait_lost_timeout(Duration::from_millis(500)) {
            eprintln!("{reason}");
            return Err(reason);
        }
        let left = guard
            .valid_until()
            .saturating_duration_since(Instant::now());
        println!("still holding, valid for another {left:?}");
    }
    guard.release();
    println!("released {name}");
    Ok(())
}
