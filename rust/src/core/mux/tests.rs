//! The session core's decisions, fed frames and instants without sockets.

use super::*;
use crate::core::codec::encode_claim;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn session_ok(max: u32) -> Vec<u8> {
    let mut v = vec![0x16];
    v.extend(max.to_be_bytes());
    v
}

fn stream(id: u32, inner: &[u8]) -> Vec<u8> {
    let mut v = vec![0x17];
    v.extend(id.to_be_bytes());
    v.extend_from_slice(inner);
    v
}

fn acquired(id: u32, token: u64) -> Vec<u8> {
    let mut inner = vec![0x12];
    inner.extend(token.to_be_bytes());
    stream(id, &inner)
}

fn waiting(id: u32) -> Vec<u8> {
    stream(id, &[0x11])
}

fn released_frame(id: u32) -> Vec<u8> {
    let mut v = vec![0x18];
    v.extend(id.to_be_bytes());
    v
}

fn stream_end(id: u32, code: u8) -> Vec<u8> {
    let mut v = vec![0x19];
    v.extend(id.to_be_bytes());
    v.extend([code, 1, b'x']);
    v
}

const ALIVE: [u8; 1] = [0x1a];

/// An open session with lease 1000 ms at `t0`.
fn open_session(t0: Instant) -> Mux {
    let mut m = Mux::start("test:1", 1000, t0).unwrap();
    assert_eq!(m.take_output(), [0x05, 0x04, 0, 0, 0x03, 0xe8]);
    assert!(!m.opened().unwrap());
    let turn = m.step(Input::Bytes(&session_ok(10)), t0);
    assert!(turn.wake && turn.close.is_none());
    assert!(m.opened().unwrap());
    assert_eq!(m.max_streams(), 10);
    m
}

fn open_claim(m: &mut Mux, name: &str, claim: Claim, mode: Mode, now: Instant) -> u32 {
    let frame = encode_claim(name.as_bytes(), 1000, &claim).unwrap();
    let id = m.open(name, claim, &frame, mode, now).unwrap();
    let out = m.take_output();
    assert_eq!(out[0], 0x06);
    assert_eq!(&out[1..5], &id.to_be_bytes());
    assert_eq!(&out[5..], &frame[..]);
    id
}

fn state(m: &mut Mux, id: u32, now: Instant) -> StreamState {
    m.poll(id, now).0
}

fn is_released(state: StreamState, want: bool) -> bool {
    matches!(state, StreamState::Released { acked } if acked == want)
}

fn cause(state: StreamState) -> Error {
    match state {
        StreamState::Lost(Error::Lost(cause)) => *cause,
        StreamState::Failed(err) => err,
        other => panic!("neither lost nor failed: {other:?}"),
    }
}

#[test]
fn ids_start_at_1_and_increase_and_pipelined_claims_are_granted_apart() {
    let t0 = Instant::now();
    let mut m = open_session(t0);
    let ids: Vec<u32> = (0..3)
        .map(|i| open_claim(&mut m, &format!("l{i}"), Claim::exclusive(), Mode::Wait, t0))
        .collect();
    assert_eq!(ids, [1, 2, 3]);
    let mut bytes = acquired(2, 20);
    bytes.extend(waiting(1));
    bytes.extend(acquired(3, 30));
    m.step(Input::Bytes(&bytes), t0 + ms(5));
    assert!(matches!(state(&mut m, 1, t0 + ms(5)), StreamState::Waiting));
    let held = |state, want| {
        matches!(state, StreamState::Held { token, valid_until }
            if token == want && valid_until == t0 + ms(800))
    };
    assert!(held(state(&mut m, 2, t0 + ms(5)), 20));
    assert!(held(state(&mut m, 3, t0 + ms(5)), 30));
    m.step(Input::Bytes(&acquired(1, 40)), t0 + ms(6));
    assert!(held(state(&mut m, 1, t0 + ms(6)), 40));
    assert_eq!(m.open_streams(), 3);
}

