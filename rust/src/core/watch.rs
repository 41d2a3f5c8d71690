//! A watch of one name (protocol version 3), without I/O: the picture
//! built from the server's EVENTs, how long it is vouched for, one
//! connection's requests and deadlines ([`Link`]), and where to reconnect
//! after a connection ends ([`Redial`]). spec/vectors/watch.json runs
//! against [`Core`].
//!
//! The rules, as the server promises them: every live event is the one
//! after the last (same epoch, seq + 1), and an epoch changes only with a
//! snapshot. A picture that breaks them cannot be vouched for, so the
//! connection ends and the next one resumes or resyncs. Each WATCHING
//! acknowledges the one request in flight (the WATCH, then each
//! HEARTBEAT) and vouches for the picture until that request's send plus
//! 0.8 x lease, as a lock's acknowledgements do.

use std::time::{Duration, Instant};

use super::retry::{leader_index, Backoff};
use super::schedule::Schedule;
use super::watch_codec::{encode_watch, kind, Event, WatchDecoder, WatchFrame, HEARTBEAT};
use crate::addr::ServerAddr;
use crate::constants_gen::SHARED_MODE_SHARED;
use crate::error::Error;
use crate::watch::{Holder, Waiter, WatchState};

/// The state of a name as the events told it.
#[derive(Debug, Clone, Default)]
pub(crate) struct View {
    pub(crate) epoch: u64,
    pub(crate) seq: u64,
    /// In grant order.
    pub(crate) holders: Vec<Holder>,
    /// In queue order.
    pub(crate) waiters: Vec<Waiter>,
    /// Nobody is granted the name before it (after a restart, a failover).
    pub(crate) blocked_until: Option<Instant>,
    started: bool,
    /// The snapshot being read, until its end.
    next: Option<Box<View>>,
}

/// An event that does not follow the last one: something was missed.
fn gap(what: String) -> Error {
    Error::Protocol(format!("watch: an event out of order: {what}"))
}

impl View {
    /// Whether a whole snapshot (or a resume) has been taken.
    pub(crate) fn started(&self) -> bool {
        self.started && self.next.is_none()
    }

    /// Continues from (epoch, seq) on a new connection: a snapshot half
    /// read is dropped.
    fn resume(&mut self) {
        self.next = None;
    }

    /// Takes one event that arrived at `now`.
    fn apply(&mut self, e: Event, now: Instant) -> Result<(), Error> {
        if let Some(next) = &mut self.next {
            if e.kind != kind::SNAPSHOT_END {
                return next.apply_snapshot(e, now);
            }
            next.check_snapshot(&e)?;
            let next = *self.next.take().unwrap();
            *self = View {
                started: true,
                ..next
            };
            return Ok(());
        }
        if e.kind == kind::SNAPSHOT {
            self.next = Some(Box::new(View {
                epoch: e.epoch,
                seq: e.seq,
                blocked_until: (e.ms > 0).then(|| now + ms(e.ms)),
                ..View::default()
            }));
            return Ok(());
        }
        if !self.started || e.epoch != self.epoch || e.seq != self.seq.wrapping_add(1) {
            return Err(gap(format!(
                "epoch {} seq {} after epoch {} seq {}",
                e.epoch, e.seq, self.epoch, self.seq
            )));
        }
        self.seq = e.seq;
        self.apply_live(e, now)
    }

    /// A snapshot's events carry its own (epoch, seq).
    fn check_snapshot(&self, e: &Event) -> Result<(), Error> {
        if e.epoch != self.epoch || e.seq != self.seq {
            return Err(gap("a snapshot's event numbered apart from it".into()));
        }
        Ok(())
    }

    /// An event inside a snapshot (self is the snapshot being read).
    fn apply_snapshot(&mut self, e: Event, now: Instant) -> Result<(), Error> {
        self.check_snapshot(&e)?;
        match e.kind {
            kind::HOLDER => self.holders.push(holder(e, now)),
            kind::WAITER => self.waiters.push(waiter(e)),
            other => return Err(gap(format!("event kind {other} inside a snapshot"))),
        }
        Ok(())
    }

