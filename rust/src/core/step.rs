//! One turn of the I/O loop, decided without I/O.
//!
//! Both clients run the same loop: let the core look at the buffered bytes
//! and the clock, send a HEARTBEAT if it says so, then read until the
//! instant it names. The decisions of that loop live here, once; the
//! clients only read, write and wait.

use std::time::Instant;

use super::retry::{Failure, Mode, Plan};
use super::session::{Event, Session};
use crate::error::Error;

/// What an acquire attempt does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AcquireStep {
    /// The lock is granted: hand the connection to a guard.
    Granted,
    /// Send a HEARTBEAT first if `heartbeat`, then read until `wake`.
    Continue { heartbeat: bool, wake: Instant },
}

/// Processes what the session has buffered and what the clock says, for a
/// connection that is still acquiring. `on_waiting` runs once when the
/// server queues the claim.
pub(crate) fn acquire_step(
    session: &mut Session,
    plan: &mut Plan,
    now: Instant,
    on_waiting: &mut dyn FnMut(),
) -> Result<AcquireStep, Failure> {
    while let Some(event) = session.poll_frame(now).map_err(Failure::Session)? {
        match event {
            // Try-acquire: WAITING means someone else holds it.
            Event::Waiting if plan.mode() == Mode::Try => return Err(Failure::Final(Error::Busy)),
            Event::Waiting => {
                plan.reached_queue();
                on_waiting();
            }
            Event::Acquired { .. } => return Ok(AcquireStep::Granted),
            Event::Acked => {}
        }
    }
    if plan.expired(now) {
        return Err(Failure::Final(Error::Timeout));
    }
    let heartbeat = session.poll_timer(now).map_err(Failure::Session)?;
    let mut wake = session.next_wakeup();
    if let Some(deadline) = plan.deadline() {
        wake = wake.min(deadline);
    }
    Ok(AcquireStep::Continue { heartbeat, wake })
}

/// What the keeper of a held lock does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct HoldStep {
    /// Send a HEARTBEAT now.
    pub(crate) heartbeat: bool,
    /// Read until then.
    pub(crate) wake: Instant,
    /// The lock's validity after the replies just processed.
    pub(crate) valid_until: Instant,
}

/// Processes what the session of a held lock has buffered and what the
/// clock says. An error is the cause of the loss.
pub(crate) fn hold_step(session: &mut Session, now: Instant) -> Result<HoldStep, Error> {
    while let Some(event) = session.poll_frame(now)? {
        if event != Event::Acked {
            return Err(Error::Protocol(format!(
                "unexpected {event:?} while holding"
            )));
        }
    }
    let heartbeat = session.poll_timer(now)?;
    let valid_until = session
        .valid_until()
        .ok_or_else(|| Error::Protocol("holding without a grant".into()))?;
    Ok(HoldStep {
        heartbeat,
        wake: session.next_wakeup(),
        valid_until,
    })
}

/// What a connection that is handing its lock back does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReleaseStep {
    /// The hand-back is over: close the connection. Reached when the wait
    /// ran out or the server sent an ERROR; the server's close (EOF) ends
    /// it too, which the client sees as a read of zero bytes.
    Done,
    /// Read until then, feeding the session; late acks are ignored.
    ReadUntil(Instant),
}

