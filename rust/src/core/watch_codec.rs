//! The wire format of a watch (protocol version 3): encoding WATCH and
//! decoding the server's EVENT, WATCHING and ERROR from a byte stream.
//!
//! Nothing here does I/O. The decoder is fed whatever a read returned and
//! hands back complete frames, however the stream was split. An ERROR ends
//! the watch at its type byte, as it ends a claim (see [`super::codec`]).

use super::codec::{validate_acquire, MSG_ERROR, MSG_HEARTBEAT};
use crate::claim::MAX_VALUE_LEN;
use crate::constants_gen as spec;
use crate::error::Error;

/// Protocol version of a WATCH.
pub(crate) const VERSION_WATCH: u8 = spec::WATCH_PROTOCOL_VERSION as u8;
pub(crate) const MSG_WATCH: u8 = spec::WATCH_WATCH_TYPE as u8;
pub(crate) const MSG_EVENT: u8 = spec::WATCH_EVENT_TYPE as u8;
pub(crate) const MSG_WATCHING: u8 = spec::WATCH_WATCHING_TYPE as u8;

/// The kinds of EVENT.
pub(crate) mod kind {
    use crate::constants_gen as spec;
    pub(crate) const SNAPSHOT: u8 = spec::WATCH_EVENT_KINDS_SNAPSHOT as u8;
    pub(crate) const HOLDER: u8 = spec::WATCH_EVENT_KINDS_HOLDER as u8;
    pub(crate) const WAITER: u8 = spec::WATCH_EVENT_KINDS_WAITER as u8;
    pub(crate) const SNAPSHOT_END: u8 = spec::WATCH_EVENT_KINDS_SNAPSHOT_END as u8;
    pub(crate) const GRANTED: u8 = spec::WATCH_EVENT_KINDS_GRANTED as u8;
    pub(crate) const VALUE: u8 = spec::WATCH_EVENT_KINDS_VALUE as u8;
    pub(crate) const ENDED: u8 = spec::WATCH_EVENT_KINDS_ENDED as u8;
    pub(crate) const HELD_BACK: u8 = spec::WATCH_EVENT_KINDS_HELD_BACK as u8;
    pub(crate) const QUEUED: u8 = spec::WATCH_EVENT_KINDS_QUEUED as u8;
    pub(crate) const LEFT: u8 = spec::WATCH_EVENT_KINDS_LEFT as u8;
    pub(crate) const BLOCKED: u8 = spec::WATCH_EVENT_KINDS_BLOCKED as u8;
}

const RESYNC_FLAG: u8 = spec::WATCH_SNAPSHOT_FLAG_RESYNC as u8;

/// The one-byte HEARTBEAT of a watch, as a lock's.
pub(crate) const HEARTBEAT: [u8; 1] = [MSG_HEARTBEAT];

/// Encodes a WATCH after the checks of an ACQUIRE (the server validates
/// it as one): `epoch` and `seq` are where the watcher left off.
pub(crate) fn encode_watch(
    name: &[u8],
    lease_ms: u64,
    epoch: u64,
    seq: u64,
) -> Result<Vec<u8>, Error> {
    let lease = validate_acquire(name, lease_ms)?;
    let mut frame = Vec::with_capacity(24 + name.len());
    frame.push(MSG_WATCH);
    frame.push(VERSION_WATCH);
    frame.extend_from_slice(&lease.to_be_bytes());
    frame.extend_from_slice(&(name.len() as u16).to_be_bytes());
    frame.extend_from_slice(name);
    frame.extend_from_slice(&epoch.to_be_bytes());
    frame.extend_from_slice(&seq.to_be_bytes());
    Ok(frame)
}

/// One EVENT. Which fields a kind carries:
///
/// | kind | fields |
/// |---|---|
/// | snapshot | resync, holders, waiters, ms (blocked that long) |
/// | holder | token, mode, limit, ms (held back that long), identity, value |
/// | waiter, queued | arrival, mode, limit, identity, value |
/// | snapshot end | — |
/// | granted | arrival, and a holder's fields |
/// | value | token, value |
/// | ended | token, why |
/// | held back | token, why, ms |
/// | left | arrival |
/// | blocked | ms, why |
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) epoch: u64,
    pub(crate) seq: u64,
    pub(crate) kind: u8,
    pub(crate) resync: bool,
    pub(crate) holders: u32,
    pub(crate) waiters: u32,
    pub(crate) ms: u32,
    pub(crate) token: u64,
    pub(crate) arrival: u64,
    pub(crate) mode: u8,
    pub(crate) limit: u16,
    pub(crate) identity: String,
    pub(crate) value: Vec<u8>,
    pub(crate) why: u8,
}

