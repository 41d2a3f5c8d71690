//! The state of one connection (one claim on one lock), without any I/O.
//!
//! The blocking and the tokio client both drive a [`Session`]: they feed it
//! every [`Input`] (bytes read, a timer that fired, the end of the stream,
//! the application letting go) and do what the returned [`Turn`] says, in
//! its order: tell, send, close. Every decision lives here, once: reply
//! accounting, RTT sampling, the validity deadline, the loss and when it is
//! told, the close at the lease, ignoring late replies, and that a
//! promotion after a waiting claim's deadline is no grant. A claim with a
//! value (protocol version 3) may also proclaim a new one: the PROCLAIM
//! goes when nothing is in flight, instead of a heartbeat, and its one
//! reply acknowledges it.
//!
//! The rule for a held lock (spec/vectors/session.json runs it): at
//! `sendTime(last acked) + 0.8·lease` with no newer ack the loss is decided
//! once and told before anything else happens. Then the client stops
//! heartbeating and ignores replies, but keeps the connection open until
//! the application lets go (close at once) or `sendTime(last acked) + lease`
//! has passed (close then): a close earlier would let the server hand the
//! lock to the next waiter inside the 0.2·lease margin the rule keeps.

use std::time::{Duration, Instant};

use super::codec::{encode_proclaim, Decoder, Frame, HEARTBEAT};
use super::retry::Mode;
use super::schedule::Schedule;
use crate::claim::Claim;
use crate::error::Error;

/// Where the claim stands, as far as the client knows (the vectors'
/// states; the adapters only need the [`Turn`]s and [`Session::poll`]).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// ACQUIRE sent, no reply yet.
    Connecting,
    /// Queued behind the holder (WAITING).
    Waiting,
    /// The lock is granted and valid.
    Held,
    /// The loss was told; the connection stays open until release or lease.
    Lost,
    /// The claim is over (a hand-back may still be reading the server's
    /// close).
    Closed,
}

/// The internal phase: [`State`] plus what the phases need to remember.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connecting,
    Waiting,
    Held(u64),
    Lost,
    /// Released while held: the client half-closed and reads until the
    /// server closes its side (after freeing the lock) or until `until`.
    HandingBack {
        until: Instant,
    },
    Closed,
}

/// A request frame the adapter writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    Acquire,
    Heartbeat,
    /// A new value for the claim: this PROCLAIM frame.
    Proclaim(Vec<u8>),
}

impl Request {
    /// The bytes to write; the ACQUIRE frame is the adapter's (it carries
    /// the name and the lease).
    pub(crate) fn bytes<'a>(&'a self, acquire: &'a [u8]) -> &'a [u8] {
        match self {
            Request::Acquire => acquire,
            Request::Heartbeat => &HEARTBEAT,
            Request::Proclaim(frame) => frame,
        }
    }
}

/// How to close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Close {
    /// Close both directions now.
    Now,
    /// Hand a held lock back: half-close now (after a TLS close_notify) and
    /// keep reading, ignoring what arrives, until the server's close or
    /// `until`; then close. The session's `next_wakeup` is `until` until
    /// that hand-back is over.
    HandBack { until: Instant },
}

/// What one input asks of the adapter, in the order of the fields: first
/// the news (queued, granted, lost, failed), then the write, then the
/// close.
#[derive(Debug, Default)]
pub(crate) struct Turn {
    /// The first WAITING: the claim is queued.
    pub(crate) waiting: bool,
    /// The lock was granted with this token (at ACQUIRE or by promotion).
    pub(crate) granted: Option<u64>,
    /// Every PROCLAIM up to this number is acknowledged: wake its waiters.
    pub(crate) proclaimed: Option<u64>,
    /// The held lock is lost ([`Error::Lost`] with the cause): tell every
    /// push signal now. Polled checks see it already.
    pub(crate) lost: Option<Error>,
    /// A claim that was not held ended with this error.
    pub(crate) failed: Option<Error>,
    /// Write this request.
    pub(crate) send: Option<Request>,
    /// Close the connection.
    pub(crate) close: Option<Close>,
}

/// One input to a session.
#[derive(Debug)]
pub(crate) enum Input<'a> {
    /// Bytes as one read returned them.
    Bytes(&'a [u8]),
    /// A timer fired: time has passed.
    Timer,
    /// The stream ended: EOF, reset, or a failed write.
    End(Error),
    /// The application lets go: release, cancel, drop, deadline.
    Release,
}

/// A held lock's state, as polled checks and push waiters see it.
#[derive(Debug, Clone)]
pub(crate) enum HoldState {
    /// Held and valid until then.
    Held { valid_until: Instant },
    /// Lost ([`Error::Lost`]); `newly` when this very poll decided it (at
    /// the deadline), so the caller must wake the push waiters.
    Lost { loss: Error, newly: bool },
    /// Ended without a loss: released by the application.
    Ended,
}

