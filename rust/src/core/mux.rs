//! The state of one session (protocol version 4): many claims, each a
//! stream, on one connection, without any I/O.
//!
//! The blocking and the tokio session both drive a [`Mux`]: handles hand
//! in what the application asks (open a claim, proclaim, release, close)
//! and the adapter feeds every [`Input`] (bytes read, a timer, the end of
//! the connection), writes what [`Mux::take_output`] returns, wakes the
//! waiters when a [`Turn`] says so and closes when it says so. Every
//! decision lives here, once: the one request in flight (SESSION or
//! HEARTBEAT), the heartbeat schedule of a single claim on the session's
//! lease, the one validity deadline of every claim, the loss of every held
//! claim (decided and visible before any close), stream ids, and which
//! late frames are dropped.
//!
//! The rule for held claims is a single claim's (see [`super::session`]):
//! at `sendTime(last answered SESSION/HEARTBEAT) + 0.8·lease` every held
//! claim is lost at once; the connection stays open until the application
//! closes the session or `sendTime + lease` has passed, so that the server
//! cannot hand any of the locks on before the client knew.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::codec::{encode_proclaim, HEARTBEAT};
use super::retry::Mode;
use super::schedule::Schedule;
use super::session::Close;
use super::session_codec::{
    encode_on, encode_open, encode_release, encode_session, Inner, SessionDecoder, SessionFrame,
};
use super::watch::Core as WatchCore;
use crate::claim::Claim;
use crate::constants_gen as spec;
use crate::error::{code, Error};
use crate::watch::WatchState;

/// The highest stream id; a session that used it opens no more streams.
const MAX_STREAM_ID: u64 = spec::SESSION_MAX_STREAM_ID;

/// What one input asks of the adapter: wake the waiters (a claim or the
/// session changed), then write [`Mux::take_output`], then close.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Turn {
    /// Something changed: every waiter looks again.
    pub(crate) wake: bool,
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
    /// The connection ended: EOF, reset, or a failed write.
    End(Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// SESSION sent, no SESSION_OK yet.
    Opening,
    /// SESSION_OK came: streams may open.
    Open,
    /// The deadline passed: every claim is lost; the connection stays
    /// open, silent, until the lease since the last answered send.
    Lost,
    /// The application closed: half-closed, reading until the server's
    /// close (after it released every claim) or `until`.
    HandingBack {
        until: Instant,
    },
    Closed,
}

/// One session's protocol state.
#[derive(Debug)]
pub(crate) struct Mux {
    phase: Phase,
    schedule: Schedule,
    decoder: SessionDecoder,
    /// Send time of the SESSION or HEARTBEAT still unanswered.
    pending: Option<Instant>,
    /// Send time of the latest request: heartbeats are spaced send to send.
    last_send: Instant,
    /// Send time of the latest answered request: every claim is valid
    /// until this plus the client timeout.
    acked_send: Instant,
    max_streams: u32,
    /// Whether SESSION_OK came.
    accepted: bool,
    /// The id of the next OPEN (a u64, so that the last id cannot wrap).
    next_id: u64,
    /// Streams the handles have not forgotten yet.
    streams: HashMap<u32, Stream>,
    /// Why the session ended, once it did.
    end: Option<Error>,
    /// Bytes for the adapter to write, in order.
    out: Vec<u8>,
    server: String,
    /// Whether the server's first byte started a server message.
    heard: bool,
}

impl Mux {
    /// A session with `lease_ms` whose connection to `server` (for
    /// messages) just opened: SESSION is the first output.
    pub(crate) fn start(server: &str, lease_ms: u32, now: Instant) -> Result<Mux, Error> {
        let out = encode_session(u64::from(lease_ms))?;
        Ok(Mux {
            phase: Phase::Opening,
            schedule: Schedule::new(lease_ms),
            decoder: SessionDecoder::default(),
            pending: Some(now),
            last_send: now,
            acked_send: now,
            max_streams: 0,
            accepted: false,
            next_id: 1,
            streams: HashMap::new(),
            end: None,
            out,
            server: server.to_owned(),
            heard: false,
        })
    }

