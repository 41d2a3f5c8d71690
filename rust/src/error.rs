//! The one error type of the crate.
//!
//! Every ERROR code of the wire protocol has its own variant, so a caller can
//! `match` on the condition; the code itself stays available through
//! [`Error::code`], and the retry class through [`Error::is_temporary`].

use std::fmt;
use std::io;
use std::sync::Arc;

pub(crate) use crate::constants_gen::FIRST_TERMINAL_CODE;
use crate::error_gen::with_codes;
/// The wire codes of `spec/errors.json` under the spec's names, and their
/// canonical texts: generated (error_gen.rs), the only place that spells them.
pub(crate) use crate::error_gen::{code, CANONICAL};

/// Where a wire-coded error was detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// The server sent an ERROR frame with this code.
    Server,
    /// The client refused the request before sending a byte, with the code
    /// the server would have answered.
    Client,
}

/// The details of an error that has a wire code: the human-readable reason
/// and who detected it.
///
/// The reason is for people; branch on [`Error::code`] or on the variant,
/// never on the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    text: String,
    origin: Origin,
}

impl Reason {
    pub(crate) fn server(text: impl Into<String>) -> Reason {
        Reason {
            text: text.into(),
            origin: Origin::Server,
        }
    }

    pub(crate) fn client(text: impl Into<String>) -> Reason {
        Reason {
            text: text.into(),
            origin: Origin::Client,
        }
    }

    /// The reason text: what the server sent (possibly empty), or, when
    /// the client refused the request, what is wrong with it.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Who detected the condition.
    pub fn origin(&self) -> Origin {
        self.origin
    }
}

