//! One stream of a session: a claim, where it stands, and how the frames
//! of its stream move it.

use std::time::Instant;

use crate::claim::Claim;
use crate::core::retry::Mode;
use crate::core::session::HoldState;
use crate::core::session_codec::encode_release;
use crate::core::watch::Core;
use crate::error::Error;

/// Where one claim of the session stands, as its handle sees it.
#[derive(Debug, Clone)]
pub(crate) enum StreamState {
    /// OPEN sent, no answer yet.
    Opening,
    /// Queued behind the holders (STREAM(WAITING)).
    Waiting,
    /// Granted with `token`, valid until `valid_until`.
    Held { token: u64, valid_until: Instant },
    /// Held, then lost: [`Error::Lost`] with the cause.
    Lost(Error),
    /// Never granted: the error says why (busy, a refusal, the session's end).
    Failed(Error),
    /// A watch whose first WATCHING came: its picture is in the stream.
    Watching,
    /// Released by the application; `acked` once nothing more is owed
    /// (RELEASED arrived, or the session ended).
    Released { acked: bool },
}

impl StreamState {
    /// The state in the words of a lock guard; `newly` when the poll that
    /// returned it decided the loss.
    pub(crate) fn hold(self, newly: bool) -> HoldState {
        match self {
            StreamState::Held { valid_until, .. } => HoldState::Held { valid_until },
            StreamState::Lost(loss) => HoldState::Lost { loss, newly },
            // Only a granted claim has a guard: this is never asked.
            StreamState::Failed(err) => HoldState::Lost {
                loss: Error::Lost(Box::new(err)),
                newly,
            },
            StreamState::Opening
            | StreamState::Waiting
            | StreamState::Watching
            | StreamState::Released { .. } => HoldState::Ended,
        }
    }
}

#[derive(Debug)]
pub(super) struct Stream {
    pub(super) name: String,
    pub(super) claim: Claim,
    pub(super) mode: Mode,
    pub(super) state: StreamState,
    /// ONs sent and answered: each gets exactly one STREAM reply.
    pub(super) ons_sent: u64,
    pub(super) ons_acked: u64,
    /// A RELEASE of this stream went and its RELEASED has not come (nor
    /// the session's end).
    pub(super) unreleased: bool,
    /// A watch stream's picture (the watch core of a single watch).
    pub(super) watch: Option<Box<Core>>,
    /// Counts the changes of a watch's picture and validity.
    pub(super) generation: u64,
}

impl Stream {
    /// A watch stream ends (its picture is vouched for by nothing more):
    /// with `state`, and its watchers look again.
    pub(super) fn end_watch(&mut self, state: StreamState) {
        if let Some(core) = &mut self.watch {
            core.disconnected();
            self.generation += 1;
            self.state = state;
        }
    }

    /// STREAM(WAITING): the answer to OPEN (queued; a try-acquire is busy
    /// and lets go of its place), or the answer to an ON while queued.
    pub(super) fn on_waiting(&mut self, id: u32, out: &mut Vec<u8>) -> Result<(), String> {
        match self.state {
            StreamState::Opening if self.mode == Mode::Try => {
                out.extend(encode_release(id));
                self.unreleased = true;
                self.state = StreamState::Failed(Error::Busy {
                    name: self.name.clone(),
                    shared: self.claim.is_shared(),
                    limit: self.claim.limit(),
                });
                Ok(())
            }
            StreamState::Opening => {
                self.state = StreamState::Waiting;
                Ok(())
            }
            StreamState::Waiting => self.ack_on(id),
            StreamState::Held { .. } => Err(format!("stream {id}: WAITING after the grant")),
            _ => Ok(()),
        }
    }

    /// One STREAM reply to an ON of this stream.
    pub(super) fn ack_on(&mut self, id: u32) -> Result<(), String> {
        if self.ons_acked >= self.ons_sent {
            return Err(format!("stream {id}: a reply without a request"));
        }
        self.ons_acked += 1;
        Ok(())
    }

    /// A claim refused before its grant: a server's 0x10 to a shared claim
    /// or one with a value says which feature it lacks, as for a single claim.
    pub(super) fn refusal(&self, err: Error, server: &str) -> Error {
        if self.claim.value().is_some() {
            err.for_value_claim(server)
        } else if self.claim.is_shared() {
            err.for_shared_claim(server)
        } else {
            err
        }
    }
}

/// The error of a claim that ended without a loss: released.
pub(super) fn released() -> Error {
    Error::Lost(Box::new(Error::Cancelled))
}
