//! The state of one connection (one claim on one lock), without any I/O.
//!
//! The blocking and the tokio client both drive a [`Session`]: they write
//! the ACQUIRE, feed it every byte they read, ask it when to wake up next,
//! and send a HEARTBEAT when it says so. Reply accounting, RTT sampling,
//! validity and the give-up deadline all live here, once.
//!
//! Release is a phase too: the client half-closes, stops heartbeating and
//! reads (ignoring late acks) until the server closes its side, which it
//! does only after freeing the lock, or until a bound passes.

use std::time::{Duration, Instant};

use super::codec::{Decoder, Frame};
use super::schedule::Schedule;
use crate::error::Error;

/// Where the claim stands, as far as the client knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// ACQUIRE sent, no reply yet.
    Requested,
    /// The server queued us (WAITING).
    Waiting,
    /// The server granted the lock with this token.
    Held(u64),
    /// The client half-closed to hand the lock back and waits until `until`
    /// for the server to close its side.
    Releasing { until: Instant },
}

/// What a frame meant for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// The first WAITING of this connection: the claim is queued.
    Waiting,
    /// The lock was granted, as the reply to ACQUIRE or as a promotion.
    Acquired { token: u64 },
    /// A reply acknowledged a send; nothing changed but the deadlines. (While
    /// releasing, every reply is a late ack of this kind and is ignored.)
    Acked,
}

/// One connection's protocol state.
#[derive(Debug)]
pub(crate) struct Session {
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
}

impl Session {
    /// Starts the state of a connection whose ACQUIRE was sent at `sent_at`.
    pub(crate) fn new(lease_ms: u32, sent_at: Instant) -> Session {
        Session {
            phase: Phase::Requested,
            schedule: Schedule::new(lease_ms),
            decoder: Decoder::default(),
            pending: Some(sent_at),
            last_send: sent_at,
            acked_send: sent_at,
        }
    }