/// Defines [`Error`] with one variant per code of `spec/errors.json` (the
/// list is generated: error_gen.rs's `with_codes`) and the functions that
/// map codes to variants and back, so that a new code in the spec is a new
/// variant everywhere at once.
macro_rules! define_error {
    ($($(#[doc = $doc:literal])* $variant:ident = $code:ident,)*) => {
        /// Everything that can go wrong when acquiring or holding a lock.
        ///
        /// The first group of variants maps one-to-one to the wire protocol's ERROR
        /// codes ([`Error::code`] returns it). [`Error::UnknownCode`] covers codes
        /// this version does not know yet; they are classified by range like all
        /// others. The rest are client-side conditions without a code.
        ///
        /// ```
        /// use monolock::Error;
        ///
        /// let err = Error::from_code(0x01, "server shutting down");
        /// assert!(matches!(err, Error::ShuttingDown(_)));
        /// assert_eq!(err.code(), Some(0x01));
        /// assert!(err.is_temporary());
        ///
        /// // Codes from a newer server are classified by range.
        /// assert!(Error::from_code(0x09, "").is_temporary());
        /// assert!(!Error::from_code(0x7e, "future").is_temporary());
        /// ```
        #[derive(Debug, Clone)]
        #[non_exhaustive]
        pub enum Error {
            $($(#[doc = $doc])* $variant(Reason),)*
            /// An ERROR code this version of the protocol does not know.
            UnknownCode {
                /// The wire code.
                code: u8,
                /// What the server said about it.
                reason: Reason,
            },
            /// Try-acquire found no room for its claim on the lock: it is held
            /// by someone else, or its permits are taken. The message says
            /// which, in the words of every client
            /// (spec/vectors/messages.json, busy): `monolock: lock
            /// "jobs/nightly" is held by another session`, `monolock: all 4
            /// permits of "pool/gpu" are taken`.
            Busy {
                /// The lock that was tried.
                name: String,
                /// Whether the claim was shared ([`Claim::is_shared`](crate::Claim::is_shared)).
                shared: bool,
                /// The claim's number of permits ([`Claim::limit`](crate::Claim::limit)).
                limit: Option<u32>,
            },
            /// The caller's deadline passed while acquiring.
            ///
            /// When the deadline passed after an attempt had failed (a server that
            /// is down, a refused connection, a TLS handshake cut short), that last
            /// failure is kept here and is also the error's
            /// [`source`](std::error::Error::source). It is `None` when the last
            /// attempt was still in the server's queue: the lock stayed busy.
            /// The message names the lock, in the words of every client
            /// (spec/vectors/messages.json): `monolock: timed out waiting for
            /// the lock "jobs/nightly" (last attempt: server shutting down
            /// (0x01))`.
            Timeout {
                /// The lock that was waited for.
                name: String,
                /// The last attempt's failure, if it had one.
                last: Option<Box<Error>>,
            },
            /// No reply from the server within the client timeout (0.8 x lease)
            /// of the last acknowledged send: the cause of [`Error::Lost`], or
            /// an attempt that was waiting. Its message names the timeout and
            /// the lease, in the words of every client. [`Error::is_timeout`]
            /// is true for it.
            ClientTimeout {
                /// The session's lease, in milliseconds.
                lease_ms: u32,
            },
            /// The caller cancelled a pending acquire.
            Cancelled,
            /// A held lock was lost; the cause says why. Never re-acquired silently.
            Lost(Box<Error>),
            /// A connection could not be made, or failed.
            ///
            /// A TLS handshake that failed on a certificate (this client
            /// refused the server's, or the server refused this client's, which
            /// TLS 1.3 reports on the first read) is one too, but it is not
            /// temporary: the acquisition does not ask that server again and
            /// fails at once when no other server is left. Its message says
            /// `monolock: TLS handshake with ADDRESS failed: CAUSE` and which
            /// side refused.
            Io(Arc<io::Error>),
            /// The server sent bytes that break the protocol (an unknown message
            /// type, or a reply the client did not ask for). The connection is
            /// dropped, like after an I/O failure.
            Protocol(String),
            /// The server's first reply starts no monolock message: the address
            /// is some other service (such as the server's HTTP admin port, or a
            /// TLS port spoken to without TLS). A protocol violation, but not a
            /// temporary one: the acquisition does not ask that server again, and
            /// fails at once when no other server is left.
            NotMonolock {
                /// The server address, as `host:port`.
                server: String,
                /// The first bytes it sent (at most 64).
                sent: Vec<u8>,
            },
            /// The server ended the session with an ERROR whose code had not
            /// arrived when its type byte was read. An ERROR is the last message of
            /// a session, so the session ends at that byte and the client does not
            /// wait for the rest. Without a code there is no class: temporary, like
            /// a dropped connection (a waiting acquire queues again).
            ServerEnded,
            /// The server answered a shared claim ([`Claim::shared`](crate::Claim::shared),
            /// [`Claim::semaphore`](crate::Claim::semaphore)) with ERROR 0x10: it speaks
            /// protocol version 1 only, which has exclusive locks and no shared locks or
            /// semaphores. Still the server's UnsupportedVersion error: [`Error::code`]
            /// is 0x10, [`Error::reason`] the server's, and the cause
            /// ([`Error::UnsupportedVersion`]) is the
            /// [`source`](std::error::Error::source). Terminal, never retried: the same
            /// server answers the same way. Use an exclusive claim, or upgrade the
            /// server.
            SharedUnsupported {
                /// The server's address, as `host:port`.
                addr: String,
                /// The server's error: [`Error::UnsupportedVersion`].
                cause: Box<Error>,
            },
            /// The server answered a claim with a value ([`Claim::with_value`](crate::Claim::with_value))
            /// with ERROR 0x10: it predates protocol version 3, which brought values.
            /// Still the server's UnsupportedVersion error: [`Error::code`] is 0x10,
            /// [`Error::reason`] the server's, and the cause
            /// ([`Error::UnsupportedVersion`]) is the
            /// [`source`](std::error::Error::source). Terminal, never retried: no
            /// earlier version can carry a value. Claim without a value, or upgrade
            /// the server.
            ValueUnsupported {
                /// The server's address, as `host:port`.
                addr: String,
                /// The server's error: [`Error::UnsupportedVersion`].
                cause: Box<Error>,
            },
            /// The server answered SESSION (protocol version 4) with ERROR 0x10,
            /// 0x11 or 0x13: it predates sessions (an older server reads SESSION's
            /// type byte as an unknown message, 0x13). Still the server's error:
            /// [`Error::code`] is its code, [`Error::reason`] its reason, and the
            /// cause is the [`source`](std::error::Error::source). Terminal, never
            /// retried. Take locks on connections of their own, or upgrade the
            /// server.
            SessionsUnsupported {
                /// The server's address, as `host:port`.
                addr: String,
                /// The server's error.
                cause: Box<Error>,
            },
            /// A lock claimed without a value was asked to proclaim one
            /// (`LockGuard::proclaim`): only a claim with a value
            /// ([`Claim::with_value`](crate::Claim::with_value)) is sent in protocol
            /// version 3, the one that has PROCLAIM. Refused before anything is
            /// sent; the lock is held as before. Never temporary.
            NoValue {
                /// The lock.
                name: String,
            },
            /// A campaign for leadership with an empty value
            /// (`Client::campaign`): followers reach the leader by its value,
            /// so a leader must have one. Refused before anything is sent.
            /// Never temporary.
            EmptyValue {
                /// The lock campaigned for.
                name: String,
            },
            /// The client's configuration is invalid, for example a server address
            /// that does not parse. Raised by the builder's `build`; never
            /// temporary.
            Config(String),
        }

        impl Error {
            fn with_reason(code: u8, reason: Reason) -> Error {
                match code {
                    $(code::$code => Error::$variant(reason),)*
                    code => Error::UnknownCode { code, reason },
                }
            }

            /// The wire code of this error, or `None` for conditions without one.
            /// For [`Error::Lost`] it is the code of the cause.
            pub fn code(&self) -> Option<u8> {
                Some(match self {
                    $(Error::$variant(_) => code::$code,)*
                    Error::UnknownCode { code, .. } => *code,
                    Error::Lost(cause)
                    | Error::SharedUnsupported { cause, .. }
                    | Error::ValueUnsupported { cause, .. }
                    | Error::SessionsUnsupported { cause, .. } => {
                        return cause.code()
                    }
                    Error::Busy { .. }
                    | Error::Timeout { .. }
                    | Error::ClientTimeout { .. }
                    | Error::Cancelled
                    | Error::Io(_)
                    | Error::Protocol(_)
                    | Error::ServerEnded
                    | Error::NotMonolock { .. }
                    | Error::NoValue { .. }
                    | Error::EmptyValue { .. }
                    | Error::Config(_) => return None,
                })
            }

            /// The reason of a wire-coded error (sent by the server or raised by the
            /// client), or `None` for other conditions.
            pub fn reason(&self) -> Option<&Reason> {
                match self {
                    $(Error::$variant(r) => Some(r),)*
                    Error::UnknownCode { reason: r, .. } => Some(r),
                    Error::Lost(cause)
                    | Error::SharedUnsupported { cause, .. }
                    | Error::ValueUnsupported { cause, .. }
                    | Error::SessionsUnsupported { cause, .. } => cause.reason(),
                    _ => None,
                }
            }

            /// The spec's name of a known code's variant (tests).
            #[cfg(test)]
            fn spec_name(&self) -> Option<&'static str> {
                match self {
                    $(Error::$variant(_) => Some(stringify!($code)),)*
                    _ => None,
                }
            }
        }
    };
}

with_codes!(define_error);

/// How many bytes of a stranger's reply an error message quotes.
const QUOTED_BYTES: usize = 12;

/// The canonical text of a wire code, if this version knows the code.
pub(crate) fn canonical_text(code: u8) -> Option<&'static str> {
    CANONICAL.iter().find(|(c, _)| *c == code).map(|(_, t)| *t)
}

impl Error {
    /// The error of a v1-only server's 0x10 answer to a shared claim sent
    /// to `addr`; any other error stays as it is.
    pub(crate) fn for_shared_claim(self, addr: &str) -> Error {
        match self {
            Error::UnsupportedVersion(_) => Error::SharedUnsupported {
                addr: addr.to_owned(),
                cause: Box::new(self),
            },
            other => other,
        }
    }

    /// The error of a pre-version-3 server's 0x10 answer to a claim with a
    /// value sent to `addr`; any other error stays as it is.
    pub(crate) fn for_value_claim(self, addr: &str) -> Error {
        match self {
            Error::UnsupportedVersion(_) => Error::ValueUnsupported {
                addr: addr.to_owned(),
                cause: Box::new(self),
            },
            other => other,
        }
    }

    /// The error of a server's answer to SESSION sent to `addr`: 0x10, 0x11
    /// or 0x13 mean a server without sessions (docs/protocol.md); any other
    /// error stays as it is.
    pub(crate) fn for_session(self, addr: &str) -> Error {
        match self.code() {
            Some(0x10 | 0x11 | 0x13) if !matches!(self, Error::SessionsUnsupported { .. }) => {
                Error::SessionsUnsupported {
                    addr: addr.to_owned(),
                    cause: Box::new(self),
                }
            }
            _ => self,
        }
    }

    /// Builds the error for an ERROR frame with `code` and `reason`, as the
    /// server sent it. Unknown codes become [`Error::UnknownCode`].
    pub fn from_code(code: u8, reason: impl Into<String>) -> Error {
        Error::with_reason(code, Reason::server(reason))
    }

    /// The error the client raises itself, before sending, for a code the
    /// server would have answered.
    pub(crate) fn refused(code: u8) -> Error {
        let text = canonical_text(code).unwrap_or("");
        Error::with_reason(code, Reason::client(text))
    }

    /// Like [`Error::refused`], with a text that says what exactly is wrong.
    pub(crate) fn refused_with(code: u8, text: String) -> Error {
        Error::with_reason(code, Reason::client(text))
    }

    /// Whether trying again (a new connection, a new ACQUIRE) may help.
    ///
    /// For coded errors this is `code < 0x10`, also for unknown codes.
    /// Busy, timeouts, connection failures and protocol violations (a broken
    /// connection, as far as the caller is concerned) are temporary; a
    /// cancel, a server that is not monolock, a TLS handshake that failed on
    /// a certificate (an [`Error::Io`] that says which side refused which
    /// certificate) and an invalid configuration are not. A lost lock is temporary when its cause is: a new
    /// acquisition may succeed, with a new token.
    pub fn is_temporary(&self) -> bool {
        match self {
            Error::Io(_) => !self.is_certificate_problem(),
            Error::Busy { .. }
            | Error::Timeout { .. }
            | Error::ClientTimeout { .. }
            | Error::Protocol(_)
            | Error::ServerEnded => true,
            Error::Cancelled
            | Error::NotMonolock { .. }
            | Error::SharedUnsupported { .. }
            | Error::ValueUnsupported { .. }
            | Error::SessionsUnsupported { .. }
            | Error::NoValue { .. }
            | Error::EmptyValue { .. }
            | Error::Config(_) => false,
            Error::Lost(cause) => cause.is_temporary(),
            coded => coded.code().is_some_and(|c| c < FIRST_TERMINAL_CODE),
        }
    }

    /// True for a held lock that was lost ([`Error::Lost`]).
    pub fn is_lost(&self) -> bool {
        matches!(self, Error::Lost(_))
    }

    /// True for [`Error::Busy`].
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy { .. })
    }

    /// True for [`Error::Timeout`] and [`Error::ClientTimeout`] (also as
    /// the cause of a loss).
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::Timeout { .. } | Error::ClientTimeout { .. } => true,
            Error::Lost(cause) => cause.is_timeout(),
            _ => false,
        }
    }

    pub(crate) fn io(err: io::Error) -> Error {
        Error::Io(Arc::new(err))
    }

    /// Whether this is a TLS handshake that failed on a certificate (ours
    /// refused by the server, or the server's refused by us): an
    /// [`Error::Io`] that is not temporary, and a server the acquisition
    /// does not ask again.
    pub(crate) fn is_certificate_problem(&self) -> bool {
        #[cfg(feature = "tls")]
        if let Error::Io(err) = self {
            return crate::certificate::certificate_problem(err).is_some();
        }
        false
    }
}

