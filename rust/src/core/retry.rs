//! What to do after a failed attempt to acquire: which server next, how
//! long to back off, and when to give the error to the caller instead.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use crate::error::Error;

const INITIAL_MS: u64 = 50;
const MAX_MS: u64 = 2000;
const MULTIPLIER: u64 = 2;

/// Exponential backoff with equal jitter: attempt n sleeps uniformly in
/// `[d/2, d]` with `d = min(max, initial * multiplier^n)`.
#[derive(Debug)]
pub(crate) struct Backoff {
    attempt: u32,
    rng: u64,
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        // A random seed without dependencies: std's hasher keys are random.
        let mut h = RandomState::new().build_hasher();
        h.write_u64(0x6d6f6e6f6c6f636b);
        Backoff {
            attempt: 0,
            rng: h.finish() | 1,
        }
    }

    /// The ceiling of the next delay (before jitter).
    fn ceiling_ms(&self) -> u64 {
        let factor = MULTIPLIER.saturating_pow(self.attempt);
        INITIAL_MS.saturating_mul(factor).min(MAX_MS)
    }

    /// The next delay; each call moves one step up the ladder.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling_ms();
        self.attempt = self.attempt.saturating_add(1);
        let half = ceiling / 2;
        let jitter = self.next_random() % (ceiling - half + 1);
        Duration::from_millis(half + jitter)
    }

    /// Starts over after an attempt that reached the server's queue.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }

    /// xorshift64: plenty for spreading reconnects.
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}

/// How an acquire treats WAITING and failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Queue until granted or the deadline passes.
    Wait,
    /// One ACQUIRE; WAITING means busy.
    Try,
}

/// Why an attempt ended without a grant.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No connection could be made to this server (nothing was sent).
    Connect(Error),
    /// The connection was made but ended: an ERROR, a failure, silence.
    Session(Error),
    /// The caller's deadline, a cancel, a busy lock or a terminal error
    /// that no retry can change.
    Final(Error),
}

/// The state of one acquire across its attempts.
#[derive(Debug)]
pub(crate) struct Plan {
    mode: Mode,
    servers: usize,
    next: usize,
    /// Attempts in a row that failed to connect (try mode walks the list
    /// once).
    connect_failures: usize,
    deadline: Option<Instant>,
    backoff: Backoff,
}

impl Plan {
    pub(crate) fn new(mode: Mode, servers: usize, deadline: Option<Instant>) -> Plan {
        Plan {
            mode,
            servers: servers.max(1),
            next: 0,
            connect_failures: 0,
            deadline,
            backoff: Backoff::new(),
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the caller's deadline has passed.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }

    /// Index of the server for the next attempt (round robin).
    pub(crate) fn next_server(&mut self) -> usize {
        let i = self.next;
        self.next = (self.next + 1) % self.servers;
        i
    }

    /// The attempt reached the server's queue: later retries start over at
    /// the smallest backoff.
    pub(crate) fn reached_queue(&mut self) {
        self.backoff.reset();
    }

    /// Decides after a failed attempt: `Ok(delay)` to try again after the
    /// delay, or the error for the caller.
    pub(crate) fn after_failure(
        &mut self,
        failure: Failure,
        now: Instant,
    ) -> Result<Duration, Error> {
        let err = match failure {
            Failure::Final(err) => return Err(err),
            Failure::Connect(err) => {
                self.connect_failures += 1;
                if self.mode == Mode::Try {
                    // Try mode walks the server list once, without delay.
                    return if self.connect_failures < self.servers {
                        Ok(Duration::ZERO)
                    } else {
                        Err(err)
                    };
                }
                err
            }
            Failure::Session(err) => {
                self.connect_failures = 0;
                if self.mode == Mode::Try {
                    return Err(err);
                }
                err
            }
        };
        if !err.is_temporary() {
            return Err(err);
        }
        if self.expired(now) {
            return Err(Error::Timeout);
        }
        let delay = self.backoff.next_delay();
        Ok(match self.deadline {
            // Never sleep past the deadline; the next loop turn reports it.
            Some(deadline) => delay.min(deadline.saturating_duration_since(now)),
            None => delay,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec;

    #[test]
    fn constants_match_spec() {
        let c = spec::load("constants.json");
        assert_eq!(c["retry"]["initial_ms"], INITIAL_MS);
        assert_eq!(c["retry"]["max_ms"], MAX_MS);
        assert_eq!(c["retry"]["multiplier"], MULTIPLIER);
    }

    #[test]
    fn backoff_doubles_with_equal_jitter_up_to_the_cap() {
        let mut b = Backoff::new();
        let ceilings = [50, 100, 200, 400, 800, 1600, 2000, 2000, 2000];
        for ceiling in ceilings {
            let d = b.next_delay().as_millis() as u64;
            assert!(
                d >= ceiling / 2 && d <= ceiling,
                "{d} outside [{}, {ceiling}]",
                ceiling / 2
            );
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(50));
        // Far up the ladder nothing overflows.
        b.attempt = u32::MAX;
        assert!(b.next_delay() <= Duration::from_millis(MAX_MS));
    }

    #[test]
    fn try_mode_walks_the_servers_once_then_fails() {
        let now = Instant::now();
        let mut p = Plan::new(Mode::Try, 2, None);
        let io = || Error::io(std::io::ErrorKind::ConnectionRefused.into());
        assert_eq!(p.next_server(), 0);
        assert_eq!(
            p.after_failure(Failure::Connect(io()), now).unwrap(),
            Duration::ZERO
        );
        assert_eq!(p.next_server(), 1);
        assert!(matches!(
            p.after_failure(Failure::Connect(io()), now),
            Err(Error::Io(_))
        ));
        let mut p = Plan::new(Mode::Try, 2, None);
        let temp = Error::from_code(1, "");
        assert!(matches!(
            p.after_failure(Failure::Session(temp), now),
            Err(Error::ShuttingDown(_))
        ));
    }

    #[test]
    fn wait_mode_retries_temporary_until_the_deadline() {
        let now = Instant::now();
        let deadline = now + Duration::from_millis(30);
        let mut p = Plan::new(Mode::Wait, 1, Some(deadline));
        let d = p
            .after_failure(Failure::Session(Error::from_code(2, "")), now)
            .unwrap();
        assert!(d <= Duration::from_millis(30), "{d:?}");
        let d = p
            .after_failure(Failure::Session(Error::Timeout), now)
            .unwrap();
        assert!(d <= Duration::from_millis(30));
        assert!(matches!(
            p.after_failure(Failure::Session(Error::from_code(2, "")), deadline),
            Err(Error::Timeout)
        ));
        let terminal = Error::from_code(0x18, "");
        assert!(matches!(
            p.after_failure(Failure::Session(terminal), now),
            Err(Error::NotAuthorized(_))
        ));
        assert!(matches!(
            p.after_failure(Failure::Final(Error::Cancelled), now),
            Err(Error::Cancelled)
        ));
    }
}