    fn apply_live(&mut self, e: Event, now: Instant) -> Result<(), Error> {
        match e.kind {
            kind::GRANTED => {
                self.waiters.retain(|w| w.arrival != e.arrival);
                self.holders.push(holder(e, now));
            }
            kind::VALUE => {
                if let Some(h) = self.holder_mut(e.token) {
                    h.value = e.value;
                }
            }
            kind::ENDED => self.holders.retain(|h| h.token != e.token),
            kind::HELD_BACK => {
                if let Some(h) = self.holder_mut(e.token) {
                    h.held_back_until = Some(now + ms(e.ms));
                }
            }
            kind::QUEUED => {
                let w = waiter(e);
                match self.waiters.iter_mut().find(|x| x.arrival == w.arrival) {
                    Some(old) => *old = w, // a waiter's new value
                    None => self.waiters.push(w),
                }
            }
            kind::LEFT => self.waiters.retain(|w| w.arrival != e.arrival),
            kind::BLOCKED => {
                // A longer block extends it, a shorter one does not shorten it.
                let until = now + ms(e.ms);
                if self.blocked_until.map_or(true, |b| until > b) {
                    self.blocked_until = Some(until);
                }
            }
            other => return Err(gap(format!("event kind {other} outside a snapshot"))),
        }
        Ok(())
    }

    fn holder_mut(&mut self, token: u64) -> Option<&mut Holder> {
        self.holders.iter_mut().find(|h| h.token == token)
    }
}

fn holder(e: Event, now: Instant) -> Holder {
    Holder {
        token: e.token,
        shared: u64::from(e.mode) == SHARED_MODE_SHARED,
        limit: e.limit,
        identity: e.identity,
        value: e.value,
        held_back_until: (e.ms > 0).then(|| now + ms(e.ms)),
    }
}

fn waiter(e: Event) -> Waiter {
    Waiter {
        arrival: e.arrival,
        shared: u64::from(e.mode) == SHARED_MODE_SHARED,
        limit: e.limit,
        identity: e.identity,
        value: e.value,
    }
}

fn ms(n: u32) -> Duration {
    Duration::from_millis(u64::from(n))
}

/// A watch's picture and how long it is vouched for.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) view: View,
    timeout: Duration,
    last_send: Option<Instant>,
    in_flight: bool,
    /// `None`: vouched for by nothing.
    valid_until: Option<Instant>,
}

impl Core {
    pub(crate) fn new(lease_ms: u32) -> Core {
        Core {
            view: View::default(),
            timeout: Schedule::new(lease_ms).client_timeout(),
            last_send: None,
            in_flight: false,
            valid_until: None,
        }
    }

    /// Records a request (WATCH or HEARTBEAT) sent at `now`.
    pub(crate) fn sent(&mut self, now: Instant) {
        self.last_send = Some(now);
        self.in_flight = true;
    }

    /// Whether a request awaits its WATCHING, and when the last was sent.
    pub(crate) fn in_flight(&self) -> (bool, Option<Instant>) {
        (self.in_flight, self.last_send)
    }

    /// Applies an EVENT that arrived at `now`. An error (a gap) leaves the
    /// picture vouched for by nothing: the connection must end.
    pub(crate) fn event(&mut self, e: Event, now: Instant) -> Result<(), Error> {
        let res = self.view.apply(e, now);
        if res.is_err() {
            self.valid_until = None;
        }
        res
    }

    /// Takes the WATCHING that answers the request in flight: the picture
    /// is whole up to (epoch, seq), vouched for until the request's send
    /// plus the client timeout.
    pub(crate) fn watching(&mut self, epoch: u64, seq: u64) -> Result<(), Error> {
        let v = &self.view;
        let sent = self.last_send.filter(|_| self.in_flight);
        match sent {
            Some(sent) if v.started() && epoch == v.epoch && seq == v.seq => {
                self.in_flight = false;
                self.valid_until = Some(sent + self.timeout);
                Ok(())
            }
            _ => {
                self.valid_until = None;
                Err(Error::Protocol(format!(
                    "watch: a WATCHING that does not answer the request in flight: epoch {epoch} seq {seq} for the picture at {}/{}",
                    v.epoch, v.seq
                )))
            }
        }
    }

    /// The connection ended: nothing in flight, nothing vouched for; the
    /// picture stays, for a resume from its (epoch, seq).
    pub(crate) fn disconnected(&mut self) {
        self.in_flight = false;
        self.valid_until = None;
        self.view.resume();
    }

    /// Whether the picture is vouched for at `now`.
    pub(crate) fn known(&self, now: Instant) -> bool {
        self.view.started() && self.valid_until.is_some_and(|v| now < v)
    }

    /// When the picture stops being vouched for (`None`: it is not).
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        self.valid_until
    }

    /// The picture as the public state at `now`.
    pub(crate) fn state(&self, now: Instant) -> WatchState {
        WatchState {
            known: self.known(now),
            valid_until: self.valid_until,
            holders: self.view.holders.clone(),
            waiters: self.view.waiters.clone(),
            blocked_until: self.view.blocked_until,
            epoch: self.view.epoch,
            seq: self.view.seq,
        }
    }
}