    /// Hands over bytes as one read returned them.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.decoder.feed(bytes);
    }

    /// Processes the next buffered frame, if a complete one is there.
    ///
    /// An ERROR frame, a malformed frame or a reply nobody asked for ends
    /// the session with an error; the caller closes the connection.
    pub(crate) fn poll_frame(&mut self, now: Instant) -> Result<Option<Event>, Error> {
        let Some(frame) = self.decoder.next_frame()? else {
            return Ok(None);
        };
        match frame {
            Frame::Error { code, reason } => Err(Error::from_code(code, reason)),
            // The ack of a heartbeat sent before the release: nothing to
            // account for any more.
            _ if self.release_deadline().is_some() => Ok(Some(Event::Acked)),
            Frame::Waiting => self.on_waiting(now).map(Some),
            Frame::Acquired { token } => self.on_acquired(token, now).map(Some),
        }
    }

    fn on_waiting(&mut self, now: Instant) -> Result<Event, Error> {
        if let Phase::Held(_) = self.phase {
            return Err(Error::Protocol("WAITING after the lock was granted".into()));
        }
        self.ack(now)?;
        Ok(match self.phase {
            Phase::Requested => {
                self.phase = Phase::Waiting;
                Event::Waiting
            }
            _ => Event::Acked,
        })
    }

    fn on_acquired(&mut self, token: u64, now: Instant) -> Result<Event, Error> {
        match self.phase {
            Phase::Requested => {
                self.ack(now)?;
                self.phase = Phase::Held(token);
                Ok(Event::Acquired { token })
            }
            // While waiting, ACQUIRED is always the promotion, never the ack
            // of a heartbeat in flight: that ack is still to come.
            Phase::Waiting => {
                self.phase = Phase::Held(token);
                Ok(Event::Acquired { token })
            }
            Phase::Held(held) if held != token => Err(Error::Protocol(format!(
                "ACQUIRED with token {token} while holding token {held}"
            ))),
            Phase::Held(_) => {
                self.ack(now)?;
                Ok(Event::Acked)
            }
            // poll_frame ignores replies before they get here.
            Phase::Releasing { .. } => Ok(Event::Acked),
        }
    }

    /// Accounts for one reply to our one request in flight.
    fn ack(&mut self, now: Instant) -> Result<(), Error> {
        let Some(sent) = self.pending.take() else {
            return Err(Error::Protocol("a reply without a request".into()));
        };
        self.schedule
            .observe_rtt(now.saturating_duration_since(sent));
        self.acked_send = sent;
        Ok(())
    }

    /// The moment the client stops trusting the connection: the lock, if
    /// held, is lost then; a waiting claim re-queues.
    pub(crate) fn deadline(&self) -> Instant {
        self.acked_send + self.schedule.client_timeout()
    }

    /// When the next heartbeat is due, or `None` while one is in flight (the
    /// next waits for its ack).
    fn heartbeat_due(&self) -> Option<Instant> {
        match (self.phase, self.pending) {
            (Phase::Releasing { .. }, _) => None,
            // The ACQUIRE is the request in flight until its reply arrives.
            (_, Some(_)) | (Phase::Requested, None) => None,
            (_, None) => Some(self.last_send + self.schedule.interval()),
        }
    }

    /// The next instant at which [`Session::poll_timer`] has work to do.
    pub(crate) fn next_wakeup(&self) -> Instant {
        if let Some(until) = self.release_deadline() {
            return until;
        }
        match self.heartbeat_due() {
            Some(due) => due.min(self.deadline()),
            None => self.deadline(),
        }
    }

    /// Checks the clock. `Ok(true)` means "send a HEARTBEAT now" (the send
    /// is recorded as of `now`); `Err(Timeout)` means no ack arrived within
    /// the client timeout.
    pub(crate) fn poll_timer(&mut self, now: Instant) -> Result<bool, Error> {
        if self.release_deadline().is_some() {
            // Handing back: validity no longer matters, nothing is sent.
            return Ok(false);
        }
        if now >= self.deadline() {
            return Err(Error::Timeout);
        }
        match self.heartbeat_due() {
            Some(due) if now >= due => {
                self.pending = Some(now);
                self.last_send = now;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Starts handing the lock back at `now`, the moment the client
    /// half-closes: no more heartbeats, replies still in flight are ignored.
    /// Returns until when to wait for the server's close: the client
    /// timeout from `now`, at most one second. Idempotent: a second call
    /// keeps the first deadline.
    pub(crate) fn begin_release(&mut self, now: Instant) -> Instant {
        if let Some(until) = self.release_deadline() {
            return until;
        }
        let until = now + self.schedule.release_wait();
        self.phase = Phase::Releasing { until };
        until
    }

    /// How long a release waits for the server's close.
    pub(crate) fn release_wait(&self) -> Duration {
        self.schedule.release_wait()
    }

    /// Until when a release waits for the server's close; `None` unless
    /// releasing.
    pub(crate) fn release_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Releasing { until } => Some(until),
            _ => None,
        }
    }

    /// The fencing token, once granted (and not being handed back).
    pub(crate) fn token(&self) -> Option<u64> {
        match self.phase {
            Phase::Held(token) => Some(token),
            _ => None,
        }
    }

    /// Until when a held lock is safe to use.
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        self.token().map(|_| self.deadline())
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

    const WAITING: &[u8] = &[0x11];

    fn acquired(token: u64) -> Vec<u8> {
        let mut v = vec![0x12];
        v.extend_from_slice(&token.to_be_bytes());
        v
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn feed_all(s: &mut Session, bytes: &[u8], now: Instant) -> Result<Vec<Event>, Error> {
        s.feed(bytes);
        let mut events = Vec::new();
        while let Some(e) = s.poll_frame(now)? {
            events.push(e);
        }
        Ok(events)
    }

    #[test]
    fn immediate_grant_sets_validity_from_the_acquire_send() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        assert_eq!(s.valid_until(), None);
        let ev = feed_all(&mut s, &acquired(7), t0 + ms(2)).unwrap();
        assert_eq!(ev, vec![Event::Acquired { token: 7 }]);
        assert_eq!(s.token(), Some(7));
        assert_eq!(s.valid_until(), Some(t0 + ms(800)));
        // First heartbeat: interval from the ACQUIRE send, shortened by RTT.
        assert_eq!(s.next_wakeup(), t0 + ms(250 - 4));
    }

    #[test]
    fn no_heartbeat_before_the_acquire_reply() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        assert!(!s.poll_timer(t0 + ms(500)).unwrap());
        assert_eq!(s.next_wakeup(), t0 + ms(800));
        assert!(matches!(s.poll_timer(t0 + ms(800)), Err(Error::Timeout)));
    }

    #[test]
    fn promotion_during_an_inflight_heartbeat_is_not_its_ack() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        assert_eq!(feed_all(&mut s, WAITING, t0).unwrap(), vec![Event::Waiting]);
        // Heartbeat goes out at 250 ms.
        assert!(s.poll_timer(t0 + ms(250)).unwrap());
        // Promotion arrives while the heartbeat is in flight.
        let ev = feed_all(&mut s, &acquired(9), t0 + ms(300)).unwrap();
        assert_eq!(ev, vec![Event::Acquired { token: 9 }]);
        // Validity still counts from the ACQUIRE (the last acked send).
        assert_eq!(s.valid_until(), Some(t0 + ms(800)));
        // No second heartbeat while the first is unanswered.
        assert!(!s.poll_timer(t0 + ms(700)).unwrap());
        // Now the heartbeat's own ack arrives and refreshes validity.
        let ev = feed_all(&mut s, &acquired(9), t0 + ms(701)).unwrap();
        assert_eq!(ev, vec![Event::Acked]);
        assert_eq!(s.valid_until(), Some(t0 + ms(250 + 800)));
    }

    #[test]
    fn heartbeat_ack_then_promotion_in_one_read() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        feed_all(&mut s, WAITING, t0).unwrap();
        assert!(s.poll_timer(t0 + ms(250)).unwrap());
        let mut bytes = WAITING.to_vec();
        bytes.extend(acquired(3));
        let ev = feed_all(&mut s, &bytes, t0 + ms(260)).unwrap();
        assert_eq!(ev, vec![Event::Acked, Event::Acquired { token: 3 }]);
        assert_eq!(s.valid_until(), Some(t0 + ms(250 + 800)));
    }

    #[test]
    fn unsolicited_or_mismatched_replies_are_protocol_errors() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        feed_all(&mut s, &acquired(1), t0).unwrap();
        let err = feed_all(&mut s, &acquired(1), t0).unwrap_err();
        assert!(matches!(err, Error::Protocol(_)), "{err}");

        let mut s = Session::new(1000, t0);
        feed_all(&mut s, &acquired(1), t0).unwrap();
        assert!(s.poll_timer(t0 + ms(250)).unwrap());
        let err = feed_all(&mut s, &acquired(2), t0 + ms(251)).unwrap_err();
        assert!(matches!(err, Error::Protocol(_)), "{err}");

        let mut s = Session::new(1000, t0);
        feed_all(&mut s, &acquired(1), t0).unwrap();
        assert!(s.poll_timer(t0 + ms(250)).unwrap());
        let err = feed_all(&mut s, WAITING, t0 + ms(251)).unwrap_err();
        assert!(matches!(err, Error::Protocol(_)), "{err}");
    }

    #[test]
    fn error_frame_ends_the_session_with_its_code() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        let err = feed_all(&mut s, &[0x13, 0x02, 0x00], t0).unwrap_err();
        assert!(matches!(err, Error::AdminClosed(_)));
        assert_eq!(err.code(), Some(2));
    }

    #[test]
    fn late_ack_delays_the_next_heartbeat_and_validity_runs_out() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        feed_all(&mut s, &acquired(5), t0).unwrap();
        assert!(s.poll_timer(t0 + ms(250)).unwrap());
        // Ack is late: nothing to send, only the deadline to wait for.
        assert!(!s.poll_timer(t0 + ms(600)).unwrap());
        assert_eq!(s.next_wakeup(), t0 + ms(800));
        assert!(matches!(s.poll_timer(t0 + ms(800)), Err(Error::Timeout)));
    }

    #[test]
    fn release_stops_heartbeats_and_ignores_late_acks() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        feed_all(&mut s, &acquired(4), t0).unwrap();
        // A heartbeat is in flight when the release begins.
        assert!(s.poll_timer(t0 + ms(250)).unwrap());
        assert_eq!(s.release_deadline(), None);
        let until = s.begin_release(t0 + ms(300));
        assert_eq!(until, t0 + ms(300 + 800));
        assert_eq!(s.release_deadline(), Some(until));
        assert_eq!(s.token(), None);
        // Its ack, and even a stray WAITING, are read and ignored.
        let mut late = acquired(4);
        late.extend(WAITING);
        let ev = feed_all(&mut s, &late, t0 + ms(310)).unwrap();
        assert_eq!(ev, vec![Event::Acked, Event::Acked]);
        // No heartbeat is ever due again, nor a timeout; a second begin
        // keeps the deadline.
        assert!(!s.poll_timer(t0 + ms(700)).unwrap());
        assert!(!s.poll_timer(t0 + ms(5000)).unwrap());
        assert_eq!(s.next_wakeup(), until);
        assert_eq!(s.begin_release(t0 + ms(900)), until);
        // The server's ERROR still ends it.
        let err = feed_all(&mut s, &[0x13, 0x01, 0x00], t0 + ms(320)).unwrap_err();
        assert_eq!(err.code(), Some(1));
    }

    #[test]
    fn release_wait_is_capped_at_one_second() {
        let t0 = Instant::now();
        let mut s = Session::new(60_000, t0);
        feed_all(&mut s, &acquired(1), t0).unwrap();
        assert_eq!(s.begin_release(t0 + ms(5)), t0 + ms(1005));
    }

    #[test]
    fn heartbeats_run_while_waiting_and_keep_the_claim_alive() {
        let t0 = Instant::now();
        let mut s = Session::new(100, t0);
        feed_all(&mut s, WAITING, t0).unwrap();
        let mut now = t0;
        for _ in 0..10 {
            now = s.next_wakeup();
            assert!(s.poll_timer(now).unwrap());
            assert_eq!(feed_all(&mut s, WAITING, now).unwrap(), vec![Event::Acked]);
        }
        assert_eq!(now, t0 + ms(250));
        assert_eq!(s.deadline(), now + ms(80));
        assert_eq!(s.token(), None);
    }
}
