//! The protocol core shared by the blocking and the tokio client: the frame
//! codec, the heartbeat schedule, the per-connection state machine, the
//! retry plan, and the answers a lock guard gives about its lock. Nothing
//! in here does I/O; the two clients only move bytes and wait for the
//! instants the core names.

pub(crate) mod codec;
pub(crate) mod held;
pub(crate) mod retry;
pub(crate) mod schedule;
pub(crate) mod session;
pub(crate) mod step;