    /// The bytes to write now, in order; taken once.
    pub(crate) fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Whether the server accepted the session (SESSION_OK), `Err` with
    /// why it ended, `Ok(false)` while it is still opening. A server that
    /// answered SESSION with 0x10, 0x11 or 0x13 has no sessions.
    pub(crate) fn opened(&self) -> Result<bool, Error> {
        match (self.phase, &self.end) {
            (Phase::Opening, _) => Ok(false),
            (_, Some(end)) if !self.accepted => Err(end.clone().for_session(&self.server)),
            _ => Ok(true),
        }
    }

    /// How many streams the server lets this session have open at once.
    pub(crate) fn max_streams(&self) -> u32 {
        self.max_streams
    }

    /// How many more streams this session may open: ids are never reused.
    pub(crate) fn ids_left(&self) -> u64 {
        MAX_STREAM_ID + 1 - self.next_id
    }

    /// How many claims are open (not ended, not released).
    pub(crate) fn open_streams(&self) -> usize {
        self.streams
            .values()
            .filter(|s| {
                matches!(
                    s.state,
                    StreamState::Opening | StreamState::Waiting | StreamState::Held { .. }
                )
            })
            .count()
    }

    /// Whether new claims can open at `now`: SESSION_OK came and nothing
    /// ended it. The second value: this call decided the loss (wake the
    /// waiters). Nothing is queued for writing.
    pub(crate) fn is_open(&mut self, now: Instant) -> (bool, bool) {
        let mut turn = Turn::default();
        self.advance(now, &mut turn);
        (self.phase == Phase::Open, turn.wake)
    }

    /// Why no claim can open on this session, if none can.
    fn unusable(&self) -> Option<Error> {
        match self.phase {
            Phase::Open => None,
            Phase::Opening => Some(Error::Protocol("the session is not open yet".into())),
            _ => Some(self.end.clone().unwrap_or(Error::Cancelled)),
        }
    }

    /// Opens a stream for `claim` on `name` with its ACQUIRE `frame`
    /// (built and checked with the session's lease) and returns its id.
    /// Refused when the session is over (its end) or its ids are used up.
    pub(crate) fn open(
        &mut self,
        name: &str,
        claim: Claim,
        frame: &[u8],
        mode: Mode,
        now: Instant,
    ) -> Result<u32, Error> {
        self.open_stream(name, claim, frame, mode, None, now)
    }

    /// Opens a watch stream with its WATCH `frame` (built and checked with
    /// the session's lease) and returns its id. Its picture is the watch
    /// core's: the first WATCHING vouches for it, then every ALIVE does,
    /// as a WATCHING of its last (epoch, seq) would.
    pub(crate) fn open_watch(
        &mut self,
        name: &str,
        frame: &[u8],
        now: Instant,
    ) -> Result<u32, Error> {
        let mut core = Box::new(WatchCore::new(self.schedule.lease_ms()));
        core.sent(now); // the WATCH is the request its WATCHING answers
        self.open_stream(name, Claim::exclusive(), frame, Mode::Wait, Some(core), now)
    }

    fn open_stream(
        &mut self,
        name: &str,
        claim: Claim,
        frame: &[u8],
        mode: Mode,
        watch: Option<Box<WatchCore>>,
        now: Instant,
    ) -> Result<u32, Error> {
        self.advance(now, &mut Turn::default());
        if let Some(err) = self.unusable() {
            return Err(err);
        }
        if self.next_id > MAX_STREAM_ID {
            let text = "this session has used every stream id; open a new session".to_owned();
            return Err(Error::refused_with(code::TOO_MANY_STREAMS, text));
        }
        let id = self.next_id as u32; // exact: checked above
        self.next_id += 1;
        self.out.extend(encode_open(id, frame));
        self.streams.insert(
            id,
            Stream {
                name: name.to_owned(),
                claim,
                mode,
                state: StreamState::Opening,
                ons_sent: 0,
                ons_acked: 0,
                unreleased: false,
                watch,
                generation: 0,
            },
        );
        Ok(id)
    }