impl Error {
    /// The message without the crate's prefix, so that a wrapped cause
    /// does not repeat it.
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Busy {
                name,
                shared,
                limit,
            } => busy_text(f, name, *shared, *limit),
            Error::Timeout { name, last } => {
                write!(f, "timed out waiting for the lock {name:?}")?;
                match last.as_deref() {
                    None => Ok(()),
                    // A claim that heard nothing in time, then the deadline.
                    Some(Error::Timeout { last: None, .. }) => {
                        f.write_str(" (last attempt: the server did not reply in time)")
                    }
                    Some(last) => {
                        f.write_str(" (last attempt: ")?;
                        last.describe(f)?;
                        f.write_str(")")
                    }
                }
            }
            Error::ClientTimeout { lease_ms } => write!(
                f,
                "no reply from the server within {} ms (0.8 x lease of {lease_ms} ms)",
                client_timeout_text(*lease_ms)
            ),
            Error::Cancelled => f.write_str("acquire cancelled"),
            Error::Lost(cause) => {
                f.write_str("lock lost: ")?;
                cause.describe(f)
            }
            // It says itself that the TLS handshake with the server failed.
            Error::Io(err) if self.is_certificate_problem() => write!(f, "{err}"),
            Error::Io(err) => write!(f, "connection failed: {err}"),
            Error::Protocol(what) => write!(f, "protocol violation: {what}"),
            Error::ServerEnded => {
                f.write_str("the server ended the session with an ERROR (its code did not arrive)")
            }
            Error::NotMonolock { server, sent } => {
                write!(
                    f,
                    "{server} does not speak the monolock protocol (it sent \"{}\")",
                    quote(sent, QUOTED_BYTES)
                )?;
                if sent.starts_with(b"HTTP/") {
                    f.write_str("; is this the admin port?")?;
                }
                Ok(())
            }
            Error::SharedUnsupported { addr, .. } => write!(
                f,
                "server {addr} does not support shared locks or semaphores (it answered a \
                 protocol version 2 ACQUIRE with 0x10 unsupported protocol version); use an \
                 exclusive lock, or upgrade the server"
            ),
            Error::ValueUnsupported { addr, .. } => write!(
                f,
                "server {addr} does not support claims with a value (it answered a \
                 protocol version 3 ACQUIRE with 0x10 unsupported protocol version); claim \
                 without a value, or upgrade the server"
            ),
            Error::SessionsUnsupported { addr, cause } => write!(
                f,
                "server {addr} does not support sessions (it answered SESSION, protocol \
                 version 4, with 0x{:02x}); take locks on connections of their own, or \
                 upgrade the server",
                cause.code().unwrap_or(0)
            ),
            Error::NoValue { name } => write!(
                f,
                "lock {name:?} was claimed without a value (use Claim::with_value to proclaim)"
            ),
            Error::EmptyValue { name } => write!(
                f,
                "campaign for {name:?}: a leader's value must not be empty (followers reach the leader by it)"
            ),
            Error::Config(what) => f.write_str(what),
            coded => {
                let code = coded.code().unwrap_or_default();
                let text = coded.reason().map(Reason::text).unwrap_or_default();
                match (text.is_empty(), canonical_text(code)) {
                    // The reason of a passive server is the active one's address.
                    (false, Some(canonical)) if code == code::NOT_ACTIVE => {
                        write!(f, "{canonical}; the active server is {text} (0x{code:02x})")
                    }
                    (false, _) => write!(f, "{text} (0x{code:02x})"),
                    (true, Some(canonical)) => write!(f, "{canonical} (0x{code:02x})"),
                    (true, None) => write!(f, "unknown error (0x{code:02x})"),
                }
            }
        }
    }
}