#[test]
fn one_heartbeat_in_flight_and_alive_moves_every_claims_deadline() {
    let t0 = Instant::now();
    let mut m = open_session(t0);
    let id = open_claim(&mut m, "a", Claim::exclusive(), Mode::Wait, t0);
    m.step(Input::Bytes(&acquired(id, 7)), t0);
    assert_eq!(m.next_wakeup(), Some(t0 + ms(250)));
    m.step(Input::Timer, t0 + ms(250));
    assert_eq!(m.take_output(), HEARTBEAT);
    // Nothing more while it is in flight: the next wake is the deadline.
    m.step(Input::Timer, t0 + ms(600));
    assert!(m.take_output().is_empty());
    assert_eq!(m.next_wakeup(), Some(t0 + ms(800)));
    m.step(Input::Bytes(&ALIVE), t0 + ms(610));
    let StreamState::Held { valid_until, .. } = state(&mut m, id, t0 + ms(610)) else {
        panic!("not held");
    };
    assert_eq!(valid_until, t0 + ms(250 + 800));
    // The next heartbeat was due already (spaced send to send).
    assert_eq!(m.take_output(), HEARTBEAT);
    m.step(Input::Bytes(&ALIVE), t0 + ms(615));
    // An ALIVE nobody asked for breaks the protocol.
    let turn = m.step(Input::Bytes(&ALIVE), t0 + ms(620));
    assert_eq!(turn.close, Some(Close::Now));
    assert!(matches!(
        cause(state(&mut m, id, t0 + ms(620))),
        Error::Protocol(_)
    ));
}

#[test]
fn at_the_deadline_every_held_claim_is_lost_first_and_the_close_waits_for_the_lease() {
    let t0 = Instant::now();
    let mut m = open_session(t0);
    let a = open_claim(&mut m, "a", Claim::exclusive(), Mode::Wait, t0);
    let b = open_claim(&mut m, "b", Claim::shared(), Mode::Wait, t0);
    let c = open_claim(&mut m, "c", Claim::exclusive(), Mode::Wait, t0);
    let d = open_claim(&mut m, "d", Claim::exclusive(), Mode::Wait, t0);
    let mut bytes = acquired(a, 1);
    bytes.extend(acquired(b, 2));
    bytes.extend(waiting(c));
    bytes.extend(acquired(d, 4));
    m.step(Input::Bytes(&bytes), t0);
    m.release(d);
    assert_eq!(m.take_output(), encode_release(d));
    assert!(matches!(
        state(&mut m, a, t0 + ms(799)),
        StreamState::Held { .. }
    ));
    // A poll at the deadline decides, before any timer.
    let (lost, newly) = m.poll(a, t0 + ms(800));
    assert!(newly);
    assert!(matches!(
        cause(lost),
        Error::ClientTimeout { lease_ms: 1000 }
    ));
    assert!(matches!(
        cause(state(&mut m, b, t0 + ms(800))),
        Error::ClientTimeout { .. }
    ));
    assert!(matches!(
        state(&mut m, c, t0 + ms(800)),
        StreamState::Failed(Error::ClientTimeout { .. })
    ));
    // A claim released before is not lost.
    assert!(is_released(state(&mut m, d, t0 + ms(800)), true));
    assert!(!m.poll(a, t0 + ms(801)).1, "decided once");
    // Late grants are dropped; the connection stays open, silent, until
    // the lease since the last answered send.
    let turn = m.step(Input::Bytes(&acquired(c, 3)), t0 + ms(900));
    assert_eq!(turn, Turn::default());
    assert!(matches!(
        state(&mut m, c, t0 + ms(900)),
        StreamState::Failed(_)
    ));
    assert!(m.take_output().is_empty());
    assert_eq!(m.next_wakeup(), Some(t0 + ms(1000)));
    assert_eq!(m.write_bound(), Some(t0 + ms(1000)));
    assert_eq!(m.step(Input::Timer, t0 + ms(1000)).close, Some(Close::Now));
    assert_eq!(m.write_bound(), None);
    assert_eq!(m.next_wakeup(), None);
    // No claim opens on a session that is over.
    let frame = encode_claim(b"e", 1000, &Claim::exclusive()).unwrap();
    let err = m.open("e", Claim::exclusive(), &frame, Mode::Wait, t0 + ms(1001));
    assert!(matches!(err, Err(Error::ClientTimeout { .. })));
}