/// One connection's protocol state.
#[derive(Debug)]
pub(crate) struct Session {
    mode: Mode,
    phase: Phase,
    schedule: Schedule,
    decoder: Decoder,
    /// Send time of the one request (ACQUIRE or HEARTBEAT) still unanswered.
    pending: Option<Instant>,
    /// Send time of the latest request, answered or not: heartbeats are
    /// spaced from send to send.
    last_send: Instant,
    /// Send time of the latest answered request. The server saw us no
    /// earlier than this, so our session lives at least until
    /// `acked_send + lease`; we trust it until `acked_send + client_timeout`.
    acked_send: Instant,
    /// The token, once granted; kept after the end.
    token: Option<u64>,
    /// When the server queued the claim.
    queued_at: Option<Instant>,
    /// The loss ([`Error::Lost`]), once decided; kept after the end.
    loss: Option<Error>,
    /// The server's address, for the error of a server that is not one.
    server: String,
    /// Whether the server's first byte started a server message.
    heard: bool,
    /// The lock and the kind of claim, for the errors that name them: a
    /// try-acquire's busy lock, and the 0x10 answer to a shared claim
    /// (version 2) or one with a value (version 3) that means a server
    /// without shared locks or without values.
    name: String,
    claim: Claim,
    /// PROCLAIMs, numbered as they are handed in (see [`Session::proclaim`]).
    proclaims: Proclaims,
}

/// The PROCLAIMs of a claim with a value. Never two requests in flight:
/// the newest value not sent yet waits in `unsent` until nothing is, and
/// then goes instead of a heartbeat.
#[derive(Debug, Default)]
struct Proclaims {
    /// How many were handed in: the number of the newest.
    handed_in: u64,
    /// The newest frame not sent yet, with its number; a newer value
    /// replaces it (only the newest matters).
    unsent: Option<(Vec<u8>, u64)>,
    /// The number of the PROCLAIM in flight, if the request in flight is one.
    in_flight: Option<u64>,
    /// Every PROCLAIM up to this number is acknowledged.
    acked: u64,
}

impl Session {
    /// An exclusive claim on the lock "test" whose connection to `server`
    /// (`host:port`, for messages) just opened: the turn says to send
    /// ACQUIRE.
    #[cfg(test)]
    pub(crate) fn connect(
        server: &str,
        lease_ms: u32,
        mode: Mode,
        now: Instant,
    ) -> (Session, Turn) {
        Session::connect_as(server, "test", Claim::exclusive(), lease_ms, mode, now)
    }

    /// A `claim` on the lock `name` whose connection to `server` just
    /// opened: the turn says to send ACQUIRE. Nothing differs between the
    /// kinds of claim but the errors: a busy lock says what kept the claim
    /// out, and a server that refuses a shared ACQUIRE's version is one
    /// without shared locks.
    pub(crate) fn connect_as(
        server: &str,
        name: &str,
        claim: Claim,
        lease_ms: u32,
        mode: Mode,
        now: Instant,
    ) -> (Session, Turn) {
        let session = Session {
            mode,
            phase: Phase::Connecting,
            schedule: Schedule::new(lease_ms),
            decoder: Decoder::default(),
            pending: Some(now),
            last_send: now,
            acked_send: now,
            token: None,
            queued_at: None,
            loss: None,
            server: server.to_owned(),
            heard: false,
            name: name.to_owned(),
            claim,
            proclaims: Proclaims::default(),
        };
        let turn = Turn {
            send: Some(Request::Acquire),
            ..Turn::default()
        };
        (session, turn)
    }

    /// Processes one input at `now`. Time passes first: a reply that
    /// arrives at or after the deadline finds the decision made.
    pub(crate) fn step(&mut self, input: Input<'_>, now: Instant) -> Turn {
        let mut turn = Turn::default();
        self.advance(now, &mut turn);
        match input {
            Input::Bytes(bytes) => self.receive(bytes, now, &mut turn),
            Input::Timer => {}
            Input::End(cause) => match self.phase {
                // The server's close: the hand-back is confirmed.
                Phase::HandingBack { .. } => self.phase = Phase::Closed,
                _ => self.end(cause, &mut turn),
            },
            Input::Release => self.release(now, &mut turn),
        }
        self.send_next(now, &mut turn);
        turn
    }

    /// The PROCLAIM frame of `value` for this claim, checked before anything
    /// is handed in: a claim without a value cannot proclaim (its server
    /// may not know values), and a value is at most 1024 bytes.
    pub(crate) fn proclaim_frame(&self, value: &[u8]) -> Result<Vec<u8>, Error> {
        if self.claim.value().is_none() {
            return Err(Error::NoValue {
                name: self.name.clone(),
            });
        }
        encode_proclaim(value)
    }

