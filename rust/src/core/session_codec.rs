//! The wire format of a session (protocol version 4): encoding SESSION,
//! OPEN, ON and RELEASE, and decoding the server's SESSION_OK, STREAM,
//! RELEASED, STREAM_END, ALIVE and ERROR from a byte stream.
//!
//! A stream speaks the version 1 to 3 frames inside an envelope that names
//! it, so OPEN wraps a whole ACQUIRE or WATCH from [`super::codec`] or
//! [`super::watch_codec`], and a STREAM's inner EVENT is read by the
//! watch codec. Nothing here does I/O; the decoder is fed whatever a read
//! returned and hands back complete frames, however the stream was split.
//! An ERROR ends the session at its type byte, as it ends a claim.

use super::codec::{
    invalid_lease, MAX_LEASE_MS, MIN_LEASE_MS, MSG_ACQUIRED, MSG_ERROR, MSG_WAITING,
};
use super::watch_codec::{read_event, Event, Fields, Short, MSG_EVENT, MSG_WATCHING};
use crate::constants_gen as spec;
use crate::error::Error;

/// Protocol version of a SESSION.
pub(crate) const VERSION_SESSION: u8 = spec::SESSION_PROTOCOL_VERSION as u8;
/// Client -> server frame types.
pub(crate) const MSG_SESSION: u8 = spec::SESSION_SESSION_TYPE as u8;
pub(crate) const MSG_OPEN: u8 = spec::SESSION_OPEN_TYPE as u8;
pub(crate) const MSG_ON: u8 = spec::SESSION_ON_TYPE as u8;
pub(crate) const MSG_RELEASE: u8 = spec::SESSION_RELEASE_TYPE as u8;
/// Server -> client frame types.
pub(crate) const MSG_SESSION_OK: u8 = spec::SESSION_SESSION_OK_TYPE as u8;
pub(crate) const MSG_STREAM: u8 = spec::SESSION_STREAM_TYPE as u8;
pub(crate) const MSG_RELEASED: u8 = spec::SESSION_RELEASED_TYPE as u8;
pub(crate) const MSG_STREAM_END: u8 = spec::SESSION_STREAM_END_TYPE as u8;
pub(crate) const MSG_ALIVE: u8 = spec::SESSION_ALIVE_TYPE as u8;

/// Encodes SESSION, the first frame of a session, after the lease check a
/// single claim makes (0x17 outside 1 ms to 2^32 - 1 ms).
pub(crate) fn encode_session(lease_ms: u64) -> Result<Vec<u8>, Error> {
    if !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&lease_ms) {
        return Err(invalid_lease(&format!("{lease_ms} ms")));
    }
    let mut frame = vec![MSG_SESSION, VERSION_SESSION];
    frame.extend_from_slice(&(lease_ms as u32).to_be_bytes());
    Ok(frame)
}

/// Encodes OPEN of `stream` around a whole ACQUIRE or WATCH (built and
/// checked by the codec of a single claim or watch).
pub(crate) fn encode_open(stream: u32, inner: &[u8]) -> Vec<u8> {
    envelope(MSG_OPEN, stream, inner)
}

/// Encodes ON of `stream` around a whole PROCLAIM.
pub(crate) fn encode_on(stream: u32, proclaim: &[u8]) -> Vec<u8> {
    envelope(MSG_ON, stream, proclaim)
}

/// Encodes RELEASE of `stream`.
pub(crate) fn encode_release(stream: u32) -> Vec<u8> {
    envelope(MSG_RELEASE, stream, &[])
}

fn envelope(kind: u8, stream: u32, inner: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(5 + inner.len());
    frame.push(kind);
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(inner);
    frame
}

/// One server frame of a stream, inside a STREAM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Inner {
    Waiting,
    Acquired { token: u64 },
    Event(Event),
    Watching { epoch: u64, seq: u64 },
}

/// One server frame of a session. An ERROR is taken as far as it had
/// arrived, as [`super::codec::Frame::Error`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionFrame {
    SessionOk {
        max_streams: u32,
    },
    Stream {
        stream: u32,
        inner: Inner,
    },
    Released {
        stream: u32,
    },
    StreamEnd {
        stream: u32,
        code: u8,
        reason: String,
    },
    Alive,
    Error {
        code: Option<u8>,
        reason: String,
    },
}

