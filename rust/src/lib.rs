//! Client for [monolock], a lock service: named locks held over one TCP
//! connection each, with a fencing token on every grant.
//!
//! - [`Client`] is the blocking client, on `std::net`, with no dependencies.
//! - [`tokio::Client`] (feature `tokio`) is the async client; its acquire
//!   futures are cancellation-safe: dropping one closes its connection.
//! - [`Client::session`] (and its tokio twin) opens a [`Session`]: many
//!   claims on one connection, one lease and one heartbeat, at the price
//!   of a shared fate (one lost connection loses them all); a
//!   [`SessionPool`] spreads claims over a few sessions.
//! - The feature `tls` connects with TLS (rustls), for both clients; see
//!   [`tls`].
//! - The feature `log` logs retries (at `warn`) and failed attempts (at
//!   `debug`) through the [`log`](https://docs.rs/log) crate, under the
//!   target `monolock`.
//!
//! Both clients share one sans-IO protocol core (frame codec, heartbeat
//! schedule, reply accounting, the validity deadline and the loss, the
//! retry policy, validation); they only differ in how they read, write and
//! wait.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! let client = monolock::Client::builder()
//!     .server("127.0.0.1:7117")
//!     .lease(Duration::from_secs(5))
//!     .build()?;
//! let guard = client.acquire_timeout("jobs/nightly-report", Duration::from_secs(60))?;
//! println!("token {} valid for {:?}", guard.token(),
//!     guard.valid_until().saturating_duration_since(std::time::Instant::now()));
//! drop(guard); // releases the lock
//! # Ok::<(), monolock::Error>(())
//! ```
//!
//! # Holding a lock
//!
//! A held lock is kept alive by heartbeats every quarter of the lease. It is
//! safe to use until [`LockGuard::valid_until`]: the send time of the last
//! acknowledged message plus 0.8 of the lease, so the client always gives
//! up before the server does. When that passes, or the server ends the
//! session, the lock is *lost*, and that is told first: every polled check
//! ([`LockGuard::check`], [`LockGuard::is_lost`]) and every push signal
//! ([`LockGuard::wait_lost`], [`LossWatch::wait`]) says so from that
//! instant on. After a timeout the connection is kept open, without
//! heartbeats, until the guard is released (then it closes at once) or a
//! full lease has passed since the last acknowledged send, so that the
//! server cannot hand the lock to anyone before this client knew it lost
//! it. The client never re-acquires a lost lock silently; a new acquire
//! gets a new token.
//!
//! # Errors
//!
//! [`Error`] has one variant per wire error code, plus client conditions.
//! The code ([`Error::code`]) is the contract, and [`Error::is_temporary`]
//! tells whether a retry may help (`code < 0x10`, also for codes this
//! version does not know). While waiting, the client itself retries
//! temporary errors with backoff until the caller's deadline; when the
//! deadline passes, [`Error::Timeout`] keeps the last attempt's failure as
//! its source.
//!
//! [monolock]: https://github.com/monolock/monolock

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Links to the tokio client and the tls module only resolve when they are
// compiled in.
#![cfg_attr(
    not(all(feature = "tokio", feature = "tls")),
    allow(rustdoc::broken_intra_doc_links)
)]

#[macro_use]
mod logging;

mod addr;
mod blocking;
#[cfg(feature = "tls")]
mod certificate;
mod claim;
mod config;
mod constants_gen;
mod core;
mod error;
mod error_gen;
mod pool_pick;
#[cfg(test)]
mod spec;
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub mod tls;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio;
mod watch;

pub use addr::DEFAULT_PORT;
pub use blocking::{
    CancelHandle, Client, LockGuard, LossWatch, Observer, Session, SessionPool, Term, Watch,
};
pub use claim::Claim;
pub use config::{ClientBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_LEASE, DEFAULT_SERVER};
pub use error::{Error, Origin, Reason};
pub use watch::{Holder, LeaderState, Observation, Waiter, WatchState};

// README.md is not included as doc-tests: its examples are whole programs
// with their own dependency lines, which scripts/readme.sh builds and runs
// in a fresh project.

/// The `Result` of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
