//! The wire format: encoding the client frames (ACQUIRE in protocol
//! version 1 for exclusive claims, version 2 for shared ones, version 3 for
//! claims with a value; HEARTBEAT; PROCLAIM) and decoding the
//! three server frames from a byte stream.
//!
//! Nothing here does I/O. The decoder is fed whatever a read returned and
//! hands back complete frames, however the stream was split.

use crate::claim::{Claim, Kind, MAX_VALUE_LEN};
use crate::constants_gen as spec;
use crate::error::{code, Error};

/// Protocol version of exclusive claims (every server reads it).
pub(crate) const VERSION: u8 = spec::PROTOCOL_VERSION as u8;
/// Protocol version of shared claims and semaphores.
pub(crate) const VERSION_SHARED: u8 = spec::SHARED_PROTOCOL_VERSION as u8;
/// Protocol version of claims with a value.
pub(crate) const VERSION_VALUE: u8 = spec::VALUE_PROTOCOL_VERSION as u8;
/// The modes of a version 2 ACQUIRE.
pub(crate) const MODE_EXCLUSIVE: u8 = spec::SHARED_MODE_EXCLUSIVE as u8;
pub(crate) const MODE_SHARED: u8 = spec::SHARED_MODE_SHARED as u8;
/// The most permits a semaphore can have (the uint16 limit field).
pub(crate) const MAX_LIMIT: u32 = spec::SHARED_LIMIT_MAX as u32;
/// Client -> server message types.
pub(crate) const MSG_ACQUIRE: u8 = spec::MESSAGE_TYPES_ACQUIRE;
pub(crate) const MSG_HEARTBEAT: u8 = spec::MESSAGE_TYPES_HEARTBEAT;
/// Replaces the value of a version 3 claim.
pub(crate) const MSG_PROCLAIM: u8 = spec::VALUE_PROCLAIM_TYPE as u8;
/// Server -> client message types.
pub(crate) const MSG_WAITING: u8 = spec::MESSAGE_TYPES_WAITING;
pub(crate) const MSG_ACQUIRED: u8 = spec::MESSAGE_TYPES_ACQUIRED;
pub(crate) const MSG_ERROR: u8 = spec::MESSAGE_TYPES_ERROR;
/// Longest lock name, in bytes: a protocol constant, not a setting.
pub(crate) const MAX_NAME_LEN: usize = spec::MAX_NAME_LEN as usize;
/// Smallest and largest lease, in milliseconds (the largest is what the
/// uint32 field can carry).
pub(crate) const MIN_LEASE_MS: u64 = spec::LEASE_MS_MIN;
pub(crate) const MAX_LEASE_MS: u64 = spec::LEASE_MS_MAX;

/// The one-byte HEARTBEAT frame.
pub(crate) const HEARTBEAT: [u8; 1] = [MSG_HEARTBEAT];

/// Checks an ACQUIRE request the way the server would, in the server's
/// order, and returns the error the server would have sent.
///
/// The name arrives as `&[u8]` so that the UTF-8 rule is checked here too,
/// even though the public API only accepts `&str`.
pub(crate) fn validate_acquire(name: &[u8], lease_ms: u64) -> Result<u32, Error> {
    if !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&lease_ms) {
        return Err(invalid_lease(&format!("{lease_ms} ms")));
    }
    if name.is_empty() {
        return Err(Error::refused(code::EMPTY_NAME));
    }
    if name.len() > MAX_NAME_LEN {
        // The length and the limit, never the name: it can be long.
        let text = format!(
            "lock name is {} bytes, the limit is {MAX_NAME_LEN}",
            name.len()
        );
        return Err(Error::refused_with(code::NAME_TOO_LONG, text));
    }
    if std::str::from_utf8(name).is_err() {
        return Err(Error::refused(code::NAME_NOT_UTF8));
    }
    Ok(lease_ms as u32)
}