/// One connection of a watch: the WATCH, then one HEARTBEAT at a time on
/// a lock's schedule, each answered by a WATCHING within the client
/// timeout. The picture lives in the [`Core`] each call is given.
#[derive(Debug)]
pub(crate) struct Link {
    schedule: Schedule,
    decoder: WatchDecoder,
    vouched: bool,
}

/// What a connection does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Due {
    /// Write this first (a HEARTBEAT, already recorded as sent).
    pub(crate) send: Option<&'static [u8]>,
    /// Then read until this instant.
    pub(crate) wake: Instant,
}

impl Link {
    /// A connection of a watch of `name`, and its WATCH (recorded as sent
    /// at `now`), which resumes from the picture's (epoch, seq).
    pub(crate) fn open(
        core: &mut Core,
        name: &str,
        lease_ms: u32,
        now: Instant,
    ) -> Result<(Link, Vec<u8>), Error> {
        let v = &core.view;
        let frame = encode_watch(name.as_bytes(), u64::from(lease_ms), v.epoch, v.seq)?;
        core.sent(now);
        let link = Link {
            schedule: Schedule::new(lease_ms),
            decoder: WatchDecoder::default(),
            vouched: false,
        };
        Ok((link, frame))
    }

    /// Whether the server answered a request on this connection.
    pub(crate) fn vouched(&self) -> bool {
        self.vouched
    }

    /// What is due at `now`: an error when the request in flight went
    /// unanswered for the client timeout, else a HEARTBEAT when one is
    /// due, and when to look again (also the end of the picture's
    /// validity, so that the caller tells of it).
    pub(crate) fn poll(&mut self, core: &mut Core, now: Instant) -> Result<Due, Error> {
        let (in_flight, last) = core.in_flight();
        let last = last.unwrap_or(now);
        let timeout = self.schedule.client_timeout();
        if in_flight && now >= last + timeout {
            let lease_ms = self.schedule.lease_ms();
            return Err(Error::ClientTimeout { lease_ms });
        }
        let mut send = None;
        let mut wake = last + timeout;
        if !in_flight {
            if now >= last + self.schedule.interval() {
                core.sent(now);
                send = Some(&HEARTBEAT[..]);
                wake = now + timeout;
            } else {
                wake = last + self.schedule.interval();
            }
        }
        if let Some(until) = core.valid_until().filter(|&u| u > now) {
            wake = wake.min(until);
        }
        Ok(Due { send, wake })
    }

    /// Takes the bytes of one read at `now` into the picture. An error
    /// ends the connection: the server's ERROR, a gap, a WATCHING nobody
    /// asked for, bytes no server sends.
    pub(crate) fn feed(
        &mut self,
        core: &mut Core,
        bytes: &[u8],
        now: Instant,
    ) -> Result<(), Error> {
        self.decoder.feed(bytes);
        while let Some(frame) = self.decoder.next_frame()? {
            match frame {
                WatchFrame::Event(e) => core.event(e, now)?,
                WatchFrame::Watching { epoch, seq } => {
                    let (_, sent) = core.in_flight();
                    core.watching(epoch, seq)?;
                    if let Some(sent) = sent {
                        self.schedule
                            .observe_rtt(now.saturating_duration_since(sent));
                    }
                    self.vouched = true;
                }
                WatchFrame::Error {
                    code: Some(code),
                    reason,
                } => return Err(Error::from_code(code, reason)),
                WatchFrame::Error { code: None, .. } => return Err(Error::ServerEnded),
            }
        }
        Ok(())
    }
}

/// Where a watch connects next: the servers in turn, with backoff after a
/// connection that failed; a passive server of an HA cell sends it to the
/// active one at once; a terminal error ends the watch.
#[derive(Debug)]
pub(crate) struct Redial {
    next: usize,
    backoff: Backoff,
}

/// What a watch does after a connection ended.
#[derive(Debug)]
pub(crate) enum Then {
    /// Wait this long, then connect to [`Redial::server`].
    Retry(Duration),
    /// The watch is over: no retry can cure this.
    Stop,
}

impl Redial {
    pub(crate) fn new() -> Redial {
        Redial {
            next: 0,
            backoff: Backoff::new(),
        }
    }

