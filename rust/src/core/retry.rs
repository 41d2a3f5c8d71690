//! What to do after a failed attempt to acquire: which server next, how
//! long to back off, and when to give the error to the caller instead.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use crate::addr::ServerAddr;
use crate::constants_gen as spec;
use crate::error::Error;

const INITIAL_MS: u64 = spec::RETRY_INITIAL_MS;
const MAX_MS: u64 = spec::RETRY_MAX_MS;
const MULTIPLIER: u64 = spec::RETRY_MULTIPLIER;
/// A claim queued this long before it failed starts the backoff over.
const RESET_AFTER_QUEUED: Duration = Duration::from_millis(spec::RETRY_RESET_AFTER_QUEUED_MS);

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

    /// Starts over at the smallest delay.
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
    /// The connection was made, then the claim ended: an ERROR, a dropped
    /// connection, the client timeout, a busy lock (try-acquire).
    /// `queued` is how long it had been queued (WAITING) by then.
    Session { error: Error, queued: Duration },
    /// The caller's deadline or a cancel: no retry can change it.
    Final(Error),
}

/// What an acquisition does next.
#[derive(Debug)]
pub(crate) enum Next {
    /// Connect to the server with this index and make one attempt.
    Connect(usize),
    /// Back off this long (never past the caller's deadline).
    Sleep(Duration),
    /// Stop: this error goes to the caller.
    GiveUp(Error),
}

/// What the last failure calls for.
#[derive(Debug)]
enum Then {
    Connect,
    Sleep,
    /// The short pause after a passive server's answer: the backoff's
    /// first delay, after which it starts over again.
    Pause,
    GiveUp(Error),
}

/// The retry policy of one acquisition (spec/constants.json `retry`, run by
/// spec/vectors/retry.json): one server cursor that moves on after every
/// failed attempt; a server that could not be reached is followed at once
/// by the next, until a whole pass failed to connect; a server that
/// answered and then failed is always followed by a backoff; a claim queued
/// for `RESET_AFTER_QUEUED` or longer resets the backoff; a server that
/// does not speak monolock, or whose TLS handshake failed on a
/// certificate, leaves the walk for good. A passive server of an HA cell
/// (ERROR 0x03) starts the backoff over and sends the next attempt to the
/// leader it named, if that is in the walk. Try-acquire makes one pass and
/// never sleeps; a temporary error moves it on like a failed connect.
#[derive(Debug)]
pub(crate) struct Plan {
    mode: Mode,
    servers: usize,
    cursor: usize,
    /// Connect failures since the last sleep.
    unreachable: usize,
    /// Servers that do not speak monolock: out of the walk.
    dropped: Vec<bool>,
    /// Servers still in the walk.
    live: usize,
    /// What the last failure calls for.
    then: Then,
    deadline: Option<Instant>,
    backoff: Backoff,
    /// The last failed attempt's error, kept as the cause of a timeout.
    last: Option<Error>,
    /// The server of the last attempt.
    last_server: usize,
    /// The lock, for the timeout's message.
    name: String,
}

impl Plan {
    pub(crate) fn new(mode: Mode, servers: usize, deadline: Option<Instant>) -> Plan {
        let servers = servers.max(1);
        Plan {
            mode,
            servers,
            cursor: 0,
            unreachable: 0,
            dropped: vec![false; servers],
            live: servers,
            then: Then::Connect,
            deadline,
            backoff: Backoff::new(),
            last: None,
            last_server: 0,
            name: String::new(),
        }
    }

    /// The plan for the lock `name`: its timeout names it.
    pub(crate) fn for_lock(mut self, name: &str) -> Plan {
        self.name = name.to_owned();
        self
    }