#[test]
fn an_error_at_its_type_byte_loses_every_held_claim_before_the_close() {
    let t0 = Instant::now();
    let mut m = open_session(t0);
    let a = open_claim(&mut m, "a", Claim::exclusive(), Mode::Wait, t0);
    let b = open_claim(&mut m, "b", Claim::exclusive(), Mode::Wait, t0);
    let mut bytes = acquired(a, 1);
    bytes.extend(waiting(b));
    bytes.push(0x13); // ERROR, cut after its type byte
    let turn = m.step(Input::Bytes(&bytes), t0);
    assert!(turn.wake);
    assert_eq!(turn.close, Some(Close::Now));
    assert!(matches!(cause(state(&mut m, a, t0)), Error::ServerEnded));
    assert!(matches!(
        state(&mut m, b, t0),
        StreamState::Failed(Error::ServerEnded)
    ));

    let mut m = open_session(t0);
    let a = open_claim(&mut m, "a", Claim::exclusive(), Mode::Wait, t0);
    m.step(Input::Bytes(&acquired(a, 1)), t0);
    m.step(Input::Bytes(&[0x13, 0x01, 0]), t0);
    let loss = cause(state(&mut m, a, t0));
    assert_eq!(loss.code(), Some(0x01));
    assert!(loss.is_temporary());
    // The end of the connection does the same.
    let mut m = open_session(t0);
    let a = open_claim(&mut m, "a", Claim::exclusive(), Mode::Wait, t0);
    m.step(Input::Bytes(&acquired(a, 1)), t0);
    let eof = Error::io(std::io::ErrorKind::UnexpectedEof.into());
    assert_eq!(m.step(Input::End(eof), t0).close, Some(Close::Now));
    assert!(matches!(cause(state(&mut m, a, t0)), Error::Io(_)));
}

#[test]
fn stream_end_fails_a_claim_not_granted_and_loses_a_held_one_alone() {
    let t0 = Instant::now();
    let mut m = open_session(t0);
    let a = open_claim(&mut m, "a", Claim::exclusive(), Mode::Wait, t0);
    let b = open_claim(&mut m, "b", Claim::semaphore(2), Mode::Wait, t0);
    let c = open_claim(&mut m, "c", Claim::exclusive(), Mode::Wait, t0);
    m.step(Input::Bytes(&acquired(a, 1)), t0);
    m.step(Input::Bytes(&acquired(c, 3)), t0);
    let mut bytes = stream_end(a, 0x02);
    bytes.extend(stream_end(b, 0x1a));
    let turn = m.step(Input::Bytes(&bytes), t0);
    assert_eq!(turn.close, None, "the session lives on");
    let kicked = cause(state(&mut m, a, t0));
    assert!(matches!(kicked, Error::AdminClosed(_)), "{kicked:?}");
    assert!(matches!(
        state(&mut m, b, t0),
        StreamState::Failed(Error::LimitMismatch(_))
    ));
    assert!(matches!(
        state(&mut m, c, t0),
        StreamState::Held { token: 3, .. }
    ));
    // Too many streams: temporary, and returned (no retry inside a session).
    let d = open_claim(&mut m, "d", Claim::exclusive(), Mode::Wait, t0);
    m.step(Input::Bytes(&stream_end(d, 0x05)), t0);
    let StreamState::Failed(err) = state(&mut m, d, t0) else {
        panic!()
    };
    assert!(err.is_temporary() && err.code() == Some(0x05), "{err:?}");
}