/// The INVALID_LEASE (0x17) refusal of a lease, with the value as the caller gave it.
pub(crate) fn invalid_lease(given: &str) -> Error {
    let text = format!(
        "lease must be a whole number of milliseconds from {MIN_LEASE_MS} ms to {MAX_LEASE_MS} ms, got {given}"
    );
    Error::refused_with(code::INVALID_LEASE, text)
}

/// Encodes an ACQUIRE frame after validating it; nothing is built for an
/// invalid request.
pub(crate) fn encode_acquire(name: &[u8], lease_ms: u64) -> Result<Vec<u8>, Error> {
    let lease = validate_acquire(name, lease_ms)?;
    let mut frame = Vec::with_capacity(8 + name.len());
    frame.push(MSG_ACQUIRE);
    frame.push(VERSION);
    frame.extend_from_slice(&lease.to_be_bytes());
    frame.extend_from_slice(&(name.len() as u16).to_be_bytes());
    frame.extend_from_slice(name);
    Ok(frame)
}

/// Encodes a version 2 ACQUIRE after the server's checks, in the server's
/// order: the lease, the mode and limit (0x19), then the name. Exclusive
/// claims are sent with [`encode_acquire`] instead (version 1).
pub(crate) fn encode_acquire_v2(
    name: &[u8],
    lease_ms: u64,
    mode: u8,
    limit: u16,
) -> Result<Vec<u8>, Error> {
    let lease = validate_acquire_v2(name, lease_ms, mode, limit)?;
    let mut frame = Vec::with_capacity(11 + name.len());
    append_acquire_v2(&mut frame, VERSION_SHARED, name, lease, mode, limit);
    Ok(frame)
}

/// The checks of a version 2 ACQUIRE, in the server's order: the lease,
/// the mode and limit (0x19), then the name.
fn validate_acquire_v2(name: &[u8], lease_ms: u64, mode: u8, limit: u16) -> Result<u32, Error> {
    if !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&lease_ms) {
        return Err(invalid_lease(&format!("{lease_ms} ms")));
    }
    match (mode, limit) {
        (MODE_SHARED, _) | (MODE_EXCLUSIVE, 0) => {}
        _ => return Err(Error::refused(code::INVALID_MODE)),
    }
    validate_acquire(name, lease_ms)
}

/// Appends the head of a version 2 or 3 ACQUIRE, up to the name.
fn append_acquire_v2(
    frame: &mut Vec<u8>,
    version: u8,
    name: &[u8],
    lease: u32,
    mode: u8,
    limit: u16,
) {
    frame.push(MSG_ACQUIRE);
    frame.push(version);
    frame.extend_from_slice(&lease.to_be_bytes());
    frame.push(mode);
    frame.extend_from_slice(&limit.to_be_bytes());
    frame.extend_from_slice(&(name.len() as u16).to_be_bytes());
    frame.extend_from_slice(name);
}

/// Encodes a version 3 ACQUIRE (a claim with a value) after the server's
/// checks, in the server's order: those of version 2, then the value's
/// length (0x1b VALUE_TOO_LONG over 1024 bytes).
pub(crate) fn encode_acquire_v3(
    name: &[u8],
    lease_ms: u64,
    mode: u8,
    limit: u16,
    value: &[u8],
) -> Result<Vec<u8>, Error> {
    let lease = validate_acquire_v2(name, lease_ms, mode, limit)?;
    check_value(value)?;
    let mut frame = Vec::with_capacity(13 + name.len() + value.len());
    append_acquire_v2(&mut frame, VERSION_VALUE, name, lease, mode, limit);
    frame.extend_from_slice(&(value.len() as u16).to_be_bytes());
    frame.extend_from_slice(value);
    Ok(frame)
}

/// Encodes a PROCLAIM, the new value of the claim on its connection
/// (version 3 only; empty clears it).
pub(crate) fn encode_proclaim(value: &[u8]) -> Result<Vec<u8>, Error> {
    check_value(value)?;
    let mut frame = Vec::with_capacity(3 + value.len());
    frame.push(MSG_PROCLAIM);
    frame.extend_from_slice(&(value.len() as u16).to_be_bytes());
    frame.extend_from_slice(value);
    Ok(frame)
}