    /// Hands in a PROCLAIM frame (from [`Session::proclaim_frame`]) and
    /// returns its number: [`Session::proclaimed`] reaches it once the
    /// server has acknowledged it or a later one. The next step sends it
    /// when nothing is in flight, else right after the reply owed. 0: the
    /// claim neither waits nor holds, and nothing is sent.
    pub(crate) fn proclaim(&mut self, frame: Vec<u8>) -> u64 {
        if !matches!(self.phase, Phase::Waiting | Phase::Held(_)) {
            return 0;
        }
        let p = &mut self.proclaims;
        p.handed_in += 1;
        p.unsent = Some((frame, p.handed_in));
        p.handed_in
    }

    /// The number of the last PROCLAIM acknowledged (every one before it
    /// is too).
    pub(crate) fn proclaimed(&self) -> u64 {
        self.proclaims.acked
    }

    /// The one decision polled checks and push waiters share with the
    /// session's own timer: a held lock is lost from its deadline on,
    /// whichever path looks first.
    pub(crate) fn poll(&mut self, now: Instant) -> HoldState {
        if let Phase::Held(_) = self.phase {
            if now < self.deadline() {
                return HoldState::Held {
                    valid_until: self.deadline(),
                };
            }
            let loss = self.lose_at_deadline();
            return HoldState::Lost { loss, newly: true };
        }
        match &self.loss {
            Some(loss) => HoldState::Lost {
                loss: loss.clone(),
                newly: false,
            },
            None => HoldState::Ended,
        }
    }

    /// Makes the decisions that are due at `now`.
    fn advance(&mut self, now: Instant, turn: &mut Turn) {
        match self.phase {
            Phase::Connecting | Phase::Waiting if now >= self.deadline() => {
                // A promotion after this instant is no grant.
                let lease_ms = self.schedule.lease_ms();
                self.end(Error::ClientTimeout { lease_ms }, turn);
            }
            Phase::Held(_) if now >= self.deadline() => {
                turn.lost = Some(self.lose_at_deadline());
            }
            Phase::HandingBack { until } if now >= until => self.phase = Phase::Closed,
            _ => {}
        }
        // Also right after a loss decided in this same step.
        if self.phase == Phase::Lost && now >= self.close_at() {
            self.phase = Phase::Closed;
            turn.close = Some(Close::Now);
        }
    }

    /// Held past the deadline: lost, told, and the connection kept open.
    fn lose_at_deadline(&mut self) -> Error {
        let lease_ms = self.schedule.lease_ms();
        let loss = Error::Lost(Box::new(Error::ClientTimeout { lease_ms }));
        self.phase = Phase::Lost;
        self.loss = Some(loss.clone());
        loss
    }

    fn receive(&mut self, bytes: &[u8], now: Instant, turn: &mut Turn) {
        if !self.reading() {
            return;
        }
        self.decoder.feed(bytes);
        while self.reading() {
            let next = self.decoder.next_frame();
            if next.is_err() && !self.heard {
                // The very first byte starts no server message: this is
                // some other service (an HTTP port, TLS spoken to in
                // plaintext). Say what it sent, and fail at once.
                let mut sent = self.decoder.buffered().to_vec();
                sent.truncate(64);
                let server = self.server.clone();
                return self.end(Error::NotMonolock { server, sent }, turn);
            }
            self.heard = true;
            match next {
                Ok(Some(frame)) => self.on_frame(frame, now, turn),
                Ok(None) => break,
                Err(err) => self.end(err, turn),
            }
        }
    }

    /// Whether replies still mean something (or, once lost, an ERROR ends
    /// the wait for the lease).
    fn reading(&self) -> bool {
        !matches!(self.phase, Phase::HandingBack { .. } | Phase::Closed)
    }