/// One server frame of a watch. An ERROR is taken as far as it had
/// arrived, as [`super::codec::Frame::Error`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WatchFrame {
    Event(Event),
    Watching { epoch: u64, seq: u64 },
    Error { code: Option<u8>, reason: String },
}

/// Reassembles a watch's server frames from the byte stream.
#[derive(Debug, Default)]
pub(crate) struct WatchDecoder {
    buf: Vec<u8>,
    /// An ERROR was taken: the watch's connection is over.
    ended: bool,
}

/// Why a frame could not be read yet: more bytes are needed.
pub(crate) struct Short;

impl WatchDecoder {
    /// Appends the bytes of one read. Feed a whole read before taking
    /// frames: an incomplete ERROR is taken with what the read held.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        if !self.ended {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// Takes the next complete frame, `Ok(None)` when more bytes are
    /// needed, or a protocol error (an unknown type or kind, a value over
    /// the limit): then the connection must end.
    pub(crate) fn next_frame(&mut self) -> Result<Option<WatchFrame>, Error> {
        let Some(&kind) = self.buf.first() else {
            return Ok(None);
        };
        if kind == MSG_ERROR {
            return Ok(Some(self.take_error()));
        }
        let mut r = Fields {
            buf: &self.buf,
            at: 1,
        };
        let frame = match kind {
            MSG_EVENT => read_event(&mut r).map(|e| e.map(WatchFrame::Event)),
            MSG_WATCHING => Ok(r.u64().and_then(|epoch| {
                let seq = r.u64()?;
                Ok(WatchFrame::Watching { epoch, seq })
            })),
            other => Err(Error::Protocol(format!(
                "unknown message type from server: 0x{other:02x}"
            ))),
        }?;
        match frame {
            Ok(frame) => {
                let len = r.at;
                self.buf.drain(..len);
                Ok(Some(frame))
            }
            Err(Short) => Ok(None),
        }
    }

    /// The ERROR that ends the watch: never wait for the rest of it.
    fn take_error(&mut self) -> WatchFrame {
        let code = self.buf.get(1).copied();
        let end = match self.buf.get(2) {
            Some(&len) => (3 + usize::from(len)).min(self.buf.len()),
            None => self.buf.len(),
        };
        let reason = String::from_utf8_lossy(self.buf.get(3..end).unwrap_or(&[])).into_owned();
        self.ended = true;
        self.buf.clear();
        WatchFrame::Error { code, reason }
    }
}

/// Reads an EVENT after its type byte: `Ok(Err(Short))` when it is not
/// whole yet, an error for a kind or a value no server may send.
pub(crate) fn read_event(r: &mut Fields<'_>) -> Result<Result<Event, Short>, Error> {
    let head = (|| Ok((r.u64()?, r.u64()?, r.u8()?)))();
    let (epoch, seq, kind) = match head {
        Ok(head) => head,
        Err(Short) => return Ok(Err(Short)),
    };
    let mut e = Event {
        epoch,
        seq,
        kind,
        ..Event::default()
    };
    let body = match kind {
        kind::SNAPSHOT => r.snapshot(&mut e),
        kind::HOLDER => r.holder(&mut e),
        kind::GRANTED => r.u64().and_then(|a| {
            e.arrival = a;
            r.holder(&mut e)
        }),
        kind::WAITER | kind::QUEUED => r.waiter(&mut e),
        kind::SNAPSHOT_END => Ok(Ok(())),
        kind::VALUE => r.u64().and_then(|t| {
            e.token = t;
            r.value(&mut e)
        }),
        kind::ENDED => r.u64().and_then(|t| {
            (e.token, e.why) = (t, r.u8()?);
            Ok(Ok(()))
        }),
        kind::HELD_BACK => r.u64().and_then(|t| {
            (e.token, e.why, e.ms) = (t, r.u8()?, r.u32()?);
            Ok(Ok(()))
        }),
        kind::LEFT => r.u64().map(|a| {
            e.arrival = a;
            Ok(())
        }),
        kind::BLOCKED => r.u32().and_then(|ms| {
            (e.ms, e.why) = (ms, r.u8()?);
            Ok(Ok(()))
        }),
        other => return Err(malformed(&format!("unknown kind {other}"))),
    };
    match body {
        Err(Short) => Ok(Err(Short)),
        Ok(Err(err)) => Err(err),
        Ok(Ok(())) => Ok(Ok(e)),
    }
}

fn malformed(what: &str) -> Error {
    Error::Protocol(format!("malformed EVENT: {what}"))
}

