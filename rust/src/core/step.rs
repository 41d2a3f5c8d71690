//! One turn of an acquire attempt, decided without I/O.
//!
//! Both clients run the same attempt loop: feed the session an input, ask
//! this what the turn means, write what it says, then read until the
//! instant it names. The keeper of a held lock needs no such helper: it
//! does what the [`Turn`] says, in the order of its fields.

use std::time::Instant;

use super::retry::{Failure, Plan};
use super::session::{Request, Session, Turn};
use crate::addr::ServerAddr;
use crate::error::Error;

/// What an acquire attempt does after a turn of its session.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AcquireStep {
    /// The lock is granted: hand the connection, the session and the turn
    /// (it may still ask for a heartbeat) to a guard.
    Granted,
    /// Write this request, if any, then read until `wake`.
    Continue {
        send: Option<Request>,
        wake: Instant,
    },
}

/// Decides what the turn `turn` of an acquiring session means at `now`.
/// `on_waiting` runs when the server queues the claim. An error is the
/// end of this attempt; dropping the connection closes it.
pub(crate) fn acquire_step(
    session: &Session,
    turn: &mut Turn,
    plan: &Plan,
    now: Instant,
    on_waiting: &mut dyn FnMut(),
) -> Result<AcquireStep, Failure> {
    if turn.waiting {
        on_waiting();
    }
    if turn.granted.is_some() {
        return Ok(AcquireStep::Granted);
    }
    if let Some(error) = turn.failed.take() {
        let queued = session.queued_for(now);
        return Err(Failure::Session { error, queued });
    }
    if plan.expired(now) {
        // The caller gives up; the closed connection leaves the queue.
        return Err(Failure::Final(plan.timeout(None)));
    }
    let mut wake = session.next_wakeup().unwrap_or(now);
    if let Some(deadline) = plan.deadline() {
        wake = wake.min(deadline);
    }
    Ok(AcquireStep::Continue {
        send: turn.send.take(),
        wake,
    })
}

/// The end of an attempt on a read that failed with `err` on the
/// connection to `server`. Over TLS 1.3 the server's refusal of the
/// client's certificate arrives as an alert on the first read after the
/// handshake: that is the handshake's certificate problem after all.
pub(crate) fn read_failed(server: &ServerAddr, err: std::io::Error) -> Error {
    #[cfg(feature = "tls")]
    let err = crate::tls::read_failed(server, err);
    #[cfg(not(feature = "tls"))]
    let _ = server;
    Error::io(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::retry::Mode;
    use crate::core::session::Input;
    use std::time::Duration;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const PROMOTED: [u8; 9] = [0x12, 0, 0, 0, 0, 0, 0, 0, 5];

    #[test]
    fn waiting_runs_the_hook_once_and_heartbeats_follow() {
        let t0 = Instant::now();
        let plan = Plan::new(Mode::Wait, 1, None);
        let (mut s, mut turn) = Session::connect("test:1", 1000, Mode::Wait, t0);
        let mut waits = 0;
        let step = acquire_step(&s, &mut turn, &plan, t0, &mut || waits += 1).unwrap();
        assert_eq!(
            step,
            AcquireStep::Continue {
                send: Some(Request::Acquire),
                wake: t0 + ms(800)
            }
        );
        let mut turn = s.step(Input::Bytes(&[0x11]), t0);
        let step = acquire_step(&s, &mut turn, &plan, t0, &mut || waits += 1).unwrap();
        assert_eq!(waits, 1);
        assert_eq!(
            step,
            AcquireStep::Continue {
                send: None,
                wake: t0 + ms(250)
            }
        );
        let mut turn = s.step(Input::Timer, t0 + ms(250));
        let step = acquire_step(&s, &mut turn, &plan, t0 + ms(250), &mut || waits += 1);
        assert!(matches!(
            step,
            Ok(AcquireStep::Continue {
                send: Some(Request::Heartbeat),
                ..
            })
        ));
        assert_eq!(waits, 1);
    }

    #[test]
    fn try_mode_turns_waiting_into_busy() {
        let t0 = Instant::now();
        let plan = Plan::new(Mode::Try, 1, None);
        let (mut s, _) = Session::connect("test:1", 1000, Mode::Try, t0);
        let mut turn = s.step(Input::Bytes(&[0x11]), t0);
        let res = acquire_step(&s, &mut turn, &plan, t0, &mut || {});
        assert!(matches!(
            res,
            Err(Failure::Session {
                error: Error::Busy { .. },
                ..
            })
        ));
    }

    #[test]
    fn a_promotion_after_the_deadline_fails_the_attempt_with_its_queue_time() {
        let t0 = Instant::now();
        let plan = Plan::new(Mode::Wait, 1, None);
        let (mut s, _) = Session::connect("test:1", 1000, Mode::Wait, t0);
        s.step(Input::Bytes(&[0x11]), t0);
        s.step(Input::Timer, t0 + ms(250));
        let mut turn = s.step(Input::Bytes(&PROMOTED), t0 + ms(850));
        assert_eq!(turn.granted, None);
        let res = acquire_step(&s, &mut turn, &plan, t0 + ms(850), &mut || {});
        match res {
            Err(Failure::Session {
                error: Error::ClientTimeout { lease_ms: 1000 },
                queued,
            }) => assert_eq!(queued, ms(850)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_callers_deadline_bounds_the_wait_and_a_grant_in_time_wins() {
        let t0 = Instant::now();
        let plan = Plan::new(Mode::Wait, 1, Some(t0 + ms(100)));
        let (mut s, mut turn) = Session::connect("test:1", 1000, Mode::Wait, t0);
        let step = acquire_step(&s, &mut turn, &plan, t0, &mut || {}).unwrap();
        assert!(matches!(step, AcquireStep::Continue { wake, .. } if wake == t0 + ms(100)));
        let mut turn = s.step(Input::Timer, t0 + ms(100));
        let res = acquire_step(&s, &mut turn, &plan, t0 + ms(100), &mut || {});
        assert!(matches!(
            res,
            Err(Failure::Final(Error::Timeout { last: None, .. }))
        ));

        let (mut s, _) = Session::connect("test:1", 1000, Mode::Wait, t0);
        let mut turn = s.step(Input::Bytes(&PROMOTED), t0 + ms(200));
        let step = acquire_step(&s, &mut turn, &plan, t0 + ms(200), &mut || {}).unwrap();
        assert_eq!(step, AcquireStep::Granted);
    }
}