    fn on_frame(&mut self, frame: Frame, now: Instant, turn: &mut Turn) {
        let token = match (self.phase, frame) {
            (
                _,
                Frame::Error {
                    code: Some(code),
                    reason,
                },
            ) => {
                let mut err = Error::from_code(code, reason);
                if self.claim.value().is_some() {
                    err = err.for_value_claim(&self.server);
                } else if self.claim.is_shared() {
                    err = err.for_shared_claim(&self.server);
                }
                return self.end(err, turn);
            }
            (_, Frame::Error { code: None, .. }) => return self.end(Error::ServerEnded, turn),
            // Late replies never revive a lost lock.
            (Phase::Lost, _) => return,
            (Phase::Held(_), Frame::Waiting) => {
                let err = Error::Protocol("WAITING after the lock was granted".into());
                return self.end(err, turn);
            }
            (Phase::Held(held), Frame::Acquired { token }) if held != token => {
                let err = Error::Protocol(format!(
                    "ACQUIRED with token {token} while holding token {held}"
                ));
                return self.end(err, turn);
            }
            (_, Frame::Acquired { token }) => token,
            (_, Frame::Waiting) => {
                if self.ack(now, turn) && self.phase == Phase::Connecting {
                    if self.mode == Mode::Try {
                        // Try-acquire: someone else holds it.
                        return self.end(self.busy(), turn);
                    }
                    self.phase = Phase::Waiting;
                    self.queued_at = Some(now);
                    turn.waiting = true;
                }
                return;
            }
        };
        match self.phase {
            // While waiting, ACQUIRED is always the promotion, never the ack
            // of a heartbeat in flight: that ack is still to come.
            Phase::Waiting => self.grant(token, turn),
            Phase::Connecting => {
                if self.ack(now, turn) {
                    self.grant(token, turn);
                }
            }
            _ => {
                self.ack(now, turn);
            }
        }
    }

    /// A try-acquire's WAITING: the error says what kept this claim out.
    fn busy(&self) -> Error {
        Error::Busy {
            name: self.name.clone(),
            shared: self.claim.is_shared(),
            limit: self.claim.limit(),
        }
    }

    fn grant(&mut self, token: u64, turn: &mut Turn) {
        self.phase = Phase::Held(token);
        self.token = Some(token);
        turn.granted = Some(token);
    }

    /// Accounts for one reply to our one request in flight; a reply
    /// without a request ends the claim.
    fn ack(&mut self, now: Instant, turn: &mut Turn) -> bool {
        let Some(sent) = self.pending.take() else {
            self.end(Error::Protocol("a reply without a request".into()), turn);
            return false;
        };
        self.schedule
            .observe_rtt(now.saturating_duration_since(sent));
        self.acked_send = sent;
        if let Some(n) = self.proclaims.in_flight.take() {
            self.proclaims.acked = n;
            turn.proclaimed = Some(n);
        }
        true
    }

    /// The server or the link ended the claim, or broke the protocol: a
    /// held lock is lost and told, a waiting claim fails, a lost one just
    /// closes. Then close at once: the server has let go already.
    fn end(&mut self, cause: Error, turn: &mut Turn) {
        match self.phase {
            Phase::Held(_) => {
                let loss = Error::Lost(Box::new(cause));
                self.loss = Some(loss.clone());
                turn.lost = Some(loss);
            }
            Phase::Connecting | Phase::Waiting => turn.failed = Some(cause),
            Phase::Lost => {}
            Phase::HandingBack { .. } | Phase::Closed => return,
        }
        self.phase = Phase::Closed;
        turn.close = Some(Close::Now);
    }

    /// The application lets go: a held lock is handed back, anything else
    /// closes at once (after a loss nothing is left to hand back).
    fn release(&mut self, now: Instant, turn: &mut Turn) {
        match self.phase {
            Phase::Held(_) => {
                let until = now + self.schedule.release_wait();
                self.phase = Phase::HandingBack { until };
                turn.close = Some(Close::HandBack { until });
            }
            Phase::Connecting | Phase::Waiting | Phase::Lost => {
                self.phase = Phase::Closed;
                turn.close = Some(Close::Now);
            }
            Phase::HandingBack { .. } | Phase::Closed => {}
        }
    }

    /// Sends the request that is due: a PROCLAIM handed in, else a
    /// HEARTBEAT. Either refreshes the lease and is owed one reply.
    fn send_next(&mut self, now: Instant, turn: &mut Turn) {
        if !self.heartbeat_due().is_some_and(|due| now >= due) {
            return;
        }
        self.pending = Some(now);
        self.last_send = now;
        turn.send = Some(match self.proclaims.unsent.take() {
            Some((frame, n)) => {
                self.proclaims.in_flight = Some(n);
                Request::Proclaim(frame)
            }
            None => Request::Heartbeat,
        });
    }

    /// When the next request is due: while queued or held, with no
    /// request in flight (the next one waits for the ack of the last); a
    /// PROCLAIM handed in is due at once.
    fn heartbeat_due(&self) -> Option<Instant> {
        match (self.phase, self.pending) {
            (Phase::Waiting | Phase::Held(_), None) if self.proclaims.unsent.is_some() => {
                Some(self.last_send)
            }
            (Phase::Waiting | Phase::Held(_), None) => {
                Some(self.last_send + self.schedule.interval())
            }
            _ => None,
        }
    }