/// A field's outcome: `Err(Short)` for bytes still to come; inside, an
/// error for a field out of bounds.
type Field = Result<Result<(), Error>, Short>;

/// Big-endian fields from the buffer, from `at` on.
pub(crate) struct Fields<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) at: usize,
}

impl Fields<'_> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&[u8], Short> {
        let bytes = self.buf.get(self.at..self.at + n).ok_or(Short)?;
        self.at += n;
        Ok(bytes)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Short> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, Short> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().unwrap()))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Short> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Short> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().unwrap()))
    }

    fn snapshot(&mut self, e: &mut Event) -> Field {
        e.resync = self.u8()? & RESYNC_FLAG != 0;
        (e.holders, e.waiters, e.ms) = (self.u32()?, self.u32()?, self.u32()?);
        Ok(Ok(()))
    }

    /// A holder's body: token, mode, limit, held_back_ms, identity, value.
    fn holder(&mut self, e: &mut Event) -> Field {
        (e.token, e.mode, e.limit, e.ms) = (self.u64()?, self.u8()?, self.u16()?, self.u32()?);
        self.who(e)
    }

    /// A waiter's body: arrival, mode, limit, identity, value.
    fn waiter(&mut self, e: &mut Event) -> Field {
        (e.arrival, e.mode, e.limit) = (self.u64()?, self.u8()?, self.u16()?);
        self.who(e)
    }

    fn who(&mut self, e: &mut Event) -> Field {
        let len = usize::from(self.u8()?);
        // Cut at a UTF-8 boundary by the server; lossy all the same.
        e.identity = String::from_utf8_lossy(self.take(len)?).into_owned();
        self.value(e)
    }

    /// A value; a length over the limit is refused before its bytes come.
    fn value(&mut self, e: &mut Event) -> Field {
        let len = usize::from(self.u16()?);
        if len > MAX_VALUE_LEN {
            return Ok(Err(malformed(&format!(
                "a value over {MAX_VALUE_LEN} bytes"
            ))));
        }
        e.value = self.take(len)?.to_vec();
        Ok(Ok(()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::spec;

    fn num(v: &serde_json::Value) -> u64 {
        v.as_str().map_or(0, |s| s.parse().unwrap())
    }

    fn kind_of(name: &str) -> u8 {
        match name {
            "snapshot" => kind::SNAPSHOT,
            "holder" => kind::HOLDER,
            "waiter" => kind::WAITER,
            "snapshot_end" => kind::SNAPSHOT_END,
            "granted" => kind::GRANTED,
            "value" => kind::VALUE,
            "ended" => kind::ENDED,
            "held_back" => kind::HELD_BACK,
            "queued" => kind::QUEUED,
            "left" => kind::LEFT,
            "blocked" => kind::BLOCKED,
            other => panic!("unknown kind {other}"),
        }
    }

    /// An event of the vectors (frames.json and watch.json), every field
    /// any kind may carry.
    pub(crate) fn vector_event(v: &serde_json::Value) -> Event {
        let small = |k: &str| v[k].as_u64().unwrap_or(0);
        Event {
            epoch: num(&v["epoch"]),
            seq: num(&v["seq"]),
            kind: kind_of(v["kind"].as_str().unwrap()),
            resync: v["resync"].as_bool().unwrap_or(false),
            holders: small("holders") as u32,
            waiters: small("waiters") as u32,
            ms: small("ms") as u32,
            token: num(&v["token"]),
            arrival: num(&v["arrival"]),
            mode: small("mode") as u8,
            limit: small("limit") as u16,
            identity: v["identity"].as_str().unwrap_or("").to_owned(),
            value: v["value"].as_str().unwrap_or("").as_bytes().to_vec(),
            why: small("why") as u8,
        }
    }

    fn expected(case: &serde_json::Value) -> WatchFrame {
        match case["type"].as_str().unwrap() {
            "WATCHING" => WatchFrame::Watching {
                epoch: num(&case["epoch"]),
                seq: num(&case["seq"]),
            },
            _ => WatchFrame::Event(vector_event(case)),
        }
    }

    #[test]
    fn constants_match_spec() {
        let c = spec::load("constants.json");
        let w = &c["watch"];
        assert_eq!(w["protocol_version"], u64::from(VERSION_WATCH));
        assert_eq!(w["watch_type"], u64::from(MSG_WATCH));
        assert_eq!(w["event_type"], u64::from(MSG_EVENT));
        assert_eq!(w["watching_type"], u64::from(MSG_WATCHING));
    }

    #[test]
    fn watch_frames_match_vectors() {
        let v = spec::load("vectors/frames.json");
        let cases = v["client_valid_watch"].as_array().unwrap();
        assert!(!cases.is_empty());
        for case in cases {
            let desc = case["desc"].as_str().unwrap();
            let name = case["name"].as_str().unwrap().as_bytes();
            let lease = case["lease_ms"].as_u64().unwrap();
            let got = encode_watch(name, lease, num(&case["epoch"]), num(&case["seq"])).unwrap();
            assert_eq!(got, spec::hex(case["hex"].as_str().unwrap()), "{desc}");
        }
        // Refused as an ACQUIRE would be, before anything is built.
        assert_eq!(
            encode_watch(b"", 1000, 0, 0).unwrap_err().code(),
            Some(0x14)
        );
        assert_eq!(encode_watch(b"a", 0, 0, 0).unwrap_err().code(), Some(0x17));
    }

    #[test]
    fn server_watch_frames_decode_whole_and_byte_by_byte() {
        let v = spec::load("vectors/frames.json");
        let cases = v["server_valid_watch"].as_array().unwrap();
        assert!(cases.len() >= 12);
        let mut stream = Vec::new();
        let mut want_all = Vec::new();
        for case in cases {
            let desc = case["desc"].as_str().unwrap();
            let bytes = spec::hex(case["hex"].as_str().unwrap());
            let want = expected(case);
            let mut whole = WatchDecoder::default();
            whole.feed(&bytes);
            assert_eq!(whole.next_frame().unwrap(), Some(want.clone()), "{desc}");
            assert_eq!(whole.next_frame().unwrap(), None, "{desc}: nothing left");
            let mut split = WatchDecoder::default();
            for (i, b) in bytes.iter().enumerate() {
                split.feed(std::slice::from_ref(b));
                let got = split.next_frame().unwrap();
                let last = i + 1 == bytes.len();
                assert_eq!(
                    got,
                    last.then(|| want.clone()),
                    "{desc}: after {} bytes",
                    i + 1
                );
            }
            stream.extend_from_slice(&bytes);
            want_all.push(want);
        }
        // Every frame, then an ERROR, in chunks of every size: several
        // frames per read, frames split across reads.
        let error_at = stream.len();
        stream.extend_from_slice(&[MSG_ERROR, 0x04, 3, b'l', b'a', b'g']);
        for chunk in 1..=stream.len() {
            let mut d = WatchDecoder::default();
            let mut got = Vec::new();
            let mut error_end = stream.len();
            for (i, piece) in stream.chunks(chunk).enumerate() {
                if (i * chunk..i * chunk + piece.len()).contains(&error_at) {
                    error_end = i * chunk + piece.len();
                }
                d.feed(piece);
                while let Some(f) = d.next_frame().unwrap() {
                    got.push(f);
                }
            }
            let head = &stream[error_at..error_end];
            let mut want = want_all.clone();
            want.push(WatchFrame::Error {
                code: head.get(1).copied(),
                reason: String::from_utf8_lossy(head.get(3..).unwrap_or(&[])).into_owned(),
            });
            assert_eq!(got, want, "chunk size {chunk}");
        }
    }

    #[test]
    fn malformed_events_are_protocol_errors() {
        let v = spec::load("vectors/frames.json");
        let cases = v["server_invalid_watch"].as_array().unwrap();
        assert!(!cases.is_empty());
        for case in cases {
            let desc = case["desc"].as_str().unwrap();
            let mut d = WatchDecoder::default();
            d.feed(&spec::hex(case["hex"].as_str().unwrap()));
            let err = d.next_frame().unwrap_err();
            assert!(matches!(err, Error::Protocol(_)), "{desc}: {err:?}");
        }
        for byte in [0x00u8, 0x11, 0x12, 0x16, 0xff] {
            let mut d = WatchDecoder::default();
            d.feed(&[byte]);
            assert!(
                matches!(d.next_frame(), Err(Error::Protocol(_))),
                "0x{byte:02x}"
            );
        }
    }

    #[test]
    fn an_error_ends_the_watch_at_its_type_byte() {
        let mut d = WatchDecoder::default();
        d.feed(&[MSG_WATCHING, 0, 0]);
        assert_eq!(d.next_frame().unwrap(), None);
        let mut d = WatchDecoder::default();
        d.feed(&[MSG_ERROR]);
        let cut = WatchFrame::Error {
            code: None,
            reason: String::new(),
        };
        assert_eq!(d.next_frame().unwrap(), Some(cut));
        d.feed(&[MSG_WATCHING; 17]);
        assert_eq!(d.next_frame().unwrap(), None, "nothing after an ERROR");
    }
}