    /// Where stream `id` stands at `now`. The one decision polled checks
    /// share with the adapter's timer: from the deadline on, every held
    /// claim is lost, whichever path looks first; `true` when this very
    /// call decided it (wake the waiters).
    pub(crate) fn poll(&mut self, id: u32, now: Instant) -> (StreamState, bool) {
        let mut turn = Turn::default();
        self.advance(now, &mut turn);
        let state = match self.streams.get(&id).map(|s| &s.state) {
            // Every held claim shares the session's one deadline.
            Some(StreamState::Held { token, .. }) => StreamState::Held {
                token: *token,
                valid_until: self.deadline(),
            },
            Some(state) => state.clone(),
            None => StreamState::Released { acked: true },
        };
        (state, turn.wake)
    }

    /// Hands in a new value for held stream `id` and returns its number:
    /// [`Mux::proclaimed`] reaches it once the server answered it. Checked
    /// first: a claim without a value cannot proclaim, a value is at most
    /// 1024 bytes; a claim no longer held says why.
    pub(crate) fn proclaim(&mut self, id: u32, value: &[u8], now: Instant) -> Result<u64, Error> {
        let (state, _) = self.poll(id, now);
        let Some(stream) = self.streams.get_mut(&id) else {
            return Err(released());
        };
        if stream.claim.value().is_none() {
            return Err(Error::NoValue {
                name: stream.name.clone(),
            });
        }
        let frame = encode_proclaim(value)?;
        match state {
            StreamState::Held { .. } => {}
            StreamState::Lost(loss) => return Err(loss),
            _ => return Err(released()),
        }
        stream.ons_sent += 1;
        self.out.extend(encode_on(id, &frame));
        Ok(stream.ons_sent)
    }

    /// The picture of watch stream `id` at `now`, the count of its changes
    /// (a wait for the next change compares it), and why it ended, if it
    /// did (`Some(Cancelled)` once released). `None` for no watch stream.
    pub(crate) fn watch_view(
        &mut self,
        id: u32,
        now: Instant,
    ) -> Option<(WatchState, u64, Option<Error>)> {
        self.advance(now, &mut Turn::default());
        let stream = self.streams.get(&id)?;
        let core = stream.watch.as_ref()?;
        let ended = match &stream.state {
            StreamState::Opening | StreamState::Watching => None,
            StreamState::Failed(err) => Some(err.clone()),
            _ => Some(Error::Cancelled),
        };
        Some((core.state(now), stream.generation, ended))
    }

    /// How many PROCLAIMs of stream `id` the server has answered.
    pub(crate) fn proclaimed(&self, id: u32) -> u64 {
        self.streams.get(&id).map_or(0, |s| s.ons_acked)
    }

    /// The application lets go of stream `id`: RELEASE is sent for a claim
    /// that is open, and the claim counts as released from now on (later
    /// frames of the stream are dropped). A claim lost or failed has
    /// nothing to release.
    pub(crate) fn release(&mut self, id: u32) {
        let live = self.phase == Phase::Open;
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        match stream.state {
            StreamState::Opening
            | StreamState::Waiting
            | StreamState::Held { .. }
            | StreamState::Watching => {
                stream.end_watch(StreamState::Watching);
                stream.state = StreamState::Released { acked: !live };
                if live {
                    stream.unreleased = true;
                    self.out.extend(encode_release(id));
                }
            }
            _ => {}
        }
    }

    /// Whether a RELEASE of stream `id` still awaits its RELEASED: a
    /// try-acquire found busy, or a claim given up, is out of the server's
    /// queue once this is false.
    pub(crate) fn unreleased(&self, id: u32) -> bool {
        self.streams.get(&id).is_some_and(|s| s.unreleased)
    }

    /// Drops what is kept of stream `id`: its handle is gone.
    pub(crate) fn forget(&mut self, id: u32) {
        self.streams.remove(&id);
    }