#[test]
fn try_mode_turns_waiting_into_busy_and_lets_go_of_the_place() {
    let t0 = Instant::now();
    let mut m = open_session(t0);
    let id = open_claim(&mut m, "pool", Claim::semaphore(4), Mode::Try, t0);
    m.step(Input::Bytes(&waiting(id)), t0);
    assert_eq!(m.take_output(), encode_release(id));
    match state(&mut m, id, t0) {
        StreamState::Failed(Error::Busy {
            name,
            shared: true,
            limit: Some(4),
        }) => assert_eq!(name, "pool"),
        other => panic!("{other:?}"),
    }
    assert!(m.unreleased(id), "out of the queue only at RELEASED");
    // The grant that crossed the RELEASE, and the RELEASED, are dropped.
    m.step(Input::Bytes(&acquired(id, 9)), t0);
    assert!(m.unreleased(id));
    m.step(Input::Bytes(&released_frame(id)), t0);
    assert!(!m.unreleased(id));
    assert!(matches!(
        state(&mut m, id, t0),
        StreamState::Failed(Error::Busy { .. })
    ));
    assert!(m.is_open(t0).0);
}

#[test]
fn a_release_counts_at_once_and_is_acknowledged_by_released() {
    let t0 = Instant::now();
    let mut m = open_session(t0);
    let id = open_claim(&mut m, "a", Claim::exclusive(), Mode::Wait, t0);
    m.step(Input::Bytes(&acquired(id, 5)), t0);
    m.release(id);
    assert_eq!(m.take_output(), encode_release(id));
    assert!(is_released(state(&mut m, id, t0), false));
    // Frames of the stream after the RELEASE are dropped, an end included:
    // the RELEASED that answers the RELEASE still comes.
    m.step(Input::Bytes(&stream_end(id, 0x02)), t0);
    assert!(is_released(state(&mut m, id, t0), false));
    assert!(m.unreleased(id));
    m.step(Input::Bytes(&released_frame(id)), t0);
    assert!(is_released(state(&mut m, id, t0), true));
    assert!(!m.unreleased(id));
    let id = open_claim(&mut m, "b", Claim::exclusive(), Mode::Wait, t0);
    m.release(id);
    m.take_output();
    m.step(Input::Bytes(&released_frame(id)), t0);
    assert!(is_released(state(&mut m, id, t0), true));
    // A forgotten stream's late frames are dropped too.
    m.forget(id);
    assert_eq!(m.step(Input::Bytes(&released_frame(id)), t0).close, None);
    assert_eq!(m.open_streams(), 0);
}

#[test]
fn frames_for_streams_never_opened_end_the_session() {
    let t0 = Instant::now();
    for bytes in [
        acquired(1, 1),
        released_frame(0),
        stream_end(7, 2),
        waiting(2),
    ] {
        let mut m = open_session(t0);
        let a = open_claim(&mut m, "a", Claim::exclusive(), Mode::Wait, t0);
        if bytes == waiting(2) {
            m.step(Input::Bytes(&acquired(a, 1)), t0);
        }
        let bytes = if bytes == acquired(1, 1) {
            stream(2, &[0x11])
        } else {
            bytes
        };
        let turn = m.step(Input::Bytes(&bytes), t0);
        assert_eq!(turn.close, Some(Close::Now), "{bytes:02x?}");
        assert!(matches!(m.ended(), Some(Error::Protocol(_))));
    }
    // A WAITING after the grant, a second token, a frame before SESSION_OK.
    let mut m = open_session(t0);
    let a = open_claim(&mut m, "a", Claim::exclusive(), Mode::Wait, t0);
    m.step(Input::Bytes(&acquired(a, 1)), t0);
    m.step(Input::Bytes(&acquired(a, 2)), t0);
    assert!(matches!(cause(state(&mut m, a, t0)), Error::Protocol(_)));
    let mut m = Mux::start("test:1", 1000, t0).unwrap();
    m.step(Input::Bytes(&ALIVE), t0);
    assert!(matches!(m.opened(), Err(Error::Protocol(_))));
}