/// Reassembles a session's server frames from the byte stream.
#[derive(Debug, Default)]
pub(crate) struct SessionDecoder {
    buf: Vec<u8>,
    /// An ERROR was taken: the session is over, nothing more is decoded.
    ended: bool,
}

impl SessionDecoder {
    /// Appends the bytes of one read. Feed a whole read before taking
    /// frames: an incomplete ERROR is taken with what the read held.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        if !self.ended {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// The bytes received and not yet taken as frames.
    pub(crate) fn buffered(&self) -> &[u8] {
        &self.buf
    }

    /// Takes the next complete frame, `Ok(None)` when more bytes are
    /// needed, or a protocol error (an unknown type, a STREAM carrying a
    /// frame no stream may receive, a malformed EVENT): then the session
    /// must end.
    pub(crate) fn next_frame(&mut self) -> Result<Option<SessionFrame>, Error> {
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
            MSG_SESSION_OK => Ok(r
                .u32()
                .map(|max_streams| SessionFrame::SessionOk { max_streams })),
            MSG_ALIVE => Ok(Ok(SessionFrame::Alive)),
            MSG_RELEASED => Ok(r.u32().map(|stream| SessionFrame::Released { stream })),
            MSG_STREAM_END => Ok(read_stream_end(&mut r)),
            MSG_STREAM => read_stream(&mut r),
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

    /// The ERROR that ends the session: never wait for the rest of it.
    fn take_error(&mut self) -> SessionFrame {
        let code = self.buf.get(1).copied();
        let end = match self.buf.get(2) {
            Some(&len) => (3 + usize::from(len)).min(self.buf.len()),
            None => self.buf.len(),
        };
        let reason = String::from_utf8_lossy(self.buf.get(3..end).unwrap_or(&[])).into_owned();
        self.ended = true;
        self.buf.clear();
        SessionFrame::Error { code, reason }
    }
}

fn read_stream_end(r: &mut Fields<'_>) -> Result<SessionFrame, Short> {
    let (stream, code, len) = (r.u32()?, r.u8()?, r.u8()?);
    // The reason is for humans only: keep what we can of it.
    let reason = String::from_utf8_lossy(r.take(usize::from(len))?).into_owned();
    Ok(SessionFrame::StreamEnd {
        stream,
        code,
        reason,
    })
}

/// A STREAM after its type byte: the stream id and one inner frame.
fn read_stream(r: &mut Fields<'_>) -> Result<Result<SessionFrame, Short>, Error> {
    let head = (|| Ok((r.u32()?, r.u8()?)))();
    let (stream, kind) = match head {
        Ok(head) => head,
        Err(Short) => return Ok(Err(Short)),
    };
    let inner = match kind {
        MSG_WAITING => Ok(Inner::Waiting),
        MSG_ACQUIRED => r.u64().map(|token| Inner::Acquired { token }),
        MSG_WATCHING => (|| {
            let epoch = r.u64()?;
            Ok(Inner::Watching {
                epoch,
                seq: r.u64()?,
            })
        })(),
        MSG_EVENT => match read_event(r)? {
            Ok(event) => Ok(Inner::Event(event)),
            Err(Short) => Err(Short),
        },
        other => {
            return Err(Error::Protocol(format!(
                "STREAM {stream} carries message type 0x{other:02x}, which no stream receives"
            )))
        }
    };
    Ok(inner.map(|inner| SessionFrame::Stream { stream, inner }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claim::Claim;
    use crate::core::codec::{encode_claim, encode_proclaim, HEARTBEAT};
    use crate::core::watch_codec::encode_watch;
    use crate::core::watch_codec::tests::vector_event;
    use crate::spec;

    fn num(v: &serde_json::Value) -> u64 {
        v.as_str().map_or(0, |s| s.parse().unwrap())
    }

    #[test]
    fn constants_match_spec() {
        let c = spec::load("constants.json");
        let s = &c["session"];
        let pairs = [
            ("protocol_version", VERSION_SESSION),
            ("session_type", MSG_SESSION),
            ("open_type", MSG_OPEN),
            ("on_type", MSG_ON),
            ("release_type", MSG_RELEASE),
            ("session_ok_type", MSG_SESSION_OK),
            ("stream_type", MSG_STREAM),
            ("released_type", MSG_RELEASED),
            ("stream_end_type", MSG_STREAM_END),
            ("alive_type", MSG_ALIVE),
        ];
        for (key, value) in pairs {
            assert_eq!(s[key], u64::from(value), "{key}");
        }
    }

    /// The claim an OPEN vector's inner ACQUIRE describes.
    fn vector_claim(inner: &serde_json::Value) -> Claim {
        let claim = match (inner["mode"].as_u64().unwrap(), inner["limit"].as_u64()) {
            (0, _) => Claim::exclusive(),
            (_, Some(0) | None) => Claim::shared(),
            (_, Some(n)) => Claim::semaphore(n as u32),
        };
        claim.with_value(inner["value"].as_str().unwrap_or(""))
    }

    #[test]
    fn client_session_frames_match_vectors() {
        let v = spec::load("vectors/frames.json");
        let cases = v["client_valid_session"].as_array().unwrap();
        assert!(cases.len() >= 9);
        for case in cases {
            let desc = case["desc"].as_str().unwrap();
            let stream = case["stream"].as_u64().map(|s| s as u32);
            let got = match case["type"].as_str().unwrap() {
                "SESSION" => encode_session(case["lease_ms"].as_u64().unwrap()).unwrap(),
                "OPEN" => {
                    let inner = &case["inner"];
                    let name = inner["name"].as_str().unwrap().as_bytes();
                    let lease = inner["lease_ms"].as_u64().unwrap();
                    let frame = match inner["type"].as_str().unwrap() {
                        "ACQUIRE" => encode_claim(name, lease, &vector_claim(inner)).unwrap(),
                        "WATCH" => {
                            encode_watch(name, lease, num(&inner["epoch"]), num(&inner["seq"]))
                                .unwrap()
                        }
                        other => panic!("{desc}: inner {other}"),
                    };
                    encode_open(stream.unwrap(), &frame)
                }
                "ON" => {
                    let value = case["value"].as_str().unwrap().as_bytes();
                    encode_on(stream.unwrap(), &encode_proclaim(value).unwrap())
                }
                "RELEASE" => encode_release(stream.unwrap()),
                "HEARTBEAT" => HEARTBEAT.to_vec(),
                other => panic!("{desc}: type {other}"),
            };
            assert_eq!(got, spec::hex(case["hex"].as_str().unwrap()), "{desc}");
        }
    }

    #[test]
    fn a_session_lease_out_of_range_is_refused_before_sending() {
        for lease in [0, MAX_LEASE_MS + 1] {
            let err = encode_session(lease).unwrap_err();
            assert_eq!(err.code(), Some(0x17), "{lease}");
            assert_eq!(err.reason().unwrap().origin(), crate::Origin::Client);
        }
    }

    fn expected(case: &serde_json::Value) -> SessionFrame {
        let stream = case["stream"].as_u64().unwrap_or(0) as u32;
        match case["type"].as_str().unwrap() {
            "SESSION_OK" => SessionFrame::SessionOk {
                max_streams: case["max_streams"].as_u64().unwrap() as u32,
            },
            "ALIVE" => SessionFrame::Alive,
            "RELEASED" => SessionFrame::Released { stream },
            "STREAM_END" => SessionFrame::StreamEnd {
                stream,
                code: case["code"].as_u64().unwrap() as u8,
                reason: case["reason"].as_str().unwrap().to_owned(),
            },
            "STREAM" => {
                let inner = &case["inner"];
                let inner = match inner["type"].as_str().unwrap() {
                    "WAITING" => Inner::Waiting,
                    "ACQUIRED" => Inner::Acquired {
                        token: num(&inner["token"]),
                    },
                    "WATCHING" => Inner::Watching {
                        epoch: num(&inner["epoch"]),
                        seq: num(&inner["seq"]),
                    },
                    // The event's own bytes, read by the watch decoder.
                    "EVENT" => {
                        let mut d = super::super::watch_codec::WatchDecoder::default();
                        d.feed(&spec::hex(inner["hex"].as_str().unwrap()));
                        match d.next_frame().unwrap().unwrap() {
                            super::super::watch_codec::WatchFrame::Event(e) => Inner::Event(e),
                            other => panic!("{other:?}"),
                        }
                    }
                    other => panic!("inner {other}"),
                };
                SessionFrame::Stream { stream, inner }
            }
            other => panic!("type {other}"),
        }
    }

    #[test]
    fn server_session_frames_decode_whole_byte_by_byte_and_in_chunks() {
        let v = spec::load("vectors/frames.json");
        let cases = v["server_valid_session"].as_array().unwrap();
        assert!(cases.len() >= 9);
        let mut stream = Vec::new();
        let mut want_all = Vec::new();
        for case in cases {
            let desc = case["desc"].as_str().unwrap();
            let bytes = spec::hex(case["hex"].as_str().unwrap());
            let want = expected(case);
            let mut whole = SessionDecoder::default();
            whole.feed(&bytes);
            assert_eq!(whole.next_frame().unwrap(), Some(want.clone()), "{desc}");
            assert_eq!(whole.next_frame().unwrap(), None, "{desc}: nothing left");
            let mut split = SessionDecoder::default();
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
        // Every frame, then an ERROR, in chunks of every size: a chunk that
        // cuts the ERROR ends it with what that chunk held.
        let error_at = stream.len();
        stream.extend_from_slice(&[MSG_ERROR, 0x02, 4, b'k', b'i', b'c', b'k']);
        for chunk in 1..=stream.len() {
            let mut d = SessionDecoder::default();
            let mut got = Vec::new();
            for (i, piece) in stream.chunks(chunk).enumerate() {
                d.feed(piece);
                while let Some(frame) = d.next_frame().unwrap() {
                    got.push(frame);
                }
                if i * chunk + piece.len() > error_at {
                    break;
                }
            }
            let (last, frames) = got.split_last().unwrap();
            assert_eq!(frames, &want_all[..], "chunk size {chunk}");
            let end = ((error_at / chunk) + 1) * chunk;
            let held = end.min(stream.len()) - error_at;
            let code = (held >= 2).then_some(0x02);
            let reason = "kick"[..held.saturating_sub(3).min(4)].to_owned();
            assert_eq!(
                last,
                &SessionFrame::Error { code, reason },
                "chunk size {chunk}"
            );
        }
    }

    #[test]
    fn frames_no_session_receives_are_protocol_errors() {
        // Unknown types, a bare single-claim frame, an ERROR or an ALIVE
        // inside a STREAM.
        for bytes in [
            &[0x00][..],
            &[0x11],
            &[0x12, 0, 0, 0, 0, 0, 0, 0, 1],
            &[0x14],
            &[0x1b],
            &[0xff],
            &[MSG_STREAM, 0, 0, 0, 1, MSG_ERROR, 2, 0],
            &[MSG_STREAM, 0, 0, 0, 1, MSG_ALIVE],
            &[MSG_STREAM, 0, 0, 0, 1, MSG_STREAM],
        ] {
            let mut d = SessionDecoder::default();
            d.feed(bytes);
            let err = d.next_frame().unwrap_err();
            assert!(matches!(err, Error::Protocol(_)), "{bytes:02x?}: {err:?}");
        }
        // A malformed EVENT inside a STREAM: an unknown kind.
        let mut bytes = vec![MSG_STREAM, 0, 0, 0, 3, MSG_EVENT];
        bytes.extend_from_slice(&[0; 16]);
        bytes.push(0xee);
        let mut d = SessionDecoder::default();
        d.feed(&bytes);
        assert!(matches!(d.next_frame(), Err(Error::Protocol(_))));
    }

    #[test]
    fn an_event_inside_a_stream_is_the_watch_codecs_event() {
        let v = spec::load("vectors/frames.json");
        let first = &v["server_valid_watch"][0];
        let event = vector_event(first);
        let mut bytes = vec![MSG_STREAM, 0, 0, 0, 9];
        bytes.extend(spec::hex(first["hex"].as_str().unwrap()));
        let mut d = SessionDecoder::default();
        d.feed(&bytes);
        assert_eq!(
            d.next_frame().unwrap(),
            Some(SessionFrame::Stream {
                stream: 9,
                inner: Inner::Event(event)
            })
        );
    }
}