/// The VALUE_TOO_LONG (0x1b) refusal of a value over 1024 bytes; the
/// length and the limit, never the value.
fn check_value(value: &[u8]) -> Result<(), Error> {
    if value.len() > MAX_VALUE_LEN {
        let text = format!(
            "claim value is {} bytes, the limit is {MAX_VALUE_LEN}",
            value.len()
        );
        return Err(Error::refused_with(code::VALUE_TOO_LONG, text));
    }
    Ok(())
}

/// Encodes the ACQUIRE of `claim` in the lowest version that says what it
/// needs, so that it works with every server that can serve it: version 1
/// for an exclusive claim, 2 for a shared one, 3 for one with a value. A
/// semaphore's limit outside 1..=65535 is refused (0x19) after the lease
/// and before the name, and a value over 1024 bytes (0x1b) after the name,
/// as the server would.
pub(crate) fn encode_claim(name: &[u8], lease_ms: u64, claim: &Claim) -> Result<Vec<u8>, Error> {
    let (mode, limit) = match claim.kind() {
        Kind::Exclusive => (MODE_EXCLUSIVE, 0),
        Kind::Shared { limit } => {
            if !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&lease_ms) {
                return Err(invalid_lease(&format!("{lease_ms} ms")));
            }
            let limit = match limit {
                None => 0,
                Some(n) if (1..=MAX_LIMIT).contains(&n) => n as u16,
                Some(n) => return Err(invalid_limit(&n.to_string())),
            };
            (MODE_SHARED, limit)
        }
    };
    match (claim.value(), claim.kind()) {
        (Some(value), _) => encode_acquire_v3(name, lease_ms, mode, limit, value),
        (None, Kind::Shared { .. }) => encode_acquire_v2(name, lease_ms, mode, limit),
        (None, Kind::Exclusive) => encode_acquire(name, lease_ms),
    }
}

/// The INVALID_MODE (0x19) refusal of a semaphore's limit, with the value
/// as the caller gave it.
pub(crate) fn invalid_limit(given: &str) -> Error {
    let text = format!(
        "a semaphore's limit must be a whole number from 1 to {MAX_LIMIT} permits, got {given}"
    );
    Error::refused_with(code::INVALID_MODE, text)
}

/// One server -> client frame: WAITING and ACQUIRED complete; an ERROR as
/// far as it had arrived. An ERROR ends the session at its type byte, so it
/// is taken at the end of the read that brought that byte: `code` is `None`
/// when the code byte had not come, `reason` holds the reason bytes that
/// had come (lossily decoded). Nothing after it is decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    Waiting,
    Acquired { token: u64 },
    Error { code: Option<u8>, reason: String },
}

/// Reassembles server frames from the byte stream.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    buf: Vec<u8>,
    /// An ERROR was taken: the session is over, nothing more is decoded.
    ended: bool,
}

impl Decoder {
    /// Appends bytes as they came from one read. Feed a whole read before
    /// taking frames: an incomplete ERROR is taken with what the read held.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        if !self.ended {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// The bytes received and not yet taken as frames.
    pub(crate) fn buffered(&self) -> &[u8] {
        &self.buf
    }