    /// The moment the client stops trusting the connection: a held lock is
    /// lost then; a claim still waiting fails and re-queues.
    pub(crate) fn deadline(&self) -> Instant {
        self.acked_send + self.schedule.client_timeout()
    }

    /// The latest moment the server may still count us as its session.
    fn close_at(&self) -> Instant {
        self.acked_send + self.schedule.lease()
    }

    /// When to feed the next [`Input::Timer`]; `None` once the connection
    /// is done with, and the adapter closes it for good.
    pub(crate) fn next_wakeup(&self) -> Option<Instant> {
        match self.phase {
            Phase::Connecting | Phase::Waiting | Phase::Held(_) => {
                Some(match self.heartbeat_due() {
                    Some(due) => due.min(self.deadline()),
                    None => self.deadline(),
                })
            }
            Phase::Lost => Some(self.close_at()),
            Phase::HandingBack { until } => Some(until),
            Phase::Closed => None,
        }
    }

    #[cfg(test)]
    pub(crate) fn state(&self) -> State {
        match self.phase {
            Phase::Connecting => State::Connecting,
            Phase::Waiting => State::Waiting,
            Phase::Held(_) => State::Held,
            Phase::Lost => State::Lost,
            Phase::HandingBack { .. } | Phase::Closed => State::Closed,
        }
    }

    /// The fencing token, once granted.
    pub(crate) fn token(&self) -> Option<u64> {
        self.token
    }

    /// Until when a granted lock is safe to use; it stays where it was after
    /// a loss.
    #[cfg(test)]
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        self.token.map(|_| self.deadline())
    }

    /// How long the claim had been queued at `now` (zero if never).
    pub(crate) fn queued_for(&self, now: Instant) -> Duration {
        self.queued_at
            .map_or(Duration::ZERO, |at| now.saturating_duration_since(at))
    }
}