    /// The caller's deadline passed; `last` is the last attempt's failure.
    pub(crate) fn timeout(&self, last: Option<Error>) -> Error {
        Error::Timeout {
            name: self.name.clone(),
            last: last.map(Box::new),
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The last failed attempt's server and error, if the plan goes on
    /// after it.
    pub(crate) fn last_failure(&self) -> Option<(usize, &Error)> {
        self.last.as_ref().map(|err| (self.last_server, err))
    }

    /// Whether the caller's deadline has passed.
    pub(crate) fn expired(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }

    /// The next step at `now`. Past the caller's deadline that is a
    /// [`Error::Timeout`] carrying the last attempt's failure.
    pub(crate) fn next(&mut self, now: Instant) -> Next {
        match std::mem::replace(&mut self.then, Then::Connect) {
            Then::GiveUp(err) => Next::GiveUp(err),
            _ if self.expired(now) => {
                let last = self.last.take();
                Next::GiveUp(self.timeout(last))
            }
            Then::Sleep => {
                self.unreachable = 0;
                let delay = self.backoff.next_delay();
                Next::Sleep(self.cut_to_deadline(delay, now))
            }
            Then::Pause => {
                // delay_0, which is no step of the backoff: it starts over.
                self.unreachable = 0;
                let delay = self.backoff.next_delay();
                self.backoff.reset();
                Next::Sleep(self.cut_to_deadline(delay, now))
            }
            Then::Connect => Next::Connect(self.cursor),
        }
    }

    /// A sleep never outlasts the caller's deadline.
    fn cut_to_deadline(&self, delay: Duration, now: Instant) -> Duration {
        match self.deadline {
            Some(deadline) => delay.min(deadline.saturating_duration_since(now)),
            None => delay,
        }
    }

    /// Takes the outcome of the attempt that [`Plan::next`] asked for, on
    /// a plan that walks `servers` (the client's list): a passive server's
    /// ERROR 0x03 goes to [`Plan::not_active`] with the leader its reason
    /// names, any other outcome to [`Plan::failed`].
    pub(crate) fn report(&mut self, failure: Failure, servers: &[ServerAddr]) {
        match failure {
            Failure::Session {
                error: error @ Error::NotActive(_),
                ..
            } => {
                let leader = error
                    .reason()
                    .and_then(|reason| leader_index(servers, reason.text()));
                self.not_active(leader, error);
            }
            other => self.failed(other),
        }
    }

    /// Takes a passive server's answer (ERROR 0x03, `error`) that named
    /// `leader`, the index of the active server in the list (`None`: none
    /// of the list). A cell that answers is alive and elects within its
    /// TTL, so the backoff starts over and only a short pause follows; the
    /// next attempt goes to the leader if it is still in the walk, else on
    /// as after any failure. Try-acquire's one pass takes it as a requeue.
    pub(crate) fn not_active(&mut self, leader: Option<usize>, error: Error) {
        if self.mode == Mode::Try {
            let queued = Duration::ZERO;
            return self.failed(Failure::Session { error, queued });
        }
        self.last_server = self.cursor;
        self.unreachable = 0;
        self.backoff.reset();
        match leader {
            Some(i) if i < self.servers && !self.dropped[i] => self.cursor = i,
            _ => self.advance(),
        }
        self.then = Then::Pause;
        self.last = Some(error);
    }

    /// Takes the outcome of the attempt that [`Plan::next`] asked for.
    pub(crate) fn failed(&mut self, failure: Failure) {
        self.last_server = self.cursor;
        let (then, error) = match failure {
            Failure::Final(err) => (Then::GiveUp(err), None),
            Failure::Connect(error) | Failure::Session { error, .. } if leaves_the_walk(&error) => {
                // Asking it again would only hide the mistake.
                self.dropped[self.cursor] = true;
                self.live -= 1;
                if self.live == 0 {
                    (Then::GiveUp(error), None)
                } else {
                    self.advance();
                    // Dropping it may complete a pass of failed connects.
                    self.on_or_pass_over(error)
                }
            }
            Failure::Connect(err) => {
                self.advance();
                self.unreachable += 1;
                self.on_or_pass_over(err)
            }
            Failure::Session { error, queued } => {
                self.advance();
                if matches!(error, Error::Busy { .. }) || !error.is_temporary() {
                    (Then::GiveUp(error), None)
                } else if self.mode == Mode::Try {
                    // One pass: a temporary error (such as a passive
                    // server's 0x03) moves on to the next server.
                    self.unreachable += 1;
                    self.on_or_pass_over(error)
                } else {
                    // A long wait in the queue shows a healthy server.
                    if queued >= RESET_AFTER_QUEUED {
                        self.backoff.reset();
                    }
                    (Then::Sleep, Some(error))
                }
            }
        };
        self.then = then;
        self.last = error;
    }

    /// After an attempt that reached no monolock server: on to the next
    /// server at once, unless every server left has failed to connect
    /// since the last sleep (then back off, or end a try's one pass).
    fn on_or_pass_over(&self, err: Error) -> (Then, Option<Error>) {
        match (self.unreachable >= self.live, self.mode) {
            (false, _) => (Then::Connect, Some(err)),
            (true, Mode::Try) => (Then::GiveUp(err), None),
            (true, Mode::Wait) => (Then::Sleep, Some(err)),
        }
    }

    /// Moves the cursor to the next server still in the walk.
    fn advance(&mut self) {
        loop {
            self.cursor = (self.cursor + 1) % self.servers;
            if !self.dropped[self.cursor] {
                return;
            }
        }
    }
}

/// The index in `servers` of the server a passive server's ERROR 0x03
/// names in `reason` (spec/vectors/retry.json, leader_names): the reason
/// is parsed as a configured address is, and the first server with the
/// same host (ASCII case aside) and port is it. Nothing is resolved, so
/// only an address the client was given can be named; a reason that does
/// not parse (the canonical text, say) names none.
pub(crate) fn leader_index(servers: &[ServerAddr], reason: &str) -> Option<usize> {
    let named = ServerAddr::parse(reason).ok()?;
    servers
        .iter()
        .position(|s| s.port == named.port && s.host.eq_ignore_ascii_case(&named.host))
}

/// Whether the server of a failed attempt leaves the walk: it does not
/// speak monolock, or its TLS handshake failed on a certificate
/// (spec/constants.json, client_defaults.tls_certificate_rule). Either
/// answers the same way next time.
fn leaves_the_walk(err: &Error) -> bool {
    matches!(err, Error::NotMonolock { .. }) || err.is_certificate_problem()
}

/// Logs a failed attempt: at `debug`, or at `warn` for a server that
/// leaves the walk because it does not speak monolock or refused a
/// certificate.
pub(crate) fn log_failure(name: &str, server: &ServerAddr, failure: &Failure) {
    match failure {
        Failure::Connect(err) | Failure::Session { error: err, .. } => match err {
            err if leaves_the_walk(err) => log_at!(
                warn,
                "acquire {name:?}: not asking {server} again: {}",
                err.bare()
            ),
            _ => log_at!(
                debug,
                "acquire {name:?}: attempt on {server} failed: {}",
                err.bare()
            ),
        },
        Failure::Final(_) => {}
    }
}

/// Logs a backoff sleep, at `warn`: an acquisition that keeps failing is
/// otherwise invisible.
pub(crate) fn log_retry(name: &str, delay: Duration, plan: &Plan, servers: &[ServerAddr]) {
    if let Some((server, err)) = plan.last_failure() {
        log_at!(
            warn,
            "acquire {name:?}: attempt on {} failed: {}; retrying in {delay:?}",
            servers[server],
            err.bare()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::code;
    use crate::spec;

    #[test]
    fn constants_match_spec() {
        let c = spec::load("constants.json");
        assert_eq!(c["retry"]["initial_ms"], INITIAL_MS);
        assert_eq!(c["retry"]["max_ms"], MAX_MS);
        assert_eq!(c["retry"]["multiplier"], MULTIPLIER);
        assert_eq!(
            c["retry"]["reset_after_queued_ms"].as_u64().unwrap(),
            RESET_AFTER_QUEUED.as_millis() as u64
        );
        assert_eq!(c["retry"]["server_order"], "rotate");
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
    fn retry_vectors() {
        let v = spec::load("vectors/retry.json");
        let cases = v["cases"].as_array().unwrap();
        assert!(cases.len() >= 10);
        let now = Instant::now();
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let mode = match case["mode"].as_str().unwrap() {
                "wait" => Mode::Wait,
                _ => Mode::Try,
            };
            let servers = case["servers"].as_u64().unwrap() as usize;
            let mut plan = Plan::new(mode, servers, None);
            for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
                let expect = step["expect"].as_str().unwrap();
                let next = plan.next(now);
                let words: Vec<&str> = expect.split_whitespace().collect();
                match (words.as_slice(), &next) {
                    (["connect", n], Next::Connect(got)) => {
                        assert_eq!(n.parse::<usize>().unwrap(), *got, "{name} step {i}")
                    }
                    (["sleep", range], Next::Sleep(d)) => {
                        let (lo, hi) = range.split_once("..").unwrap();
                        let d = d.as_millis() as u64;
                        let (lo, hi) = (lo.parse::<u64>().unwrap(), hi.parse::<u64>().unwrap());
                        assert!(
                            lo <= d && d <= hi,
                            "{name} step {i}: slept {d}, want {expect}"
                        );
                    }
                    (["give_up"], Next::GiveUp(_)) => {}
                    _ => panic!("{name} step {i}: got {next:?}, want {expect}"),
                }
                let queued = Duration::from_millis(step["queued_ms"].as_u64().unwrap_or(0));
                let session = |error| Failure::Session { error, queued };
                match step["outcome"].as_str() {
                    None | Some("granted") => {}
                    Some("connect_failed") => plan.failed(Failure::Connect(Error::io(
                        std::io::ErrorKind::ConnectionRefused.into(),
                    ))),
                    Some("requeue") => {
                        plan.failed(session(Error::from_code(code::SHUTTING_DOWN, "")))
                    }
                    Some("terminal") => {
                        plan.failed(session(Error::from_code(code::NOT_AUTHORIZED, "")))
                    }
                    Some("busy") => plan.failed(session(Error::Busy {
                        name: "test".into(),
                        shared: false,
                        limit: None,
                    })),
                    Some("not_active") => {
                        let leader = step["leader"].as_u64().map(|i| i as usize);
                        plan.not_active(leader, Error::from_code(code::NOT_ACTIVE, ""))
                    }
                    Some("not_monolock") => plan.failed(session(Error::NotMonolock {
                        server: "test:1".into(),
                        sent: b"HTTP/1.1 400".to_vec(),
                    })),
                    Some(other) => panic!("{name}: outcome {other}"),
                }
            }
        }
    }

    /// Which server of the list a passive server's ERROR 0x03 names
    /// (spec/vectors/retry.json, leader_names).
    #[test]
    fn leader_name_vectors() {
        let v = spec::load("vectors/retry.json");
        let names = &v["leader_names"];
        let servers: Vec<ServerAddr> = names["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| ServerAddr::parse(s.as_str().unwrap()).unwrap())
            .collect();
        let cases = names["cases"].as_array().unwrap();
        assert!(!cases.is_empty());
        for case in cases {
            let reason = case["reason"].as_str().unwrap();
            let want = case["index"].as_u64().map(|i| i as usize);
            assert_eq!(leader_index(&servers, reason), want, "reason {reason:?}");
        }
    }

    /// An attempt's ERROR 0x03 reaches the plan with the leader its reason
    /// names: the next connect goes there after the short pause.
    #[test]
    fn a_passive_answer_is_reported_with_its_leader() {
        let servers: Vec<ServerAddr> = ["a:1", "b:1", "c:1"]
            .iter()
            .map(|s| ServerAddr::parse(s).unwrap())
            .collect();
        let now = Instant::now();
        let mut p = Plan::new(Mode::Wait, servers.len(), None);
        let passive = |reason: &str| Failure::Session {
            error: Error::from_code(code::NOT_ACTIVE, reason),
            queued: Duration::ZERO,
        };
        assert!(matches!(p.next(now), Next::Connect(0)));
        p.report(passive("C:1"), &servers);
        assert!(matches!(p.next(now), Next::Sleep(d) if d <= Duration::from_millis(50)));
        assert!(matches!(p.next(now), Next::Connect(2)));
        // The canonical text names no server: on to the next one.
        p.report(passive(""), &servers);
        assert!(matches!(p.next(now), Next::Sleep(_)));
        assert!(matches!(p.next(now), Next::Connect(0)));
        match p.last_failure() {
            Some((2, Error::NotActive(_))) => {}
            other => panic!("{other:?}"),
        }
        // Any other failure is the plain outcome.
        p.report(
            Failure::Session {
                error: Error::from_code(code::NOT_AUTHORIZED, ""),
                queued: Duration::ZERO,
            },
            &servers,
        );
        assert!(matches!(p.next(now), Next::GiveUp(Error::NotAuthorized(_))));
    }

    #[test]
    fn the_callers_deadline_cuts_sleeps_and_ends_the_plan() {
        let now = Instant::now();
        let deadline = now + Duration::from_millis(30);
        let mut p = Plan::new(Mode::Wait, 1, Some(deadline));
        assert!(matches!(p.next(now), Next::Connect(0)));
        p.failed(Failure::Session {
            error: Error::Timeout {
                name: String::new(),
                last: None,
            },
            queued: Duration::ZERO,
        });
        assert!(matches!(p.next(now), Next::Sleep(d) if d <= Duration::from_millis(30)));
        assert!(matches!(p.next(now), Next::Connect(0)));
        p.failed(Failure::Connect(Error::io(
            std::io::ErrorKind::ConnectionRefused.into(),
        )));
        // The timeout keeps the last attempt's failure as its cause.
        match p.next(deadline) {
            Next::GiveUp(Error::Timeout {
                last: Some(last), ..
            }) => assert!(
                matches!(*last, Error::Io(ref e) if e.kind() == std::io::ErrorKind::ConnectionRefused),
                "{last:?}"
            ),
            other => panic!("{other:?}"),
        }
        // A terminal error wins over the deadline; so does a cancel.
        p.failed(Failure::Session {
            error: Error::from_code(code::NOT_AUTHORIZED, ""),
            queued: Duration::ZERO,
        });
        assert!(matches!(
            p.next(deadline),
            Next::GiveUp(Error::NotAuthorized(_))
        ));
        p.failed(Failure::Final(Error::Cancelled));
        assert!(matches!(p.next(now), Next::GiveUp(Error::Cancelled)));
    }

    /// A TLS handshake that failed on a certificate is the outcome
    /// not_monolock (spec/constants.json, tls_certificate_rule), whether it
    /// ended the connect or, in TLS 1.3, the first read of the session.
    #[cfg(feature = "tls")]
    #[test]
    fn a_certificate_problem_drops_the_server() {
        let server = ServerAddr::parse("h:1").unwrap();
        let problem = || {
            let alert = rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired);
            crate::core::step::read_failed(
                &server,
                std::io::Error::new(std::io::ErrorKind::InvalidData, alert),
            )
        };
        let now = Instant::now();
        let deadline = Some(now + Duration::from_secs(10));
        for session in [false, true] {
            let failure = || match session {
                false => Failure::Connect(problem()),
                true => Failure::Session {
                    error: problem(),
                    queued: Duration::ZERO,
                },
            };
            // Alone: the error goes to the caller at once, before the deadline.
            let mut p = Plan::new(Mode::Wait, 1, deadline);
            assert!(matches!(p.next(now), Next::Connect(0)));
            p.failed(failure());
            match p.next(now) {
                Next::GiveUp(err) => assert!(err.is_certificate_problem(), "{err:?}"),
                other => panic!("{other:?}"),
            }
            // With another server: that one at once, and only that one.
            let mut p = Plan::new(Mode::Wait, 2, deadline);
            assert!(matches!(p.next(now), Next::Connect(0)));
            p.failed(failure());
            assert!(matches!(p.next(now), Next::Connect(1)));
            p.failed(Failure::Session {
                error: Error::from_code(code::SHUTTING_DOWN, ""),
                queued: Duration::ZERO,
            });
            assert!(matches!(p.next(now), Next::Sleep(_)));
            assert!(matches!(p.next(now), Next::Connect(1)));
        }
    }

    /// An attempt that was queued when the deadline passed ends the plan
    /// with a bare timeout: the lock stayed busy, nothing failed.
    #[test]
    fn a_timeout_while_queued_has_no_cause() {
        let now = Instant::now();
        let mut p = Plan::new(Mode::Wait, 1, Some(now));
        p.failed(Failure::Final(p.timeout(None)));
        assert!(matches!(
            p.next(now),
            Next::GiveUp(Error::Timeout { last: None, .. })
        ));
    }
}