    /// The index of the server to connect to now.
    pub(crate) fn server(&mut self, servers: usize) -> usize {
        let i = self.next % servers.max(1);
        self.next = i + 1;
        i
    }

    /// After a connection ended with `err`; `vouched`: its server had
    /// answered a request (the backoff starts over).
    pub(crate) fn after(&mut self, err: &Error, vouched: bool, servers: &[ServerAddr]) -> Then {
        if vouched {
            self.backoff.reset();
        }
        if let Error::NotActive(reason) = err {
            if let Some(i) = leader_index(servers, reason.text()) {
                self.next = i;
                return Then::Retry(Duration::ZERO); // a passive answer is no failure
            }
        }
        if err.code().is_some() && !err.is_temporary() {
            return Then::Stop;
        }
        Then::Retry(self.backoff.next_delay())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::watch_codec::tests::vector_event;
    use crate::spec;
    use crate::watch::{describe_leader, leader_of};

    fn num(v: &serde_json::Value) -> u64 {
        v.as_str().map_or(0, |s| s.parse().unwrap())
    }

    fn strings(v: &serde_json::Value) -> Option<Vec<String>> {
        let items = v.as_array()?;
        Some(
            items
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect(),
        )
    }

    /// Every case of spec/vectors/watch.json, fed to the core; the leader
    /// is read as an election reads it.
    #[test]
    fn watch_vectors() {
        let v = spec::load("vectors/watch.json");
        let cases = v["cases"].as_array().unwrap();
        assert!(cases.len() >= 10);
        let t0 = Instant::now();
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let mut c = Core::new(case["lease_ms"].as_u64().unwrap() as u32);
            for (i, st) in case["steps"].as_array().unwrap().iter().enumerate() {
                let at = st["at"].as_u64().unwrap();
                let now = t0 + Duration::from_millis(at);
                let input = st["in"].as_str().unwrap();
                let wh = format!("{name} step {} ({input} at {at})", i + 1);
                run_step(&mut c, st, input, now, &wh);
                check_step(&c, st, now, t0, &wh);
            }
        }
    }

    fn run_step(c: &mut Core, st: &serde_json::Value, input: &str, now: Instant, wh: &str) {
        let res = match input {
            "send WATCH" | "send HEARTBEAT" => {
                if let Some(r) = strings(&st["resume"]) {
                    let want = (r[0].parse().unwrap(), r[1].parse().unwrap());
                    assert_eq!((c.view.epoch, c.view.seq), want, "{wh}: resumes");
                }
                c.sent(now);
                Ok(())
            }
            "event" => c.event(vector_event(&st["event"]), now),
            "watching" => c.watching(num(&st["epoch"]), num(&st["seq"])),
            "disconnect" => {
                c.disconnected();
                Ok(())
            }
            "check" => Ok(()),
            other => panic!("{wh}: unknown input {other}"),
        };
        match st["error"].as_str() {
            None => assert!(res.is_ok(), "{wh}: {res:?}"),
            Some("gap") => assert!(
                matches!(&res, Err(Error::Protocol(m)) if m.contains("out of order")),
                "{wh}: {res:?}"
            ),
            Some("protocol") => assert!(
                matches!(&res, Err(Error::Protocol(m)) if m.contains("WATCHING")),
                "{wh}: {res:?}"
            ),
            Some(other) => panic!("{wh}: unknown error {other}"),
        }
    }

    fn check_step(c: &Core, st: &serde_json::Value, now: Instant, t0: Instant, wh: &str) {
        let state = c.state(now);
        if let Some(known) = st["known"].as_bool() {
            assert_eq!(state.known, known, "{wh}: known");
        }
        if let Some(until) = st["valid_until"].as_u64() {
            let want = t0 + Duration::from_millis(until);
            assert_eq!(state.valid_until, Some(want), "{wh}: valid_until");
        }
        if let Some(want) = strings(&st["holders"]) {
            let got: Vec<String> = state.holders.iter().map(|h| h.token.to_string()).collect();
            assert_eq!(got, want, "{wh}: holders");
        }
        if let Some(want) = strings(&st["waiters"]) {
            let got: Vec<String> = state
                .waiters
                .iter()
                .map(|w| w.arrival.to_string())
                .collect();
            assert_eq!(got, want, "{wh}: waiters");
        }
        if let Some(want) = strings(&st["waiter_values"]) {
            let got: Vec<String> = state
                .waiters
                .iter()
                .map(|w| String::from_utf8_lossy(&w.value).into_owned())
                .collect();
            assert_eq!(got, want, "{wh}: waiter values");
        }
        if let Some(want) = st["leader"].as_str() {
            let got = describe_leader(&leader_of(&state, now), now);
            assert_eq!(got, want, "{wh}: leader");
        }
    }

