//! The protocol core shared by the blocking and the tokio client: the frame
//! codec, the heartbeat schedule, the per-connection state machine (which
//! makes every decision about a claim: validity, the loss and when it is
//! told, when to close), the retry plan, and the answers a lock guard gives
//! about its lock. Nothing in here does I/O; the two clients only move
//! bytes, wait for the instants the core names and do what it says.
//! spec/vectors/session.json and spec/vectors/retry.json run against it,
//! spec/vectors/streams.json against the session of streams (`mux`).

pub(crate) mod codec;
pub(crate) mod held;
pub(crate) mod mux;
pub(crate) mod retry;
pub(crate) mod schedule;
pub(crate) mod session;
pub(crate) mod session_codec;
pub(crate) mod step;
pub(crate) mod watch;
pub(crate) mod watch_codec;