/// Processes what a releasing session has buffered and what the clock
/// says. The end of the stream during a release is the server confirming
/// it freed the lock, never a loss; the clients stop reading there.
pub(crate) fn release_step(session: &mut Session, now: Instant) -> ReleaseStep {
    let Some(until) = session.release_deadline() else {
        return ReleaseStep::Done; // not releasing: nothing to wait for
    };
    loop {
        match session.poll_frame(now) {
            Ok(Some(_late_ack)) => {}
            Ok(None) => break,
            // An ERROR (the server ended the session, and the claim with
            // it) or garbage: nothing more worth waiting for.
            Err(_) => return ReleaseStep::Done,
        }
    }
    if now >= until {
        ReleaseStep::Done
    } else {
        ReleaseStep::ReadUntil(until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn no_hook() -> impl FnMut() {
        || panic!("no WAITING expected")
    }

    #[test]
    fn waiting_runs_the_hook_once_and_heartbeats_follow() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        let mut plan = Plan::new(Mode::Wait, 1, None);
        let mut waits = 0;
        s.feed(&[0x11]);
        let step = acquire_step(&mut s, &mut plan, t0, &mut || waits += 1).unwrap();
        assert_eq!(waits, 1);
        assert_eq!(
            step,
            AcquireStep::Continue {
                heartbeat: false,
                wake: t0 + ms(250)
            }
        );
        let step = acquire_step(&mut s, &mut plan, t0 + ms(250), &mut || waits += 1).unwrap();
        assert!(matches!(
            step,
            AcquireStep::Continue {
                heartbeat: true,
                ..
            }
        ));
        assert_eq!(waits, 1);
    }

    #[test]
    fn try_mode_turns_waiting_into_busy() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        let mut plan = Plan::new(Mode::Try, 1, None);
        s.feed(&[0x11]);
        let res = acquire_step(&mut s, &mut plan, t0, &mut no_hook());
        assert!(matches!(res, Err(Failure::Final(Error::Busy))));
    }

    #[test]
    fn grant_and_deadline() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        let mut plan = Plan::new(Mode::Wait, 1, Some(t0 + ms(100)));
        // Waiting for the reply: wake at the caller's deadline, not later.
        let step = acquire_step(&mut s, &mut plan, t0, &mut no_hook()).unwrap();
        assert_eq!(
            step,
            AcquireStep::Continue {
                heartbeat: false,
                wake: t0 + ms(100)
            }
        );
        let res = acquire_step(&mut s, &mut plan, t0 + ms(100), &mut no_hook());
        assert!(matches!(res, Err(Failure::Final(Error::Timeout))));

        let mut s = Session::new(1000, t0);
        let mut plan = Plan::new(Mode::Wait, 1, Some(t0 + ms(100)));
        s.feed(&[0x12, 0, 0, 0, 0, 0, 0, 0, 5]);
        // A grant that arrived in time wins over the deadline.
        let step = acquire_step(&mut s, &mut plan, t0 + ms(200), &mut no_hook()).unwrap();
        assert_eq!(step, AcquireStep::Granted);
    }

    #[test]
    fn hold_step_refreshes_and_rejects_a_second_grant_event() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        s.feed(&[0x12, 0, 0, 0, 0, 0, 0, 0, 5]);
        s.poll_frame(t0).unwrap();
        let step = hold_step(&mut s, t0 + ms(250)).unwrap();
        assert!(step.heartbeat);
        assert_eq!(step.valid_until, t0 + ms(800));
        assert_eq!(step.wake, t0 + ms(800));
        s.feed(&[0x12, 0, 0, 0, 0, 0, 0, 0, 5]);
        let step = hold_step(&mut s, t0 + ms(260)).unwrap();
        assert_eq!(step.valid_until, t0 + ms(250 + 800));
        assert!(!step.heartbeat);
        s.feed(&[0x11]);
        assert!(matches!(
            hold_step(&mut s, t0 + ms(270)),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn release_step_reads_past_late_acks_until_the_bound() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        // Not releasing: nothing to wait for.
        assert_eq!(release_step(&mut s, t0), ReleaseStep::Done);
        s.feed(&[0x12, 0, 0, 0, 0, 0, 0, 0, 5]);
        s.poll_frame(t0).unwrap();
        assert!(hold_step(&mut s, t0 + ms(250)).unwrap().heartbeat);
        let until = s.begin_release(t0 + ms(260));
        assert_eq!(until, t0 + ms(1060));
        assert_eq!(
            release_step(&mut s, t0 + ms(260)),
            ReleaseStep::ReadUntil(until)
        );
        // The heartbeat's ack arrives: ignored, keep reading.
        s.feed(&[0x12, 0, 0, 0, 0, 0, 0, 0, 5]);
        assert_eq!(
            release_step(&mut s, t0 + ms(270)),
            ReleaseStep::ReadUntil(until)
        );
        // The bound passes without the server's close.
        assert_eq!(release_step(&mut s, until), ReleaseStep::Done);
    }

    #[test]
    fn release_step_ends_on_an_error_frame() {
        let t0 = Instant::now();
        let mut s = Session::new(1000, t0);
        s.feed(&[0x12, 0, 0, 0, 0, 0, 0, 0, 5]);
        s.poll_frame(t0).unwrap();
        s.begin_release(t0);
        s.feed(&[0x13, 0x01, 0x00]);
        assert_eq!(release_step(&mut s, t0 + ms(1)), ReleaseStep::Done);
    }
}