#[test]
fn proclaim_sends_on_and_its_reply_acknowledges_it() {
    let t0 = Instant::now();
    let mut m = open_session(t0);
    let claim = Claim::exclusive().with_value("v1");
    let id = open_claim(&mut m, "leader", claim, Mode::Wait, t0);
    m.step(Input::Bytes(&acquired(id, 8)), t0);
    assert_eq!(m.proclaim(id, b"v2", t0).unwrap(), 1);
    assert_eq!(m.proclaim(id, b"v3", t0).unwrap(), 2);
    let mut want = encode_on(id, &encode_proclaim(b"v2").unwrap());
    want.extend(encode_on(id, &encode_proclaim(b"v3").unwrap()));
    assert_eq!(m.take_output(), want);
    m.step(Input::Bytes(&acquired(id, 8)), t0);
    assert_eq!(m.proclaimed(id), 1);
    m.step(Input::Bytes(&acquired(id, 8)), t0);
    assert_eq!(m.proclaimed(id), 2);
    // A third reply answers nothing.
    m.step(Input::Bytes(&acquired(id, 8)), t0);
    assert!(matches!(m.ended(), Some(Error::Protocol(_))));

    let mut m = open_session(t0);
    let id = open_claim(&mut m, "plain", Claim::exclusive(), Mode::Wait, t0);
    m.step(Input::Bytes(&acquired(id, 8)), t0);
    assert!(matches!(
        m.proclaim(id, b"x", t0),
        Err(Error::NoValue { .. })
    ));
    let id = open_claim(&mut m, "v", Claim::shared().with_value("a"), Mode::Wait, t0);
    m.step(Input::Bytes(&acquired(id, 9)), t0);
    let err = m.proclaim(id, &[b'v'; 1025], t0).unwrap_err();
    assert_eq!(err.code(), Some(0x1b));
    assert!(m.take_output().is_empty(), "nothing sent for refusals");
}

#[test]
fn close_releases_every_claim_without_a_loss_and_hands_the_connection_back() {
    let t0 = Instant::now();
    let mut m = open_session(t0);
    let a = open_claim(&mut m, "a", Claim::exclusive(), Mode::Wait, t0);
    let b = open_claim(&mut m, "b", Claim::exclusive(), Mode::Wait, t0);
    m.step(Input::Bytes(&acquired(a, 1)), t0);
    let turn = m.close(t0 + ms(10));
    let until = t0 + ms(10 + 800);
    assert_eq!(turn.close, Some(Close::HandBack { until }));
    assert_eq!(
        m.write_bound(),
        Some(until),
        "no write outlasts the hand-back"
    );
    assert!(is_released(state(&mut m, a, t0 + ms(20)), true));
    assert!(is_released(state(&mut m, b, t0 + ms(20)), true));
    assert_eq!(m.next_wakeup(), Some(until));
    let eof = Error::io(std::io::ErrorKind::UnexpectedEof.into());
    assert_eq!(m.step(Input::End(eof), t0 + ms(30)), Turn::default());
    assert_eq!(m.next_wakeup(), None);
    assert!(matches!(m.ended(), Some(Error::Cancelled)));
}

