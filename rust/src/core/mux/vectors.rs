//! spec/vectors/streams.json: timed event sequences of a session of
//! streams, fed to the core as whole frames, without sockets.
//!
//! The core keeps where each claim stands rather than a list of events, so
//! the runner tells what a handle would see: after every input (and the
//! tick at the same instant), each claim whose state changed from what was
//! last told is told anew, in the vectors' words and order: `ready`, the
//! claims by stream id, `ended`, the sends, `close`.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::core::codec::encode_claim;
use crate::core::session_codec::{
    MSG_ALIVE, MSG_RELEASED, MSG_SESSION_OK, MSG_STREAM, MSG_STREAM_END,
};
use crate::spec as vectors;

/// A case being run: the core, its clock's origin and what was told.
struct Runner {
    lease_ms: u32,
    t0: Instant,
    acquire: Vec<u8>,
    mux: Option<Mux>,
    /// What each claim's owner was last told.
    told: BTreeMap<u32, String>,
    /// Claims the application let go of.
    let_go: BTreeSet<u32>,
}

impl Runner {
    fn new(lease_ms: u32) -> Runner {
        let acquire = encode_claim(b"a", u64::from(lease_ms), &Claim::exclusive()).unwrap();
        Runner {
            lease_ms,
            t0: Instant::now(),
            acquire,
            mux: None,
            told: BTreeMap::new(),
            let_go: BTreeSet::new(),
        }
    }

    fn mux(&mut self) -> &mut Mux {
        self.mux.as_mut().expect("no connect yet")
    }

    /// Applies one input at `at` ms, ticks the core at the same instant
    /// (unless it closed), and describes what it did.
    fn feed(&mut self, input: &str, at: u64) -> Vec<String> {
        let now = self.t0 + Duration::from_millis(at);
        let f: Vec<&str> = input.split_whitespace().collect();
        let (accepted, ended) = match &self.mux {
            Some(m) => (m.accepted, m.ended().is_some()),
            None => (false, false),
        };
        let mut out = Vec::new();
        let mut turn = Turn::default();
        match f[0] {
            "connect" => self.mux = Some(Mux::start("test:1", self.lease_ms, now).unwrap()),
            "timer" => turn = self.mux().step(Input::Timer, now),
            "eof" => {
                let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
                turn = self.mux().step(Input::End(Error::io(eof)), now);
            }
            "close" => turn = self.mux().close(now),
            "open" => {
                let mode = match f[1] {
                    "wait" => Mode::Wait,
                    "try" => Mode::Try,
                    other => panic!("open {other}"),
                };
                let frame = self.acquire.clone();
                let claim = Claim::exclusive();
                if self.mux().open("a", claim, &frame, mode, now).is_err() {
                    out.push("refused".to_owned());
                }
            }
            "release" => {
                let id = num(f[1]) as u32;
                self.let_go.insert(id);
                self.mux().release(id);
            }
            "recv" => {
                let bytes = frame(&f[1..]);
                turn = self.mux().step(Input::Bytes(&bytes), now);
            }
            other => panic!("unknown input {input:?} ({other})"),
        }
        if turn.close.is_none() && f[0] != "timer" {
            let more = self.mux().step(Input::Timer, now);
            turn.close = more.close;
        }

        let m = self.mux.as_ref().unwrap();
        if m.accepted && !accepted {
            out.push("ready".to_owned());
        }
        let mut told = Vec::new();
        for (&id, stream) in &m.streams {
            let now_told = tell(id, stream, self.let_go.contains(&id));
            if let Some(now_told) = now_told {
                if self.told.get(&id) != Some(&now_told) {
                    told.push((id, now_told.clone()));
                    self.told.insert(id, now_told);
                }
            }
        }
        told.sort_by_key(|(id, _)| *id);
        out.extend(told.into_iter().map(|(_, t)| t));
        match m.ended() {
            // The application's own close is no end to tell.
            Some(Error::Cancelled) | None => {}
            Some(cause) if !ended => out.push(format!("ended {}", cause_word(&cause))),
            Some(_) => {}
        }
        let acquire = self.acquire.clone();
        out.extend(sends(&self.mux().take_output(), &acquire));
        if turn.close.is_some() {
            out.push("close".to_owned());
        }
        out
    }

    fn state(&self) -> &'static str {
        match self.mux.as_ref().unwrap().phase {
            Phase::Opening => "connecting",
            Phase::Open => "live",
            Phase::Lost => "timed out",
            Phase::HandingBack { .. } | Phase::Closed => "closed",
        }
    }

    /// Every claim's validity deadline, in ms from the connect.
    fn valid_until(&self) -> f64 {
        let deadline = self.mux.as_ref().unwrap().deadline();
        deadline.duration_since(self.t0).as_secs_f64() * 1000.0
    }
}