    /// Takes the next complete frame, `Ok(None)` when more bytes are needed,
    /// or a protocol error for a type byte the server may not send. After an
    /// error the stream is unusable: the caller closes the connection.
    pub(crate) fn next_frame(&mut self) -> Result<Option<Frame>, Error> {
        let Some(&kind) = self.buf.first() else {
            return Ok(None);
        };
        let (frame, len) = match kind {
            MSG_WAITING => (Frame::Waiting, 1),
            MSG_ACQUIRED => {
                let Some(body) = self.buf.get(1..9) else {
                    return Ok(None);
                };
                let mut token = [0u8; 8];
                token.copy_from_slice(body);
                let token = u64::from_be_bytes(token);
                (Frame::Acquired { token }, 9)
            }
            MSG_ERROR => {
                // The last message of a session: never wait for the rest.
                let code = self.buf.get(1).copied();
                let end = match self.buf.get(2) {
                    Some(&len) => (3 + usize::from(len)).min(self.buf.len()),
                    None => self.buf.len(),
                };
                // The reason is for humans only: keep what we can of it.
                let reason =
                    String::from_utf8_lossy(self.buf.get(3..end).unwrap_or(&[])).into_owned();
                self.ended = true;
                self.buf.clear();
                return Ok(Some(Frame::Error { code, reason }));
            }
            other => {
                return Err(Error::Protocol(format!(
                    "unknown message type from server: 0x{other:02x}"
                )))
            }
        };
        self.buf.drain(..len);
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec;

    fn hex(s: &str) -> Vec<u8> {
        spec::hex(s)
    }

    #[test]
    fn constants_match_spec() {
        let c = spec::load("constants.json");
        assert_eq!(c["protocol_version"], u64::from(VERSION));
        let types = &c["message_types"];
        assert_eq!(types["ACQUIRE"], u64::from(MSG_ACQUIRE));
        assert_eq!(types["HEARTBEAT"], u64::from(MSG_HEARTBEAT));
        assert_eq!(types["WAITING"], u64::from(MSG_WAITING));
        assert_eq!(types["ACQUIRED"], u64::from(MSG_ACQUIRED));
        assert_eq!(types["ERROR"], u64::from(MSG_ERROR));
        assert_eq!(c["max_name_len"], MAX_NAME_LEN as u64);
        assert_eq!(c["lease_ms"]["min"], 1);
        assert_eq!(c["lease_ms"]["max"], MAX_LEASE_MS);
    }

    #[test]
    fn client_frames_match_vectors() {
        let v = spec::load("vectors/frames.json");
        for case in v["client_valid"].as_array().unwrap() {
            let desc = case["desc"].as_str().unwrap();
            let want = hex(case["hex"].as_str().unwrap());
            let got = match case["type"].as_str().unwrap() {
                "ACQUIRE" => {
                    let name = case["name"].as_str().unwrap();
                    let lease = case["lease_ms"].as_u64().unwrap();
                    encode_acquire(name.as_bytes(), lease).unwrap()
                }
                "HEARTBEAT" => HEARTBEAT.to_vec(),
                other => panic!("{desc}: unexpected type {other}"),
            };
            assert_eq!(got, want, "{desc}");
        }
    }

    #[test]
    fn invalid_client_inputs_are_refused_with_the_server_code() {
        let v = spec::load("vectors/frames.json");
        for case in v["client_invalid"].as_array().unwrap() {
            let desc = case["desc"].as_str().unwrap();
            let name = hex(case["name_hex"].as_str().unwrap());
            let lease = case["lease_ms"].as_u64().unwrap();
            let code = case["code"].as_u64().unwrap() as u8;
            assert_refused_before_sending(&encode_acquire(&name, lease).unwrap_err(), code, desc);
        }
    }

    /// The error of an input the client refuses itself: the server's code,
    /// terminal, from the client.
    fn assert_refused_before_sending(err: &crate::Error, code: u8, desc: &str) {
        assert_eq!(err.code(), Some(code), "{desc}");
        assert!(!err.is_temporary(), "{desc}");
        assert_eq!(
            err.reason().unwrap().origin(),
            crate::Origin::Client,
            "{desc}"
        );
    }

    #[test]
    fn shared_constants_match_spec() {
        let c = spec::load("constants.json");
        let shared = &c["shared"];
        assert_eq!(shared["protocol_version"], u64::from(VERSION_SHARED));
        assert_eq!(shared["mode_exclusive"], u64::from(MODE_EXCLUSIVE));
        assert_eq!(shared["mode_shared"], u64::from(MODE_SHARED));
        assert_eq!(shared["limit_max"], u64::from(MAX_LIMIT));
    }

    #[test]
    fn client_v2_frames_match_vectors() {
        let v = spec::load("vectors/frames.json");
        let cases = v["client_valid_v2"].as_array().unwrap();
        assert!(cases.len() >= 4);
        for case in cases {
            let desc = case["desc"].as_str().unwrap();
            assert_eq!(case["type"], "ACQUIRE", "{desc}");
            let want = hex(case["hex"].as_str().unwrap());
            let name = case["name"].as_str().unwrap().as_bytes();
            let lease = case["lease_ms"].as_u64().unwrap();
            let mode = case["mode"].as_u64().unwrap() as u8;
            let limit = case["limit"].as_u64().unwrap() as u16;
            let got = encode_acquire_v2(name, lease, mode, limit).unwrap();
            assert_eq!(got, want, "{desc}");
            // The public claims send exactly these bytes for shared ones.
            let claim = match (mode, limit) {
                (MODE_SHARED, 0) => Claim::shared(),
                (MODE_SHARED, n) => Claim::semaphore(u32::from(n)),
                _ => continue,
            };
            assert_eq!(encode_claim(name, lease, &claim).unwrap(), want, "{desc}");
        }
    }

    #[test]
    fn invalid_v2_inputs_are_refused_with_the_server_code() {
        let v = spec::load("vectors/frames.json");
        let cases = v["client_invalid_v2"].as_array().unwrap();
        assert!(cases.len() >= 7);
        for case in cases {
            let desc = case["desc"].as_str().unwrap();
            let name = match (case["name"].as_str(), case["name_hex"].as_str()) {
                (Some(name), _) => name.as_bytes().to_vec(),
                (None, Some(h)) => hex(h),
                (None, None) => panic!("{desc}: no name"),
            };
            let lease = case["lease_ms"].as_u64().unwrap();
            let mode = case["mode"].as_u64().unwrap() as u8;
            let limit = case["limit"].as_u64().unwrap() as u16;
            let code = case["code"].as_u64().unwrap() as u8;
            let err = encode_acquire_v2(&name, lease, mode, limit).unwrap_err();
            assert_refused_before_sending(&err, code, desc);
        }
    }

    #[test]
    fn value_constants_match_spec() {
        let c = spec::load("constants.json");
        let value = &c["value"];
        assert_eq!(value["protocol_version"], u64::from(VERSION_VALUE));
        assert_eq!(value["max_value_len"], MAX_VALUE_LEN as u64);
        assert_eq!(value["proclaim_type"], u64::from(MSG_PROCLAIM));
    }

    /// The value of a version 3 vector: UTF-8 text, or hex.
    fn vector_value(case: &serde_json::Value) -> Vec<u8> {
        match (case["value"].as_str(), case["value_hex"].as_str()) {
            (Some(text), _) => text.as_bytes().to_vec(),
            (None, Some(h)) => hex(h),
            (None, None) => panic!("{}: no value", case["desc"]),
        }
    }

    #[test]
    fn client_v3_frames_match_vectors() {
        let v = spec::load("vectors/frames.json");
        let cases = v["client_valid_v3"].as_array().unwrap();
        assert!(cases.len() >= 6);
        let (mut acquires, mut proclaims) = (0, 0);
        for case in cases {
            let desc = case["desc"].as_str().unwrap();
            let want = hex(case["hex"].as_str().unwrap());
            let value = vector_value(case);
            match case["type"].as_str().unwrap() {
                "ACQUIRE" => {
                    acquires += 1;
                    let name = case["name"].as_str().unwrap().as_bytes();
                    let lease = case["lease_ms"].as_u64().unwrap();
                    let mode = case["mode"].as_u64().unwrap() as u8;
                    let limit = case["limit"].as_u64().unwrap() as u16;
                    let got = encode_acquire_v3(name, lease, mode, limit, &value).unwrap();
                    assert_eq!(got, want, "{desc}");
                    // The public claims send exactly these bytes.
                    let claim = match (mode, limit) {
                        (MODE_EXCLUSIVE, _) => Claim::exclusive(),
                        (_, 0) => Claim::shared(),
                        (_, n) => Claim::semaphore(u32::from(n)),
                    };
                    let claim = claim.with_value(value);
                    assert_eq!(encode_claim(name, lease, &claim).unwrap(), want, "{desc}");
                }
                "PROCLAIM" => {
                    proclaims += 1;
                    assert_eq!(encode_proclaim(&value).unwrap(), want, "{desc}");
                }
                other => panic!("{desc}: unexpected type {other}"),
            }
        }
        assert!(acquires >= 4 && proclaims >= 2);
    }

    #[test]
    fn invalid_v3_inputs_are_refused_with_the_server_code() {
        let v = spec::load("vectors/frames.json");
        let cases = v["client_invalid_v3"].as_array().unwrap();
        assert!(cases.len() >= 4);
        for case in cases {
            let desc = case["desc"].as_str().unwrap();
            let name = case["name"].as_str().unwrap().as_bytes();
            let lease = case["lease_ms"].as_u64().unwrap();
            let mode = case["mode"].as_u64().unwrap() as u8;
            let limit = case["limit"].as_u64().unwrap() as u16;
            let value = vec![b'v'; case["value_len"].as_u64().unwrap() as usize];
            let code = case["code"].as_u64().unwrap() as u8;
            let err = encode_acquire_v3(name, lease, mode, limit, &value).unwrap_err();
            assert_refused_before_sending(&err, code, desc);
            // The public claims refuse them alike (a mode they can state).
            let claim = match mode {
                MODE_EXCLUSIVE => Claim::exclusive(),
                MODE_SHARED => Claim::shared(),
                _ => continue,
            };
            let err = encode_claim(name, lease, &claim.with_value(value)).unwrap_err();
            assert_refused_before_sending(&err, code, desc);
        }
    }

    #[test]
    fn a_value_too_long_says_its_length() {
        let claim = Claim::semaphore(3).with_value(vec![0u8; MAX_VALUE_LEN + 1]);
        let err = encode_claim(b"a", 1000, &claim).unwrap_err();
        assert!(matches!(err, Error::ValueTooLong(_)));
        assert_eq!(
            err.to_string(),
            "monolock: claim value is 1025 bytes, the limit is 1024 (0x1b)"
        );
        // The limit is checked before the value, the name too.
        let claim = Claim::semaphore(0).with_value(vec![0u8; MAX_VALUE_LEN + 1]);
        assert_eq!(
            encode_claim(b"a", 1000, &claim).unwrap_err().code(),
            Some(0x19)
        );
        let claim = Claim::exclusive().with_value(vec![0u8; MAX_VALUE_LEN + 1]);
        assert_eq!(
            encode_claim(&[0xff], 1000, &claim).unwrap_err().code(),
            Some(0x16)
        );
        let err = encode_proclaim(&[0u8; MAX_VALUE_LEN + 1]).unwrap_err();
        assert!(matches!(err, Error::ValueTooLong(_)));
    }

    /// No value, or an empty one: the frames of versions 1 and 2, as before.
    #[test]
    fn an_empty_value_is_no_value() {
        for claim in [Claim::exclusive(), Claim::shared(), Claim::semaphore(2)] {
            let plain = encode_claim(b"a", 1000, &claim).unwrap();
            let empty = claim.clone().with_value("");
            assert_eq!(empty.value(), None);
            assert_eq!(empty, claim);
            assert_eq!(encode_claim(b"a", 1000, &empty).unwrap(), plain);
            let cleared = claim.clone().with_value("x").with_value(Vec::new());
            assert_eq!(encode_claim(b"a", 1000, &cleared).unwrap(), plain);
            let valued = encode_claim(b"a", 1000, &claim.with_value("x")).unwrap();
            assert_eq!(valued[1], VERSION_VALUE);
        }
        assert_eq!(
            encode_claim(b"a", 1000, &Claim::exclusive()).unwrap()[1],
            VERSION
        );
        assert_eq!(
            encode_claim(b"a", 1000, &Claim::shared()).unwrap()[1],
            VERSION_SHARED
        );
    }

    #[test]
    fn exclusive_claims_send_version_1() {
        let v = spec::load("vectors/frames.json");
        let case = &v["client_valid"][0];
        let name = case["name"].as_str().unwrap().as_bytes();
        let lease = case["lease_ms"].as_u64().unwrap();
        let want = hex(case["hex"].as_str().unwrap());
        assert_eq!(
            encode_claim(name, lease, &Claim::exclusive()).unwrap(),
            want
        );
        assert_eq!(encode_claim(name, lease, &Claim::default()).unwrap(), want);
    }

    #[test]
    fn a_semaphore_limit_out_of_range_is_refused_before_the_name() {
        for n in [0u32, 65536, u32::MAX] {
            let err = encode_claim(b"", 1000, &Claim::semaphore(n)).unwrap_err();
            assert!(matches!(err, Error::InvalidMode(_)), "{n}");
            assert_eq!(err.code(), Some(0x19));
            assert!(!err.is_temporary());
            assert_eq!(err.reason().unwrap().origin(), crate::Origin::Client);
            assert_eq!(
                err.to_string(),
                format!("monolock: a semaphore's limit must be a whole number from 1 to 65535 permits, got {n} (0x19)")
            );
        }
        // The lease is checked first, the name after the limit.
        let err = encode_claim(b"a", 0, &Claim::semaphore(0)).unwrap_err();
        assert_eq!(err.code(), Some(0x17));
        let err = encode_claim(b"", 1000, &Claim::semaphore(1)).unwrap_err();
        assert_eq!(err.code(), Some(0x14));
        let err = encode_claim(&[0xff], 1000, &Claim::shared()).unwrap_err();
        assert_eq!(err.code(), Some(0x16));
        assert!(encode_claim(b"a", 1000, &Claim::semaphore(65535)).is_ok());
        assert!(encode_claim(b"a", 1000, &Claim::semaphore(1)).is_ok());
    }

    fn expected_frame(case: &serde_json::Value) -> Frame {
        match case["type"].as_str().unwrap() {
            "WAITING" => Frame::Waiting,
            "ACQUIRED" => Frame::Acquired {
                token: case["token"].as_str().unwrap().parse().unwrap(),
            },
            "ERROR" => Frame::Error {
                code: case["code"].as_u64().map(|c| c as u8),
                reason: case["reason"].as_str().unwrap().to_owned(),
            },
            other => panic!("unexpected type {other}"),
        }
    }

    #[test]
    fn server_frames_decode_whole_and_byte_by_byte() {
        let v = spec::load("vectors/frames.json");
        let cases = v["server_valid"].as_array().unwrap();
        let mut stream = Vec::new();
        let mut want_all = Vec::new();
        let mut errors = Vec::new();
        for case in cases {
            let desc = case["desc"].as_str().unwrap();
            let bytes = hex(case["hex"].as_str().unwrap());
            let want = expected_frame(case);

            let mut whole = Decoder::default();
            whole.feed(&bytes);
            assert_eq!(whole.next_frame().unwrap(), Some(want.clone()), "{desc}");
            assert_eq!(whole.next_frame().unwrap(), None, "{desc}: nothing left");

            let mut split = Decoder::default();
            if let Frame::Error { .. } = want {
                // An ERROR ends the session at its type byte.
                split.feed(&bytes[..1]);
                let cut = Frame::Error {
                    code: None,
                    reason: String::new(),
                };
                assert_eq!(split.next_frame().unwrap(), Some(cut), "{desc}");
                split.feed(&bytes[1..]);
                assert_eq!(split.next_frame().unwrap(), None, "{desc}: nothing after");
                errors.push((bytes.clone(), want));
                continue;
            }
            for (i, b) in bytes.iter().enumerate() {
                split.feed(std::slice::from_ref(b));
                let got = split.next_frame().unwrap();
                if i + 1 < bytes.len() {
                    assert_eq!(got, None, "{desc}: complete after {} bytes", i + 1);
                } else {
                    assert_eq!(got, Some(want.clone()), "{desc}");
                }
            }
            stream.extend_from_slice(&bytes);
            want_all.push(want);
        }

        // The replies and then one ERROR (the last message of a session),
        // in one read and in chunks of every size: a chunk that cuts the
        // ERROR ends it with what that chunk held.
        let (last, last_frame) = errors.into_iter().next().unwrap();
        let error_at = stream.len();
        stream.extend_from_slice(&last);
        want_all.push(last_frame);
        for chunk in 1..=stream.len() {
            let mut d = Decoder::default();
            let mut got = Vec::new();
            let mut error_end = stream.len();
            for (i, piece) in stream.chunks(chunk).enumerate() {
                let (start, end) = (i * chunk, i * chunk + piece.len());
                if start <= error_at && error_at < end {
                    error_end = end;
                }
                d.feed(piece);
                while let Some(f) = d.next_frame().unwrap() {
                    got.push(f);
                }
            }
            let mut want = want_all.clone();
            if error_end < stream.len() {
                let head = &stream[error_at..error_end];
                *want.last_mut().unwrap() = Frame::Error {
                    code: head.get(1).copied(),
                    reason: String::from_utf8_lossy(head.get(3..).unwrap_or(&[])).into_owned(),
                };
            }
            assert_eq!(got, want, "chunk size {chunk}");
        }
    }

    #[test]
    fn server_error_cut_vectors() {
        let v = spec::load("vectors/frames.json");
        for case in v["server_error_cut"].as_array().unwrap() {
            let desc = case["desc"].as_str().unwrap();
            let mut d = Decoder::default();
            d.feed(&hex(case["hex"].as_str().unwrap()));
            let want = Frame::Error {
                code: case["code"].as_u64().map(|c| c as u8),
                reason: case["reason"].as_str().unwrap().to_owned(),
            };
            assert_eq!(d.next_frame().unwrap(), Some(want), "{desc}");
            d.feed(&[0x7f, 0x13, 0x01]);
            assert_eq!(
                d.next_frame().unwrap(),
                None,
                "{desc}: nothing after an ERROR"
            );
        }
    }

    #[test]
    fn unknown_server_type_is_a_protocol_error() {
        for byte in [0x00u8, 0x01, 0x02, 0x14, 0x7f, 0xff] {
            let mut d = Decoder::default();
            d.feed(&[byte]);
            let err = d.next_frame().unwrap_err();
            assert!(matches!(err, Error::Protocol(_)), "0x{byte:02x}");
            assert_eq!(err.code(), None);
        }
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        let long = vec![b'a'; 300];
        let err = encode_acquire(&long, 1000).unwrap_err();
        assert_eq!(
            err.to_string(),
            "monolock: lock name is 300 bytes, the limit is 255 (0x15)"
        );
        let err = encode_acquire(b"x", 0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "monolock: lease must be a whole number of milliseconds from 1 ms to 4294967295 ms, got 0 ms (0x17)"
        );
    }

    #[test]
    fn invalid_utf8_reason_is_kept_lossily() {
        let mut d = Decoder::default();
        d.feed(&[MSG_ERROR, 0x02, 2, 0xff, b'x']);
        assert_eq!(
            d.next_frame().unwrap(),
            Some(Frame::Error {
                code: Some(2),
                reason: "\u{fffd}x".into()
            })
        );
    }
}