#[test]
fn a_first_byte_that_starts_no_message_is_not_monolock() {
    let t0 = Instant::now();
    let mut m = Mux::start("127.0.0.1:7118", 1000, t0).unwrap();
    m.step(Input::Bytes(b"HTTP/1.1 400 Bad Request\r\n"), t0);
    assert!(matches!(m.opened(), Err(Error::NotMonolock { .. })));
    // A server without sessions answers SESSION with 0x13 (it reads an
    // unknown type byte), or 0x10 or 0x11: terminal, and it says so.
    for code in [0x13, 0x10, 0x11] {
        let mut m = Mux::start("old:7117", 1000, t0).unwrap();
        m.step(Input::Bytes(&[0x13, code, 0]), t0);
        let err = m.opened().unwrap_err();
        assert!(
            matches!(err, Error::SessionsUnsupported { ref addr, .. } if addr == "old:7117"),
            "{err:?}"
        );
        assert_eq!(err.code(), Some(code));
        assert!(!err.is_temporary());
    }
    let err = Mux::start("old:7117", 1000, t0)
        .map(|mut m| {
            m.step(Input::Bytes(&[0x13, 0x13, 26]), t0);
            m.step(Input::Bytes(b"unknown message type: 0x05"), t0);
            m.opened().unwrap_err()
        })
        .unwrap();
    assert_eq!(
        err.to_string(),
        "monolock: server old:7117 does not support sessions (it answered SESSION, \
         protocol version 4, with 0x13); take locks on connections of their own, or \
         upgrade the server"
    );
    // Any other refusal stays itself: a lease over the server's maximum.
    let mut m = Mux::start("x:1", 1000, t0).unwrap();
    m.step(Input::Bytes(&[0x13, 0x17, 0]), t0);
    assert!(matches!(m.opened().unwrap_err(), Error::InvalidLease(_)));
    // No SESSION_OK within the client timeout.
    let mut m = Mux::start("slow:7117", 1000, t0).unwrap();
    assert_eq!(m.next_wakeup(), Some(t0 + ms(800)));
    m.step(Input::Timer, t0 + ms(800));
    assert!(matches!(m.opened(), Err(Error::ClientTimeout { .. })));
}

#[test]
fn the_last_stream_id_is_used_once_then_a_new_session_is_needed() {
    let t0 = Instant::now();
    let mut m = open_session(t0);
    m.next_id = MAX_STREAM_ID;
    let id = open_claim(&mut m, "a", Claim::exclusive(), Mode::Wait, t0);
    assert_eq!(id, u32::MAX);
    let frame = encode_claim(b"b", 1000, &Claim::exclusive()).unwrap();
    let err = m
        .open("b", Claim::exclusive(), &frame, Mode::Wait, t0)
        .unwrap_err();
    assert_eq!(err.code(), Some(0x05));
    assert!(m.take_output().is_empty());
    assert!(Mux::start("x", 0, t0).is_err(), "a lease of 0 is refused");
}

/// An EVENT of `epoch`/`seq`, of `kind`, with `body`, in a STREAM.
fn event(id: u32, epoch: u64, seq: u64, kind: u8, body: &[u8]) -> Vec<u8> {
    let mut inner = vec![0x14];
    inner.extend(epoch.to_be_bytes());
    inner.extend(seq.to_be_bytes());
    inner.push(kind);
    inner.extend_from_slice(body);
    stream(id, &inner)
}

fn watching_frame(id: u32, epoch: u64, seq: u64) -> Vec<u8> {
    let mut inner = vec![0x15];
    inner.extend(epoch.to_be_bytes());
    inner.extend(seq.to_be_bytes());
    stream(id, &inner)
}

/// An empty snapshot at (5, 3), its end, and the WATCHING that answers
/// the OPEN.
fn first_picture(id: u32) -> Vec<u8> {
    let mut v = event(id, 5, 3, 1, &[0; 13]);
    v.extend(event(id, 5, 3, 4, &[]));
    v.extend(watching_frame(id, 5, 3));
    v
}

/// A live grant of token 9, the next event after (5, `seq` - 1).
fn granted(id: u32, seq: u64) -> Vec<u8> {
    let mut body = 1u64.to_be_bytes().to_vec(); // arrival
    body.extend(9u64.to_be_bytes());
    body.extend([0, 0, 0, 0, 0, 0, 0]); // mode, limit, held back ms
    body.extend([0, 0, 0]); // identity, value
    event(id, 5, seq, 5, &body)
}

