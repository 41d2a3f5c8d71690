//! What kind of claim an acquire makes: exclusive (the default), shared,
//! or shared with a bound on the holders (a semaphore), with or without a
//! value.

use crate::constants_gen as spec;

/// The longest value of a claim, in bytes: a protocol constant.
pub(crate) const MAX_VALUE_LEN: usize = spec::VALUE_MAX_VALUE_LEN as usize;

/// The kind of claim an acquire makes on a lock: pass it to
/// [`Client::acquire_with`](crate::Client::acquire_with) and its siblings
/// (blocking and tokio alike). The plain `acquire` methods make an
/// [`exclusive`](Claim::exclusive) claim.
///
/// A shared claim holds the lock together with any other shared claims,
/// and never while an exclusive claim holds it: readers and a writer.
/// Claims are granted strictly in arrival order, so a shared claim queued
/// behind a waiting exclusive one waits for it: a stream of readers never
/// starves a writer. Every holder gets its own fencing token and is told
/// of a loss exactly as an exclusive holder is.
///
/// A [`semaphore`](Claim::semaphore) of `n` permits is a shared claim of
/// which at most `n` hold the lock at once. Every claimant of one name must
/// state the same `n` while any shared claim is on it; the server refuses a
/// different one with [`Error::LimitMismatch`](crate::Error::LimitMismatch)
/// (0x1a).
///
/// Shared claims are sent as protocol version 2; a server that speaks
/// version 1 only refuses them with
/// [`Error::SharedUnsupported`](crate::Error::SharedUnsupported).
/// Exclusive claims are sent as version 1, which every server reads.
///
/// Any claim can carry a value ([`with_value`](Claim::with_value)): who
/// holds the lock and how to reach it (an address, a URL, a small JSON
/// object), up to 1024 bytes, which the server keeps with the claim while
/// it waits and while it holds. A claim with a value is sent as protocol
/// version 3; a server that predates values refuses it with
/// [`Error::ValueUnsupported`](crate::Error::ValueUnsupported).
///
/// ```no_run
/// use monolock::Claim;
///
/// let client = monolock::Client::builder().build()?;
/// let reader = client.acquire_with("db/schema", Claim::shared())?;
/// let permit = client.try_acquire_with("pool/gpu", Claim::semaphore(4))?;
/// let leader = Claim::exclusive().with_value("10.0.0.7:8080");
/// let leader = client.acquire_with("service/leader", leader)?;
/// # Ok::<(), monolock::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Claim {
    kind: Kind,
    /// The value, never empty: an empty value is none.
    value: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) enum Kind {
    /// Alone: the default, a version 1 ACQUIRE.
    #[default]
    Exclusive,
    /// Beside other shared claims; `limit` holders at most, when given
    /// (checked before sending: 1 to 65535).
    Shared { limit: Option<u32> },
}

impl Claim {
    /// An exclusive claim: the lock is held by this claim alone. The
    /// default, what the plain `acquire` methods make.
    pub const fn exclusive() -> Claim {
        Claim {
            kind: Kind::Exclusive,
            value: None,
        }
    }

    /// A shared claim with no bound on the number of shared holders.
    pub const fn shared() -> Claim {
        Claim {
            kind: Kind::Shared { limit: None },
            value: None,
        }
    }

    /// A shared claim of which at most `permits` hold the lock at once: a
    /// semaphore. `permits` must be from 1 to 65535; the acquire refuses
    /// anything else before sending, with [`Error::InvalidMode`](crate::Error::InvalidMode)
    /// (0x19, [`Origin::Client`](crate::Origin::Client)).
    pub const fn semaphore(permits: u32) -> Claim {
        Claim {
            kind: Kind::Shared {
                limit: Some(permits),
            },
            value: None,
        }
    }

    /// This claim with a value: opaque bytes that say who holds the lock
    /// and how to reach it (an address, a URL, a small JSON object). The
    /// server keeps it with the claim while it waits and while it holds,
    /// and its admin listing shows it. An empty value is no value, and
    /// replaces one given before.
    ///
    /// A value is at most 1024 bytes; the acquire refuses a longer one
    /// before sending, with [`Error::ValueTooLong`](crate::Error::ValueTooLong)
    /// (0x1b, [`Origin::Client`](crate::Origin::Client)), after the checks
    /// of the lease, the limit and the name.
    ///
    /// A claim with a value is sent as a protocol version 3 ACQUIRE (one
    /// without keeps version 1 or 2); a server that predates values
    /// answers it with 0x10, and the acquire fails at once with
    /// [`Error::ValueUnsupported`](crate::Error::ValueUnsupported).
    ///
    /// The holder replaces its value with `LockGuard::proclaim`, which only
    /// a claim with a value can do.
    pub fn with_value(mut self, value: impl Into<Vec<u8>>) -> Claim {
        let value = value.into();
        self.value = if value.is_empty() { None } else { Some(value) };
        self
    }

    /// Whether the claim is shared (a semaphore is).
    pub const fn is_shared(&self) -> bool {
        matches!(self.kind, Kind::Shared { .. })
    }

    /// The semaphore's number of permits, `None` for an exclusive claim
    /// and for a shared one without a bound.
    pub const fn limit(&self) -> Option<u32> {
        match self.kind {
            Kind::Shared { limit } => limit,
            Kind::Exclusive => None,
        }
    }

    /// The claim's value, `None` when it has none (never empty).
    pub fn value(&self) -> Option<&[u8]> {
        self.value.as_deref()
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }
}