    /// The application closes the session: every open claim counts as
    /// released (none is reported lost), and the connection is handed
    /// back (half-closed until the server's close, which comes once it has
    /// released them) or, after a loss, closed at once.
    pub(crate) fn close(&mut self, now: Instant) -> Turn {
        let mut turn = Turn {
            wake: true,
            ..Turn::default()
        };
        self.advance(now, &mut turn);
        for stream in self.streams.values_mut() {
            if matches!(
                stream.state,
                StreamState::Opening
                    | StreamState::Waiting
                    | StreamState::Held { .. }
                    | StreamState::Watching
            ) {
                stream.end_watch(StreamState::Watching);
                stream.state = StreamState::Released { acked: true };
            }
        }
        self.settle_releases();
        self.end.get_or_insert(Error::Cancelled);
        match self.phase {
            Phase::Opening | Phase::Open => {
                let until = now + self.schedule.release_wait();
                self.phase = Phase::HandingBack { until };
                turn.close = Some(Close::HandBack { until });
            }
            Phase::Lost => {
                self.phase = Phase::Closed;
                turn.close = Some(Close::Now);
            }
            Phase::HandingBack { .. } | Phase::Closed => {}
        }
        turn
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
                // The server's close: every claim is released.
                Phase::HandingBack { .. } => self.phase = Phase::Closed,
                _ => self.end(cause, &mut turn),
            },
        }
        self.send_heartbeat(now);
        turn
    }

    /// Makes the decisions due at `now`.
    fn advance(&mut self, now: Instant, turn: &mut Turn) {
        match self.phase {
            Phase::Opening | Phase::Open if now >= self.deadline() => {
                let lease_ms = self.schedule.lease_ms();
                self.lose_all(Error::ClientTimeout { lease_ms });
                self.phase = Phase::Lost;
                turn.wake = true;
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

    /// The session is over for `cause`: every held claim is lost with it,
    /// every claim not yet granted fails with it, and a claim released
    /// needs nothing more.
    fn lose_all(&mut self, cause: Error) {
        for stream in self.streams.values_mut() {
            stream.state = match &stream.state {
                StreamState::Held { .. } => StreamState::Lost(Error::Lost(Box::new(cause.clone()))),
                StreamState::Opening | StreamState::Waiting | StreamState::Watching => {
                    stream.end_watch(StreamState::Watching);
                    StreamState::Failed(cause.clone())
                }
                _ => continue,
            };
        }
        self.settle_releases();
        self.end.get_or_insert(cause);
    }

    /// Nothing more comes for a release once the session is over.
    fn settle_releases(&mut self) {
        for stream in self.streams.values_mut() {
            stream.unreleased = false;
            if let StreamState::Released { acked } = &mut stream.state {
                *acked = true;
            }
        }
    }

    /// The server or the link ended the session, or broke the protocol:
    /// tell, then close at once (the server has let go already).
    fn end(&mut self, cause: Error, turn: &mut Turn) {
        match self.phase {
            Phase::Opening | Phase::Open => self.lose_all(cause),
            Phase::Lost => {}
            Phase::HandingBack { .. } | Phase::Closed => return,
        }
        self.phase = Phase::Closed;
        turn.wake = true;
        turn.close = Some(Close::Now);
    }

    fn receive(&mut self, bytes: &[u8], now: Instant, turn: &mut Turn) {
        if !self.reading() {
            return;
        }
        self.decoder.feed(bytes);
        while self.reading() {
            let next = self.decoder.next_frame();
            if next.is_err() && !self.heard {
                // The very first byte starts no server message: some other
                // service. Say what it sent, and fail at once.
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

    /// Whether frames still mean something (once lost, an ERROR or a
    /// broken frame still ends the wait for the lease).
    fn reading(&self) -> bool {
        matches!(self.phase, Phase::Opening | Phase::Open | Phase::Lost)
    }

    fn on_frame(&mut self, frame: SessionFrame, now: Instant, turn: &mut Turn) {
        if let SessionFrame::Error { code, reason } = frame {
            let err = match code {
                Some(code) => Error::from_code(code, reason),
                None => Error::ServerEnded,
            };
            return self.end(err, turn);
        }
        if self.phase == Phase::Lost {
            return; // Late frames never revive a lost claim.
        }
        turn.wake = true;
        let result = match frame {
            SessionFrame::SessionOk { max_streams } if self.phase == Phase::Opening => {
                self.ack(now);
                self.phase = Phase::Open;
                self.accepted = true;
                self.max_streams = max_streams;
                Ok(())
            }
            SessionFrame::SessionOk { .. } => Err("a second SESSION_OK".to_owned()),
            _ if self.phase == Phase::Opening => Err("a frame before SESSION_OK".to_owned()),
            SessionFrame::Alive if self.pending.is_some() => {
                self.ack(now);
                self.vouch_watches();
                Ok(())
            }
            SessionFrame::Alive => Err("ALIVE without a HEARTBEAT".to_owned()),
            SessionFrame::Stream { stream, inner } => self.on_stream(stream, inner, now),
            SessionFrame::Released { stream } => self.on_released(stream),
            SessionFrame::StreamEnd {
                stream,
                code,
                reason,
            } => self.on_stream_end(stream, Error::from_code(code, reason)),
            SessionFrame::Error { .. } => Ok(()), // handled above
        };
        if let Err(what) = result {
            self.end(Error::Protocol(what), turn);
        }
    }

    /// Accounts for the reply to the one SESSION or HEARTBEAT in flight.
    fn ack(&mut self, now: Instant) {
        if let Some(sent) = self.pending.take() {
            self.schedule
                .observe_rtt(now.saturating_duration_since(sent));
            self.acked_send = sent;
        }
    }

    /// The stream's record, `None` for one the client let go of (its late
    /// frames are dropped); an id never opened breaks the protocol.
    fn stream_mut(&mut self, id: u32) -> Result<Option<&mut Stream>, String> {
        self.check_opened(id)?;
        Ok(self.streams.get_mut(&id))
    }

    fn check_opened(&self, id: u32) -> Result<(), String> {
        if id == 0 || u64::from(id) >= self.next_id {
            return Err(format!("a frame for stream {id}, which was never opened"));
        }
        Ok(())
    }

    /// An ALIVE answered the HEARTBEAT sent at `acked_send`: every frame
    /// the server queued before it read that request has come, so every
    /// watch whose picture is whole is vouched for as a WATCHING of its
    /// last (epoch, seq) would vouch (never earlier than it already was).
    fn vouch_watches(&mut self) {
        let sent = self.acked_send;
        for stream in self.streams.values_mut() {
            let Some(core) = &mut stream.watch else {
                continue;
            };
            let behind = core.in_flight().1.is_some_and(|last| last <= sent);
            if matches!(stream.state, StreamState::Watching) && core.view.started() && behind {
                core.sent(sent);
                let (epoch, seq) = (core.view.epoch, core.view.seq);
                if core.watching(epoch, seq).is_ok() {
                    stream.generation += 1;
                }
            }
        }
    }

    /// A frame of a watch stream: its EVENTs and its one WATCHING feed the
    /// watch core. A picture that breaks the rules (a gap) can no longer
    /// be vouched for: the watch ends (RELEASE), the session lives on.
    fn on_watch_frame(&mut self, id: u32, inner: Inner, now: Instant) -> Result<(), String> {
        let Some(stream) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        let Some(core) = &mut stream.watch else {
            return Err(format!("a watch frame on claim stream {id}"));
        };
        if !matches!(stream.state, StreamState::Opening | StreamState::Watching) {
            return Ok(()); // released or ended: dropped
        }
        let fed = match inner {
            Inner::Event(event) => core.event(event, now),
            Inner::Watching { epoch, seq } => core.watching(epoch, seq),
            Inner::Waiting | Inner::Acquired { .. } => {
                return Err(format!("a claim frame on watch stream {id}"))
            }
        };
        stream.generation += 1;
        match fed {
            Ok(()) if core.valid_until().is_some() => stream.state = StreamState::Watching,
            Ok(()) => {}
            Err(err) => {
                stream.end_watch(StreamState::Failed(err));
                stream.unreleased = true;
                self.out.extend(encode_release(id));
            }
        }
        Ok(())
    }

    fn on_stream(&mut self, id: u32, inner: Inner, now: Instant) -> Result<(), String> {
        self.check_opened(id)?;
        let valid_until = self.deadline();
        let is_watch = self.streams.get(&id).is_some_and(|s| s.watch.is_some());
        if is_watch || matches!(inner, Inner::Event(_) | Inner::Watching { .. }) {
            return self.on_watch_frame(id, inner, now);
        }
        let Some(stream) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        let token = match inner {
            Inner::Acquired { token } => token,
            Inner::Waiting => return stream.on_waiting(id, &mut self.out),
            Inner::Event(_) | Inner::Watching { .. } => unreachable!("a watch frame"),
        };
        match stream.state {
            StreamState::Opening | StreamState::Waiting => {
                stream.state = StreamState::Held { token, valid_until };
                Ok(())
            }
            StreamState::Held { token: held, .. } if held == token => stream.ack_on(id),
            StreamState::Held { token: held, .. } => Err(format!(
                "stream {id}: ACQUIRED with token {token} while holding token {held}"
            )),
            _ => Ok(()), // released, lost, failed: dropped
        }
    }

    fn on_released(&mut self, id: u32) -> Result<(), String> {
        if let Some(stream) = self.stream_mut(id)? {
            stream.unreleased = false;
            if let StreamState::Released { acked } = &mut stream.state {
                *acked = true;
            }
        }
        Ok(())
    }

    fn on_stream_end(&mut self, id: u32, err: Error) -> Result<(), String> {
        let server = self.server.clone();
        if let Some(stream) = self.stream_mut(id)? {
            stream.state = match stream.state {
                StreamState::Opening | StreamState::Waiting | StreamState::Watching => {
                    let err = stream.refusal(err, &server);
                    stream.end_watch(StreamState::Watching);
                    StreamState::Failed(err)
                }
                StreamState::Held { .. } => StreamState::Lost(Error::Lost(Box::new(err))),
                // A RELEASE (a claim let go, a try-acquire found busy)
                // crossed the end: dropped, the server answers the RELEASE
                // with RELEASED all the same, and that ends the release.
                _ => return Ok(()),
            };
        }
        Ok(())
    }

    /// Sends a HEARTBEAT when one is due: the session is open, nothing is
    /// in flight, and the interval since the last send has passed.
    fn send_heartbeat(&mut self, now: Instant) {
        if !self.heartbeat_due().is_some_and(|due| now >= due) {
            return;
        }
        self.pending = Some(now);
        self.last_send = now;
        self.out.extend_from_slice(&HEARTBEAT);
    }

    fn heartbeat_due(&self) -> Option<Instant> {
        match (self.phase, self.pending) {
            (Phase::Open, None) => Some(self.last_send + self.schedule.interval()),
            _ => None,
        }
    }

    /// The moment the client stops trusting the session: every held claim
    /// is lost then.
    pub(crate) fn deadline(&self) -> Instant {
        self.acked_send + self.schedule.client_timeout()
    }

    /// The latest moment the server may still count on this session.
    fn close_at(&self) -> Instant {
        self.acked_send + self.schedule.lease()
    }

    /// How long a release waits for RELEASED, and a close for the server's
    /// close: the client timeout, at most one second.
    pub(crate) fn release_wait(&self) -> Duration {
        self.schedule.release_wait()
    }

    /// When to feed the next [`Input::Timer`]; `None` once the connection
    /// is done with, and the adapter closes it for good.
    pub(crate) fn next_wakeup(&self) -> Option<Instant> {
        match self.phase {
            Phase::Opening | Phase::Open => Some(match self.heartbeat_due() {
                Some(due) => due.min(self.deadline()),
                None => self.deadline(),
            }),
            Phase::Lost => Some(self.close_at()),
            Phase::HandingBack { until } => Some(until),
            Phase::Closed => None,
        }
    }

    /// The latest a write may take: past it the session is over anyway
    /// (the deadline, the lease after a loss, the hand-back's bound), so a
    /// server that stopped reading cannot hold the adapter in a write.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn write_bound(&self) -> Option<Instant> {
        match self.phase {
            Phase::Opening | Phase::Open => Some(self.deadline()),
            Phase::Lost => Some(self.close_at()),
            Phase::HandingBack { until } => Some(until),
            Phase::Closed => None,
        }
    }

    /// Whether the application closed the session and the connection
    /// waits for the server's close (the adapter half-closes it).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn handing_back(&self) -> bool {
        matches!(self.phase, Phase::HandingBack { .. })
    }

    /// Why the session ended, once it did.
    pub(crate) fn ended(&self) -> Option<Error> {
        match self.phase {
            Phase::Opening | Phase::Open => None,
            _ => Some(self.end.clone().unwrap_or(Error::Cancelled)),
        }
    }
}

mod stream;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod vectors;

pub(crate) use stream::StreamState;
use stream::{released, Stream};