    fn watching(epoch: u64, seq: u64) -> Vec<u8> {
        let mut f = vec![super::super::watch_codec::MSG_WATCHING];
        f.extend_from_slice(&epoch.to_be_bytes());
        f.extend_from_slice(&seq.to_be_bytes());
        f
    }

    fn snapshot_frames(epoch: u64, seq: u64) -> Vec<u8> {
        let mut f = vec![super::super::watch_codec::MSG_EVENT];
        f.extend_from_slice(&epoch.to_be_bytes());
        f.extend_from_slice(&seq.to_be_bytes());
        f.push(kind::SNAPSHOT);
        f.extend_from_slice(&[0; 13]);
        f.push(super::super::watch_codec::MSG_EVENT);
        f.extend_from_slice(&epoch.to_be_bytes());
        f.extend_from_slice(&seq.to_be_bytes());
        f.push(kind::SNAPSHOT_END);
        f
    }

    #[test]
    fn a_link_heartbeats_on_schedule_and_times_out_unanswered() {
        let t0 = Instant::now();
        let mut core = Core::new(1000);
        let (mut link, frame) = Link::open(&mut core, "a", 1000, t0).unwrap();
        assert_eq!(frame.len(), 25);
        let due = link.poll(&mut core, t0).unwrap();
        assert_eq!(
            due,
            Due {
                send: None,
                wake: t0 + Duration::from_millis(800)
            }
        );
        let mut bytes = snapshot_frames(5, 9);
        bytes.extend(watching(5, 9));
        link.feed(&mut core, &bytes, t0).unwrap();
        assert!(core.known(t0) && link.vouched());
        // Next heartbeat at 250 ms; the picture is good until 800 ms.
        let due = link.poll(&mut core, t0).unwrap();
        assert_eq!(due.wake, t0 + Duration::from_millis(250));
        let at = t0 + Duration::from_millis(250);
        let due = link.poll(&mut core, at).unwrap();
        assert_eq!(due.send, Some(&HEARTBEAT[..]));
        assert_eq!(
            due.wake,
            t0 + Duration::from_millis(800),
            "the validity ends first"
        );
        let late = at + Duration::from_millis(800);
        assert!(matches!(
            link.poll(&mut core, late),
            Err(Error::ClientTimeout { lease_ms: 1000 })
        ));
        assert!(!core.known(late));
        core.disconnected();
        // The next WATCH resumes from the picture.
        let (_, frame) = Link::open(&mut core, "a", 1000, late).unwrap();
        assert_eq!(&frame[frame.len() - 16..], &watching(5, 9)[1..]);
    }

    #[test]
    fn a_link_ends_at_an_error_frame() {
        let t0 = Instant::now();
        let mut core = Core::new(1000);
        let (mut link, _) = Link::open(&mut core, "a", 1000, t0).unwrap();
        let err = link.feed(&mut core, &[0x13, 0x04, 0], t0).unwrap_err();
        assert!(matches!(err, Error::WatcherBehind(_)));
        let (mut link, _) = Link::open(&mut core, "a", 1000, t0).unwrap();
        let err = link.feed(&mut core, &[0x13], t0).unwrap_err();
        assert!(matches!(err, Error::ServerEnded));
    }

    #[test]
    fn redial_follows_the_leader_and_stops_on_terminal_errors() {
        let servers: Vec<ServerAddr> = ["a:1", "b:2", "c:3"]
            .iter()
            .map(|s| ServerAddr::parse(s).unwrap())
            .collect();
        let mut r = Redial::new();
        assert_eq!(r.server(3), 0);
        let hint = Error::from_code(0x03, "c:3");
        assert!(matches!(r.after(&hint, false, &servers), Then::Retry(d) if d.is_zero()));
        assert_eq!(r.server(3), 2);
        assert_eq!(r.server(3), 0);
        let behind = Error::from_code(0x04, "");
        assert!(
            matches!(r.after(&behind, true, &servers), Then::Retry(d) if d <= Duration::from_millis(50))
        );
        assert!(matches!(
            r.after(&Error::from_code(0x18, ""), false, &servers),
            Then::Stop
        ));
        assert!(matches!(
            r.after(&Error::from_code(0x10, ""), false, &servers),
            Then::Stop
        ));
        assert!(matches!(
            r.after(&Error::ServerEnded, false, &servers),
            Then::Retry(_)
        ));
    }
}