fn open_watch(m: &mut Mux, name: &str, now: Instant) -> u32 {
    let frame = crate::core::watch_codec::encode_watch(name.as_bytes(), 1000, 0, 0).unwrap();
    let id = m.open_watch(name, &frame, now).unwrap();
    assert_eq!(m.take_output(), encode_open(id, &frame));
    id
}

#[test]
fn a_watch_stream_is_vouched_for_by_its_watching_then_by_every_alive() {
    let t0 = Instant::now();
    let mut m = open_session(t0);
    let claim = open_claim(&mut m, "c", Claim::exclusive(), Mode::Wait, t0);
    let w = open_watch(&mut m, "w", t0 + ms(10));
    let (state, g0, ended) = m.watch_view(w, t0 + ms(10)).unwrap();
    assert!(!state.known && ended.is_none());
    m.step(Input::Bytes(&first_picture(w)), t0 + ms(20));
    let (state, g1, _) = m.watch_view(w, t0 + ms(20)).unwrap();
    assert!(state.known && g1 > g0);
    assert_eq!(
        state.valid_until,
        Some(t0 + ms(10 + 800)),
        "the OPEN's send"
    );
    // A live event; then the ALIVE of a heartbeat sent after it vouches.
    m.step(Input::Bytes(&granted(w, 4)), t0 + ms(100));
    assert_eq!(m.watch_view(w, t0 + ms(100)).unwrap().0.holders[0].token, 9);
    m.step(Input::Timer, t0 + ms(250));
    assert_eq!(m.take_output(), HEARTBEAT);
    m.step(Input::Bytes(&ALIVE), t0 + ms(260));
    let (state, _, _) = m.watch_view(w, t0 + ms(260)).unwrap();
    assert_eq!(state.valid_until, Some(t0 + ms(250 + 800)));
    assert_eq!((state.epoch, state.seq), (5, 4));
    // Claims and watches share the stream ids and the deadline.
    assert!(m.watch_view(claim, t0).is_none());
    let (state, _, ended) = m.watch_view(w, t0 + ms(1050)).unwrap();
    assert!(!state.known, "unknown from the session's deadline on");
    assert!(matches!(ended, Some(Error::ClientTimeout { .. })));
}

#[test]
fn a_watch_that_breaks_the_rules_or_is_ended_alone_leaves_the_session_alive() {
    let t0 = Instant::now();
    let mut m = open_session(t0);
    let w = open_watch(&mut m, "w", t0);
    m.step(Input::Bytes(&first_picture(w)), t0);
    // A gap (seq 6 after 3): unknown, the watch ends, RELEASE goes.
    m.step(Input::Bytes(&granted(w, 6)), t0 + ms(5));
    let (state, _, ended) = m.watch_view(w, t0 + ms(5)).unwrap();
    assert!(!state.known);
    assert!(matches!(ended, Some(Error::Protocol(_))), "{ended:?}");
    assert_eq!(m.take_output(), encode_release(w));
    assert!(m.unreleased(w));
    assert!(m.is_open(t0 + ms(5)).0);
    // A watch that fell behind is ended by the server alone.
    let v = open_watch(&mut m, "v", t0 + ms(6));
    m.step(Input::Bytes(&first_picture(v)), t0 + ms(7));
    m.step(Input::Bytes(&stream_end(v, 0x04)), t0 + ms(8));
    let (state, _, ended) = m.watch_view(v, t0 + ms(8)).unwrap();
    assert!(!state.known);
    assert_eq!(ended.unwrap().code(), Some(0x04));
    // A claim frame on a watch stream breaks the protocol.
    let u = open_watch(&mut m, "u", t0 + ms(9));
    m.step(Input::Bytes(&acquired(u, 3)), t0 + ms(10));
    assert!(matches!(m.ended(), Some(Error::Protocol(_))));
}