/// What kept a try-acquire's claim on `name` out: a holder of an exclusive
/// lock, the permits of a semaphore (whoever holds them), or, for a shared
/// claim without a bound, an exclusive holder (spec/vectors/messages.json,
/// busy).
fn busy_text(
    f: &mut fmt::Formatter<'_>,
    name: &str,
    shared: bool,
    limit: Option<u32>,
) -> fmt::Result {
    match (shared, limit) {
        (false, _) => write!(f, "lock {name:?} is held by another session"),
        (true, Some(1)) => write!(f, "the 1 permit of {name:?} is taken"),
        (true, Some(n)) if n > 1 => write!(f, "all {n} permits of {name:?} are taken"),
        (true, _) => write!(f, "lock {name:?} is held exclusively by another session"),
    }
}

/// An error's message without the crate's prefix, for log lines.
pub(crate) struct Bare<'a>(&'a Error);

impl fmt::Display for Bare<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.describe(f)
    }
}

impl Error {
    pub(crate) fn bare(&self) -> Bare<'_> {
        Bare(self)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("monolock: ")?;
        self.describe(f)
    }
}

/// Renders up to `n` bytes for a message: printable ASCII as it is (but
/// for the quote and the backslash), anything else as `\xNN`, and an
/// ellipsis when there was more.
pub(crate) fn quote(bytes: &[u8], n: usize) -> String {
    let mut out = String::new();
    for &b in bytes.iter().take(n) {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if bytes.len() > n {
        out.push('…');
    }
    out
}

/// 0.8 x lease in milliseconds for a message, exactly: a whole number or one
/// decimal ("800.8" for 1001), never a float's rounding (the other clients
/// print the same).
fn client_timeout_text(lease_ms: u32) -> String {
    let tenths = u64::from(lease_ms) * 8;
    match tenths % 10 {
        0 => format!("{}", tenths / 10),
        frac => format!("{}.{frac}", tenths / 10),
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(err) => Some(err.as_ref()),
            Error::Lost(cause)
            | Error::SharedUnsupported { cause, .. }
            | Error::ValueUnsupported { cause, .. }
            | Error::SessionsUnsupported { cause, .. } => Some(cause.as_ref()),
            Error::Timeout {
                last: Some(last), ..
            } => Some(last.as_ref()),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(err: io::Error) -> Error {
        Error::io(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec;

    /// Every code of spec/errors.json maps to its own variant, with the
    /// canonical text and retry class of the table.
    #[test]
    fn error_table_matches_spec() {
        let table = spec::load("errors.json");
        let first_terminal = table["first_terminal_code"].as_u64().unwrap();
        assert_eq!(first_terminal, u64::from(FIRST_TERMINAL_CODE));
        let errors = table["errors"].as_array().unwrap();
        assert_eq!(errors.len(), CANONICAL.len(), "every spec code is known");
        for entry in errors {
            let code = entry["code"].as_u64().unwrap() as u8;
            let name = entry["name"].as_str().unwrap();
            let err = Error::from_code(code, "x");
            assert_eq!(err.code(), Some(code), "{name}");
            assert_eq!(
                err.is_temporary(),
                entry["temporary"].as_bool().unwrap(),
                "{name}"
            );
            assert_eq!(
                canonical_text(code),
                entry["text"].as_str(),
                "canonical text of {name}"
            );
            assert_eq!(err.spec_name(), Some(name), "variant of code {code}");
            let refused = Error::refused(code);
            assert_eq!(refused.reason().unwrap().origin(), Origin::Client);
            assert_eq!(
                refused.reason().unwrap().text(),
                entry["text"].as_str().unwrap()
            );
        }
        for example in table["unknown_code_examples"].as_array().unwrap() {
            let code = example["code"].as_u64().unwrap() as u8;
            let err = Error::from_code(code, "");
            assert!(matches!(err, Error::UnknownCode { .. }), "code {code}");
            assert_eq!(err.code(), Some(code));
            assert_eq!(err.is_temporary(), example["temporary"].as_bool().unwrap());
        }
    }

    /// Every byte value is classified by range, known or not.
    #[test]
    fn temporary_is_a_range() {
        for code in 0..=255u8 {
            assert_eq!(Error::from_code(code, "").is_temporary(), code < 0x10);
        }
    }

    /// A timeout waiting for the lock "jobs/x".
    fn timeout(last: Option<Box<Error>>) -> Error {
        Error::Timeout {
            name: "jobs/x".into(),
            last,
        }
    }

    /// The messages every client gives in the same words
    /// (spec/vectors/messages.json).
    #[test]
    fn message_vectors() {
        let v = crate::spec::load("vectors/messages.json");
        let server_errors = v["server_errors"].as_array().unwrap();
        assert!(!server_errors.is_empty());
        for case in server_errors {
            let code = u8::try_from(case["code"].as_u64().unwrap()).unwrap();
            let err = Error::from_code(code, case["reason"].as_str().unwrap());
            assert_eq!(err.to_string(), case["message"].as_str().unwrap());
        }
        let timeouts = v["acquire_timeouts"].as_array().unwrap();
        assert!(!timeouts.is_empty());
        for case in timeouts {
            let last = case["last_code"].as_u64().map(|code| {
                let code = u8::try_from(code).unwrap();
                Box::new(Error::from_code(
                    code,
                    case["last_reason"].as_str().unwrap(),
                ))
            });
            let err = Error::Timeout {
                name: case["name"].as_str().unwrap().into(),
                last,
            };
            assert_eq!(err.to_string(), case["message"].as_str().unwrap());
        }
        let busy = v["busy"].as_array().unwrap();
        assert!(!busy.is_empty());
        for case in busy {
            // A limit of 0 is the vectors' "no limit".
            let limit = case["limit"].as_u64().filter(|n| *n > 0);
            let err = Error::Busy {
                name: case["name"].as_str().unwrap().into(),
                shared: case["shared"].as_bool().unwrap(),
                limit: limit.map(|n| u32::try_from(n).unwrap()),
            };
            assert_eq!(err.to_string(), case["message"].as_str().unwrap());
            assert!(err.is_busy() && err.is_temporary() && err.code().is_none());
        }
    }

    #[test]
    fn display_uses_reason_or_canonical_text() {
        let e = Error::from_code(0x13, "unknown message type: 0x7f");
        assert_eq!(e.to_string(), "monolock: unknown message type: 0x7f (0x13)");
        let e = Error::from_code(0x15, "");
        assert_eq!(e.to_string(), "monolock: lock name too long (0x15)");
        let lost = Error::Lost(Box::new(Error::from_code(0x02, "")));
        assert_eq!(lost.code(), Some(0x02));
        assert!(lost.is_temporary());
        assert_eq!(
            lost.to_string(),
            "monolock: lock lost: closed by administrator (0x02)"
        );
    }

    /// spec/constants.json `error_prefix`: one "monolock: " per message,
    /// however deep the causes nest.
    #[test]
    fn one_prefix_per_message() {
        let refused = Error::io(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "127.0.0.1:1: refused",
        ));
        let not_monolock = Error::NotMonolock {
            server: "h:1".into(),
            sent: b"HTTP/1.1 400 Bad Request".to_vec(),
        };
        let nested = Error::Lost(Box::new(timeout(Some(Box::new(refused.clone())))));
        for err in [
            Error::Busy {
                name: "jobs/x".into(),
                shared: false,
                limit: None,
            },
            timeout(None),
            timeout(Some(Box::new(refused.clone()))),
            timeout(Some(Box::new(not_monolock.clone()))),
            Error::Lost(Box::new(Error::from_code(0x02, ""))),
            Error::Lost(Box::new(Error::Protocol("x".into()))),
            nested,
            refused,
            not_monolock,
            Error::Config("server address \"a b\"".into()),
        ] {
            let msg = err.to_string();
            assert!(msg.starts_with("monolock: "), "{msg}");
            assert_eq!(msg.matches("monolock:").count(), 1, "{msg}");
        }
        assert_eq!(
            timeout(Some(Box::new(Error::from_code(0x01, "")))).to_string(),
            "monolock: timed out waiting for the lock \"jobs/x\" (last attempt: server shutting down (0x01))"
        );
        assert_eq!(
            timeout(Some(Box::new(timeout(None)))).to_string(),
            "monolock: timed out waiting for the lock \"jobs/x\" (last attempt: the server did not reply in time)"
        );
    }

    #[test]
    fn quoting_a_strangers_bytes() {
        assert_eq!(quote(b"HTTP/1.1 400 Bad", 12), "HTTP/1.1 400…");
        assert_eq!(quote(b"HTTP/1.1 400", 12), "HTTP/1.1 400");
        assert_eq!(quote(b"a\"b\\c\x00\xff", 12), "a\\x22b\\x5cc\\x00\\xff");
    }

    #[test]
    fn the_timeout_keeps_the_last_failure_as_its_source() {
        use std::error::Error as _;
        let last = Error::from_code(0x01, "");
        let err = timeout(Some(Box::new(last)));
        let source = err.source().expect("a source");
        assert_eq!(source.to_string(), "monolock: server shutting down (0x01)");
        assert!(timeout(None).source().is_none());
        assert!(err.is_timeout() && err.is_temporary() && err.code().is_none());
    }

    /// spec/vectors/temporary.json: the flag of errors that carry no code.
    #[test]
    fn temporary_vectors() {
        let v = spec::load("vectors/temporary.json");
        let cases = v["cases"].as_array().unwrap();
        assert!(cases.len() >= 2);
        for case in cases {
            let name = case["error"].as_str().unwrap();
            let err = match name {
                "not_monolock" => Error::NotMonolock {
                    server: "127.0.0.1:7118".into(),
                    sent: b"HTTP/1.1 400".to_vec(),
                },
                "config" => crate::addr::ServerAddr::parse("http://127.0.0.1:7117").unwrap_err(),
                other => panic!("spec/vectors/temporary.json: unknown error {other:?}"),
            };
            assert_eq!(
                err.is_temporary(),
                case["temporary"].as_bool().unwrap(),
                "{name}: {err}"
            );
        }
    }

    #[test]
    fn shared_unsupported_is_the_terminal_unsupported_version_error() {
        use std::error::Error as _;
        let err = Error::from_code(0x10, "unsupported protocol version").for_shared_claim("h:7117");
        assert!(matches!(err, Error::SharedUnsupported { ref addr, .. } if addr == "h:7117"));
        assert_eq!(err.code(), Some(0x10));
        assert!(!err.is_temporary());
        assert_eq!(err.reason().unwrap().origin(), Origin::Server);
        assert_eq!(
            err.to_string(),
            "monolock: server h:7117 does not support shared locks or semaphores (it answered a \
             protocol version 2 ACQUIRE with 0x10 unsupported protocol version); use an \
             exclusive lock, or upgrade the server"
        );
        let source = err.source().expect("the server's error");
        assert_eq!(
            source.to_string(),
            "monolock: unsupported protocol version (0x10)"
        );
        // Only 0x10 becomes it.
        let other = Error::from_code(0x1a, "").for_shared_claim("h:7117");
        assert!(matches!(other, Error::LimitMismatch(_)));
    }

    #[test]
    fn value_unsupported_is_the_terminal_unsupported_version_error() {
        use std::error::Error as _;
        let err = Error::from_code(0x10, "unsupported protocol version").for_value_claim("h:7117");
        assert!(matches!(err, Error::ValueUnsupported { ref addr, .. } if addr == "h:7117"));
        assert_eq!(err.code(), Some(0x10));
        assert!(!err.is_temporary());
        assert_eq!(err.reason().unwrap().origin(), Origin::Server);
        assert_eq!(
            err.to_string(),
            "monolock: server h:7117 does not support claims with a value (it answered a \
             protocol version 3 ACQUIRE with 0x10 unsupported protocol version); claim \
             without a value, or upgrade the server"
        );
        let source = err.source().expect("the server's error");
        assert_eq!(
            source.to_string(),
            "monolock: unsupported protocol version (0x10)"
        );
        // Only 0x10 becomes it.
        let other = Error::from_code(0x1b, "").for_value_claim("h:7117");
        assert!(matches!(other, Error::ValueTooLong(_)));
    }

    /// The client timeout in a loss message: 0.8 x lease exactly, never a
    /// float's rounding, in the words of every client.
    #[test]
    fn client_timeout_message() {
        for (lease_ms, text) in [
            (2000, "1600"),
            (1001, "800.8"),
            (1, "0.8"),
            (4294967295, "3435973836"),
        ] {
            let err = Error::Lost(Box::new(Error::ClientTimeout { lease_ms }));
            assert_eq!(
                err.to_string(),
                format!(
                    "monolock: lock lost: no reply from the server within {text} ms (0.8 x lease of {lease_ms} ms)"
                )
            );
            assert!(err.is_timeout() && err.is_temporary() && err.code().is_none());
        }
    }
}