/// What the owner of claim `id` knows of it now, in the vectors' words;
/// `None` while there is nothing to tell (an OPEN or a RELEASE unanswered).
fn tell(id: u32, stream: &Stream, let_go: bool) -> Option<String> {
    let done = !stream.unreleased; // no RELEASE of it awaits RELEASED
    Some(match &stream.state {
        StreamState::Opening | StreamState::Watching => return None,
        StreamState::Waiting => format!("waiting {id}"),
        StreamState::Held { token, .. } => format!("grant {id} {token}"),
        StreamState::Released { acked: false } => return None,
        StreamState::Released { acked: true } => format!("released {id}"),
        // A claim that had ended before its release is released at once.
        StreamState::Lost(_) | StreamState::Failed(_) if let_go && done => {
            format!("released {id}")
        }
        StreamState::Lost(Error::Lost(cause)) => format!("lost {id} {}", cause_word(cause)),
        StreamState::Lost(other) => panic!("stream {id}: a loss without a cause: {other:?}"),
        // A try claim found busy fails once its place is given back.
        StreamState::Failed(_) if !done => return None,
        StreamState::Failed(err) => format!("fail {id} {}", cause_word(err)),
    })
}

/// A cause in the vectors' words.
fn cause_word(err: &Error) -> String {
    match err {
        Error::ClientTimeout { .. } => "timeout".to_owned(),
        Error::Io(_) => "io".to_owned(),
        Error::Protocol(_) => "protocol".to_owned(),
        Error::Busy { .. } => "busy".to_owned(),
        other => match other.code() {
            Some(code) => format!("server 0x{code:02x}"),
            None => panic!("a cause the vectors have no word for: {other:?}"),
        },
    }
}

/// The frames of `bytes`, in the vectors' words; an OPEN must carry the
/// case's ACQUIRE.
fn sends(mut bytes: &[u8], acquire: &[u8]) -> Vec<String> {
    let id = |b: &[u8]| u32::from_be_bytes(b[1..5].try_into().unwrap());
    let mut out = Vec::new();
    while let Some(&kind) = bytes.first() {
        let (word, len) = match kind {
            0x05 => ("send SESSION".to_owned(), 6),
            0x02 => ("send HEARTBEAT".to_owned(), 1),
            0x06 => {
                assert_eq!(&bytes[5..5 + acquire.len()], acquire, "OPEN's ACQUIRE");
                (format!("send OPEN {}", id(bytes)), 5 + acquire.len())
            }
            0x08 => (format!("send RELEASE {}", id(bytes)), 5),
            other => panic!("an unknown frame sent: 0x{other:02x} in {bytes:02x?}"),
        };
        out.push(word);
        bytes = &bytes[len..];
    }
    out
}

fn num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
        None => s.parse().unwrap(),
    }
}

/// One whole server frame, as frames.json server_valid_session (and
/// server_valid for ERROR) lays it out.
fn frame(f: &[&str]) -> Vec<u8> {
    let stream = |kind: u8, id: &str| {
        let mut v = vec![kind];
        v.extend((num(id) as u32).to_be_bytes());
        v
    };
    match f {
        ["SESSION_OK", max] => {
            let mut v = vec![MSG_SESSION_OK];
            v.extend((num(max) as u32).to_be_bytes());
            v
        }
        ["ALIVE"] => vec![MSG_ALIVE],
        ["WAITING", id] => {
            let mut v = stream(MSG_STREAM, id);
            v.push(0x11);
            v
        }
        ["ACQUIRED", id, token] => {
            let mut v = stream(MSG_STREAM, id);
            v.push(0x12);
            v.extend(num(token).to_be_bytes());
            v
        }
        ["RELEASED", id] => stream(MSG_RELEASED, id),
        ["STREAM_END", id, code] => {
            let mut v = stream(MSG_STREAM_END, id);
            v.extend([num(code) as u8, 0]);
            v
        }
        ["ERROR", code] => vec![0x13, num(code) as u8, 0],
        other => panic!("unknown frame {other:?}"),
    }
}

#[test]
fn streams_vectors() {
    // The server's frames as the vectors name them (frames.json).
    assert_eq!(frame(&["SESSION_OK", "10000"]), vectors::hex("1600002710"));
    assert_eq!(frame(&["WAITING", "1"]), vectors::hex("170000000111"));
    assert_eq!(
        frame(&["ACQUIRED", "2", "9007199254740993"]),
        vectors::hex("1700000002120020000000000001")
    );
    assert_eq!(frame(&["RELEASED", "7"]), vectors::hex("1800000007"));
    assert_eq!(
        frame(&["STREAM_END", "4294967295", "0x05"]),
        vectors::hex("19ffffffff0500")
    );
    assert_eq!(frame(&["ALIVE"]), vectors::hex("1a"));

    // The OPEN carries frames.json client_valid_v1's ACQUIRE.
    let acquire = Runner::new(1000).acquire;
    assert_eq!(acquire, vectors::hex("0101000003e8000161"));

    let v = vectors::load("vectors/streams.json");
    let cases = v["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let mut r = Runner::new(case["lease_ms"].as_u64().unwrap() as u32);
        for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
            let input = step["in"].as_str().unwrap();
            let at = step["at"].as_u64().unwrap();
            let where_ = format!("{name} step {} ({input} at {at})", i + 1);
            let want: Vec<&str> = step["out"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| o.as_str().unwrap())
                .collect();
            assert_eq!(r.feed(input, at), want, "{where_}");
            if let Some(state) = step["state"].as_str() {
                assert_eq!(r.state(), state, "{where_}: state");
            }
            if let Some(want) = step["valid_until"].as_f64() {
                let got = r.valid_until();
                assert!((got - want).abs() < 1e-3, "{where_}: valid_until {got}");
            }
        }
    }
}