/// Time left until `deadline`, never negative, at least one millisecond so
/// that a socket timeout of zero ("block forever") is never set.
pub(crate) fn wait_for(deadline: Instant, now: Instant) -> Duration {
    deadline
        .saturating_duration_since(now)
        .max(Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The vector's name of an error: `timeout`, `io`, `server 0x02`, ...
    fn kind(err: &Error) -> String {
        let err = match err {
            Error::Lost(cause) => cause,
            other => other,
        };
        match err {
            Error::ClientTimeout { .. } => "timeout".into(),
            Error::Io(_) => "io".into(),
            Error::Protocol(_) => "protocol".into(),
            Error::NotMonolock { .. } => "not_monolock".into(),
            Error::Busy { .. } => "busy".into(),
            Error::ServerEnded => "server".into(),
            coded => format!("server 0x{:02x}", coded.code().expect("a wire code")),
        }
    }

    /// A turn as the vector's `out` list, in the order the adapters act.
    fn outputs(turn: &Turn) -> Vec<String> {
        let mut out = Vec::new();
        if turn.send == Some(Request::Acquire) {
            out.push("send ACQUIRE".to_owned());
        }
        if turn.waiting {
            out.push("waiting".into());
        }
        if let Some(token) = turn.granted {
            out.push(format!("grant {token}"));
        }
        if let Some(n) = turn.proclaimed {
            out.push(format!("proclaimed {n}"));
        }
        if let Some(loss) = &turn.lost {
            out.push(format!("lost {}", kind(loss)));
        }
        if let Some(err) = &turn.failed {
            out.push(format!("fail {}", kind(err)));
        }
        match &turn.send {
            Some(Request::Heartbeat) => out.push("send HEARTBEAT".into()),
            // The frame's value, after the type and the length.
            Some(Request::Proclaim(frame)) => out.push(format!(
                "send PROCLAIM {}",
                String::from_utf8_lossy(&frame[3..])
            )),
            _ => {}
        }
        if turn.close.is_some() {
            out.push("close".into());
        }
        out
    }

    fn frame(input: &str) -> Vec<u8> {
        let words: Vec<&str> = input.split_whitespace().collect();
        match words[1..] {
            ["WAITING"] => vec![0x11],
            ["ACQUIRED", token] => {
                let mut v = vec![0x12];
                v.extend_from_slice(&token.parse::<u64>().unwrap().to_be_bytes());
                v
            }
            ["ERROR", code] => {
                let code = u8::from_str_radix(code.trim_start_matches("0x"), 16).unwrap();
                vec![0x13, code, 0]
            }
            ["hex", ref bytes @ ..] => {
                let text = bytes.concat();
                (0..text.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
                    .collect()
            }
            _ => panic!("unknown input {input}"),
        }
    }

    fn state_name(state: State) -> &'static str {
        match state {
            State::Connecting => "connecting",
            State::Waiting => "waiting",
            State::Held => "held",
            State::Lost => "lost",
            State::Closed => "closed",
        }
    }

    #[test]
    fn session_vectors() {
        let v = spec::load("vectors/session.json");
        let cases = v["cases"].as_array().unwrap();
        assert!(cases.len() >= 20);
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let lease = case["lease_ms"].as_u64().unwrap() as u32;
            let mode = match case["mode"].as_str().unwrap() {
                "wait" => Mode::Wait,
                "try" => Mode::Try,
                other => panic!("{name}: mode {other}"),
            };
            let claim = vector_claim(&case["claim"]);
            let t0 = Instant::now();
            let mut session: Option<Session> = None;
            for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
                let at = t0 + ms(step["at"].as_u64().unwrap());
                let input = step["in"].as_str().unwrap();
                let turn = match (input, session.as_mut()) {
                    ("connect", None) => {
                        let (s, turn) =
                            Session::connect_as("test:1", name, claim.clone(), lease, mode, at);
                        session = Some(s);
                        turn
                    }
                    ("timer", Some(s)) => s.step(Input::Timer, at),
                    // Handed in, then ticked at the same instant.
                    (input, Some(s)) if input.starts_with("proclaim ") => {
                        let value = input.strip_prefix("proclaim ").unwrap();
                        let frame = s.proclaim_frame(value.as_bytes()).unwrap();
                        s.proclaim(frame);
                        s.step(Input::Timer, at)
                    }
                    ("release", Some(s)) => s.step(Input::Release, at),
                    ("eof", Some(s)) => {
                        let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
                        s.step(Input::End(Error::io(eof)), at)
                    }
                    (recv, Some(s)) if recv.starts_with("recv ") => {
                        s.step(Input::Bytes(&frame(recv)), at)
                    }
                    _ => panic!("{name} step {i}: cannot feed {input}"),
                };
                let s = session.as_ref().unwrap();
                let want: Vec<&str> = step["out"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| o.as_str().unwrap())
                    .collect();
                assert_eq!(outputs(&turn), want, "{name} step {i} ({input})");
                if let Some(state) = step["state"].as_str() {
                    assert_eq!(state_name(s.state()), state, "{name} step {i} state");
                }
                if let Some(want) = step["valid_until"].as_f64() {
                    // The deadline of a waiting claim too (a PROCLAIM's
                    // ack moves it as a heartbeat's does).
                    let got = s.deadline();
                    let got = got.duration_since(t0).as_secs_f64() * 1000.0;
                    assert!(
                        (got - want).abs() < 1e-3,
                        "{name} step {i}: valid_until {got}"
                    );
                }
            }
        }
    }

    /// A case's `claim`: a shared one, or one with a value. The client
    /// encodes the ACQUIRE (codec's client_valid_v2 and client_valid_v3
    /// tests pin those bytes); what follows must be the same as for an
    /// exclusive claim, but for the PROCLAIMs of a claim with a value.
    fn vector_claim(claim: &serde_json::Value) -> Claim {
        if let Some(value) = claim["value"].as_str() {
            return Claim::exclusive().with_value(value);
        }
        match (
            claim["shared"].as_bool().unwrap_or(false),
            claim["limit"].as_u64(),
        ) {
            (false, _) => Claim::exclusive(),
            (true, None) => Claim::shared(),
            (true, Some(limit)) => Claim::semaphore(limit as u32),
        }
    }

    fn bytes_acquired(token: u64) -> Vec<u8> {
        frame(&format!("recv ACQUIRED {token}"))
    }

    #[test]
    fn a_poll_at_the_deadline_is_the_one_decision() {
        let t0 = Instant::now();
        let (mut s, _) = Session::connect("test:1", 1000, Mode::Wait, t0);
        s.step(Input::Bytes(&bytes_acquired(7)), t0);
        let turn = s.step(Input::Timer, t0 + ms(250));
        assert_eq!(turn.send, Some(Request::Heartbeat));
        assert!(matches!(
            s.poll(t0 + ms(799)),
            HoldState::Held { valid_until } if valid_until == t0 + ms(800)
        ));
        // A polled check at the deadline decides, before any timer runs.
        assert!(matches!(
            s.poll(t0 + ms(800)),
            HoldState::Lost { newly: true, .. }
        ));
        assert!(matches!(
            s.poll(t0 + ms(801)),
            HoldState::Lost { newly: false, .. }
        ));
        // The timer finds it decided: nothing more is told, nothing sent,
        // the late ack is ignored, and the close waits for the lease.
        assert!(outputs(&s.step(Input::Timer, t0 + ms(800))).is_empty());
        let late = s.step(Input::Bytes(&bytes_acquired(7)), t0 + ms(810));
        assert!(outputs(&late).is_empty());
        assert_eq!(s.state(), State::Lost);
        assert_eq!(s.next_wakeup(), Some(t0 + ms(1000)));
        assert_eq!(outputs(&s.step(Input::Timer, t0 + ms(1000))), ["close"]);
    }

    #[test]
    fn release_while_held_hands_back_until_the_server_closes() {
        let t0 = Instant::now();
        let (mut s, _) = Session::connect("test:1", 1000, Mode::Wait, t0);
        s.step(Input::Bytes(&bytes_acquired(4)), t0);
        s.step(Input::Timer, t0 + ms(250));
        let turn = s.step(Input::Release, t0 + ms(300));
        let until = t0 + ms(300 + 800);
        assert_eq!(turn.close, Some(Close::HandBack { until }));
        assert!(matches!(s.poll(t0 + ms(900)), HoldState::Ended));
        // The heartbeat's ack is read and ignored; the wait goes on.
        assert!(outputs(&s.step(Input::Bytes(&bytes_acquired(4)), t0 + ms(310))).is_empty());
        assert_eq!(s.next_wakeup(), Some(until));
        // The server's close ends it, without a loss.
        let eof = Error::io(std::io::ErrorKind::UnexpectedEof.into());
        assert!(outputs(&s.step(Input::End(eof), t0 + ms(320))).is_empty());
        assert_eq!(s.next_wakeup(), None);
        assert!(matches!(s.poll(t0 + ms(5000)), HoldState::Ended));
    }

    #[test]
    fn hand_back_wait_is_capped_at_one_second() {
        let t0 = Instant::now();
        let (mut s, _) = Session::connect("test:1", 60_000, Mode::Wait, t0);
        s.step(Input::Bytes(&bytes_acquired(1)), t0);
        let turn = s.step(Input::Release, t0 + ms(5));
        let until = t0 + ms(1005);
        assert_eq!(turn.close, Some(Close::HandBack { until }));
        assert!(outputs(&s.step(Input::Timer, until)).is_empty());
        assert_eq!(s.next_wakeup(), None);
    }

    #[test]
    fn heartbeat_ack_then_promotion_in_one_read() {
        let t0 = Instant::now();
        let (mut s, _) = Session::connect("test:1", 1000, Mode::Wait, t0);
        assert!(s.step(Input::Bytes(&[0x11]), t0).waiting);
        assert_eq!(
            s.step(Input::Timer, t0 + ms(250)).send,
            Some(Request::Heartbeat)
        );
        let mut bytes = vec![0x11];
        bytes.extend(bytes_acquired(3));
        let turn = s.step(Input::Bytes(&bytes), t0 + ms(260));
        assert_eq!(outputs(&turn), ["grant 3"]);
        assert_eq!(s.valid_until(), Some(t0 + ms(250 + 800)));
        assert_eq!(s.queued_for(t0 + ms(260)), ms(260));
    }

    #[test]
    fn heartbeats_keep_a_waiting_claim_alive() {
        let t0 = Instant::now();
        let (mut s, _) = Session::connect("test:1", 100, Mode::Wait, t0);
        s.step(Input::Bytes(&[0x11]), t0);
        let mut now = t0;
        for _ in 0..10 {
            now = s.next_wakeup().unwrap();
            assert_eq!(s.step(Input::Timer, now).send, Some(Request::Heartbeat));
            assert!(outputs(&s.step(Input::Bytes(&[0x11]), now)).is_empty());
        }
        assert_eq!(now, t0 + ms(250));
        assert_eq!(s.deadline(), now + ms(80));
        assert_eq!(s.state(), State::Waiting);
    }

    #[test]
    fn garbage_after_a_loss_closes_without_telling_again() {
        let t0 = Instant::now();
        let (mut s, _) = Session::connect("test:1", 1000, Mode::Wait, t0);
        s.step(Input::Bytes(&bytes_acquired(2)), t0);
        s.step(Input::Timer, t0 + ms(800));
        assert_eq!(s.state(), State::Lost);
        assert_eq!(
            outputs(&s.step(Input::Bytes(&[0x7f]), t0 + ms(850))),
            ["close"]
        );
        assert!(matches!(
            s.poll(t0 + ms(900)),
            HoldState::Lost { newly: false, .. }
        ));
    }

    #[test]
    fn a_first_byte_that_starts_no_message_is_not_monolock() {
        let t0 = Instant::now();
        let (mut s, _) = Session::connect("127.0.0.1:7118", 1000, Mode::Wait, t0);
        let turn = s.step(Input::Bytes(b"HTTP/1.1 400 Bad Request\r\n"), t0);
        assert_eq!(outputs(&turn), ["fail not_monolock", "close"]);
        let err = turn.failed.unwrap();
        assert_eq!(
            err.to_string(),
            "monolock: 127.0.0.1:7118 does not speak the monolock protocol \
             (it sent \"HTTP/1.1 400…\"); is this the admin port?"
        );
        assert!(!err.is_temporary());

        // A TLS alert from a TLS port: quoted byte by byte, no admin hint.
        let (mut s, _) = Session::connect("[::1]:7117", 1000, Mode::Wait, t0);
        let turn = s.step(
            Input::Bytes(&[0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x32]),
            t0,
        );
        assert_eq!(
            turn.failed.unwrap().to_string(),
            "monolock: [::1]:7117 does not speak the monolock protocol \
             (it sent \"\\x15\\x03\\x01\\x00\\x02\\x022\")"
        );
    }

    #[test]
    fn a_shared_claim_answered_with_0x10_fails_with_shared_unsupported() {
        let t0 = Instant::now();
        let (mut s, _) =
            Session::connect_as("old:7117", "db", Claim::shared(), 1000, Mode::Wait, t0);
        let turn = s.step(Input::Bytes(&[0x13, 0x10, 0]), t0);
        assert_eq!(outputs(&turn), ["fail server 0x10", "close"]);
        let err = turn.failed.unwrap();
        assert!(matches!(err, Error::SharedUnsupported { ref addr, .. } if addr == "old:7117"));
        assert!(!err.is_temporary());

        // A claim with a value: a server without values (version 3).
        let claim = Claim::semaphore(2).with_value("v");
        let (mut s, _) = Session::connect_as("old:7117", "db", claim, 1000, Mode::Wait, t0);
        let turn = s.step(Input::Bytes(&[0x13, 0x10, 0]), t0);
        assert_eq!(outputs(&turn), ["fail server 0x10", "close"]);
        let err = turn.failed.unwrap();
        assert!(matches!(err, Error::ValueUnsupported { ref addr, .. } if addr == "old:7117"));
        assert!(!err.is_temporary());

        // An exclusive claim keeps the plain error.
        let (mut s, _) = Session::connect("old:7117", 1000, Mode::Wait, t0);
        let turn = s.step(Input::Bytes(&[0x13, 0x10, 0]), t0);
        assert!(matches!(turn.failed, Some(Error::UnsupportedVersion(_))));
    }

    #[test]
    fn only_a_claim_with_a_value_proclaims_and_only_a_value_that_fits() {
        let t0 = Instant::now();
        let (s, _) = Session::connect_as("test:1", "db", Claim::shared(), 1000, Mode::Wait, t0);
        let err = s.proclaim_frame(b"x").unwrap_err();
        assert!(matches!(err, Error::NoValue { ref name } if name == "db"));
        assert_eq!(
            err.to_string(),
            "monolock: lock \"db\" was claimed without a value (use Claim::with_value to proclaim)"
        );
        assert!(!err.is_temporary());
        assert_eq!(err.code(), None);

        let claim = Claim::exclusive().with_value("a");
        let (mut s, _) = Session::connect_as("test:1", "db", claim, 1000, Mode::Wait, t0);
        let err = s.proclaim_frame(&[b'v'; 1025]).unwrap_err();
        assert!(matches!(err, Error::ValueTooLong(_)), "{err}");
        // Before the grant there is nothing to proclaim on.
        assert_eq!(s.proclaim(s.proclaim_frame(b"b").unwrap()), 0);
        s.step(Input::Bytes(&bytes_acquired(3)), t0);
        assert_eq!(s.proclaim(s.proclaim_frame(b"b").unwrap()), 1);
        assert_eq!(s.next_wakeup(), Some(t0), "a PROCLAIM goes at once");
    }

    /// A try-acquire's WAITING is busy, in words that fit the claim.
    #[test]
    fn a_busy_lock_names_what_kept_the_claim_out() {
        let t0 = Instant::now();
        let claim = Claim::semaphore(4);
        let (mut s, _) = Session::connect_as("test:1", "pool/gpu", claim, 1000, Mode::Try, t0);
        let turn = s.step(Input::Bytes(&[0x11]), t0);
        assert_eq!(outputs(&turn), ["fail busy", "close"]);
        match turn.failed.unwrap() {
            Error::Busy {
                name,
                shared: true,
                limit: Some(4),
            } => assert_eq!(name, "pool/gpu"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_bad_byte_after_a_good_start_is_a_protocol_violation() {
        let t0 = Instant::now();
        let (mut s, _) = Session::connect("test:1", 1000, Mode::Wait, t0);
        // WAITING, then garbage in the same read.
        let turn = s.step(Input::Bytes(&[0x11, 0x7f]), t0);
        assert_eq!(outputs(&turn), ["waiting", "fail protocol", "close"]);
    }
}
