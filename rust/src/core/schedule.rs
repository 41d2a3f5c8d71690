//! The heartbeat schedule: how often to send, and how long a lock stays
//! valid after an acknowledged send. All values derive from the lease.

use std::time::Duration;

use crate::constants_gen as spec;

const BASE_INTERVAL_FACTOR: f64 = spec::HEARTBEAT_BASE_INTERVAL_FACTOR;
const CLIENT_TIMEOUT_FACTOR: f64 = spec::HEARTBEAT_CLIENT_TIMEOUT_FACTOR;
const SRTT_ALPHA: f64 = spec::HEARTBEAT_SRTT_ALPHA;
const SAFE_RTT_FACTOR: f64 = spec::HEARTBEAT_SAFE_RTT_FACTOR as f64;
const MIN_INTERVAL_MS: f64 = spec::HEARTBEAT_MIN_INTERVAL_MS as f64;
/// The longest a release waits for the server to close its side
/// (spec/constants.json `release.max_wait_ms`).
const RELEASE_WAIT_MAX: Duration = Duration::from_millis(spec::RELEASE_MAX_WAIT_MS);

/// Heartbeat timing for one connection, in milliseconds as `f64` so that
/// the arithmetic matches `spec/vectors/heartbeat.json` exactly.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    lease_ms: f64,
    srtt_ms: Option<f64>,
}

impl Schedule {
    pub(crate) fn new(lease_ms: u32) -> Schedule {
        Schedule {
            lease_ms: f64::from(lease_ms),
            srtt_ms: None,
        }
    }

    /// Feeds one round-trip sample (send of ACQUIRE/HEARTBEAT to its reply).
    pub(crate) fn observe_rtt(&mut self, rtt: Duration) {
        self.observe_rtt_ms(rtt.as_secs_f64() * 1000.0);
    }

    fn observe_rtt_ms(&mut self, rtt_ms: f64) {
        self.srtt_ms = Some(match self.srtt_ms {
            None => rtt_ms,
            Some(srtt) => srtt + SRTT_ALPHA * (rtt_ms - srtt),
        });
    }

    fn base_interval_ms(&self) -> f64 {
        self.lease_ms * BASE_INTERVAL_FACTOR
    }

    fn client_timeout_ms(&self) -> f64 {
        self.lease_ms * CLIENT_TIMEOUT_FACTOR
    }

    fn interval_ms(&self) -> f64 {
        let base = self.base_interval_ms();
        let safe_rtt = SAFE_RTT_FACTOR * self.srtt_ms.unwrap_or(0.0);
        // Not f64::clamp: for leases under 4 ms the base is below the minimum,
        // and the base (the upper bound) wins.
        (base - safe_rtt).max(MIN_INTERVAL_MS).min(base)
    }

    /// Time from one heartbeat send to the next.
    pub(crate) fn interval(&self) -> Duration {
        ms(self.interval_ms())
    }

    /// How long after an acknowledged send the client still trusts its
    /// session: 0.8 of the lease, so it always gives up before the server.
    pub(crate) fn client_timeout(&self) -> Duration {
        ms(self.client_timeout_ms())
    }

    /// The lease: the server keeps a silent session this long after it
    /// last heard from it, so a lost client may keep its connection open
    /// until `sendTime(last acked) + lease` without shortening anyone's wait.
    /// The lease in milliseconds, for messages.
    pub(crate) fn lease_ms(&self) -> u32 {
        self.lease_ms as u32 // exact: it came from a u32
    }

    pub(crate) fn lease(&self) -> Duration {
        ms(self.lease_ms)
    }

    /// How long a release waits for the server's close after half-closing:
    /// the client timeout, at most one second. Past the client timeout the
    /// server may be gone anyway; the cap keeps a release of a long lease
    /// quick when the server is slow.
    pub(crate) fn release_wait(&self) -> Duration {
        self.client_timeout().min(RELEASE_WAIT_MAX)
    }
}

fn ms(value: f64) -> Duration {
    Duration::from_secs_f64(value / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn constants_match_spec() {
        let c = spec::load("constants.json");
        let hb = &c["heartbeat"];
        assert_eq!(hb["base_interval_factor"], BASE_INTERVAL_FACTOR);
        assert_eq!(hb["client_timeout_factor"], CLIENT_TIMEOUT_FACTOR);
        assert_eq!(hb["srtt_alpha"], SRTT_ALPHA);
        assert_eq!(hb["safe_rtt_factor"].as_f64().unwrap(), SAFE_RTT_FACTOR);
        assert_eq!(hb["min_interval_ms"].as_f64().unwrap(), MIN_INTERVAL_MS);
        assert_eq!(
            c["release"]["max_wait_ms"].as_u64().unwrap(),
            RELEASE_WAIT_MAX.as_millis() as u64
        );
    }

    #[test]
    fn schedule_matches_vectors() {
        let v = spec::load("vectors/heartbeat.json");
        let tol = v["tolerance_ms"].as_f64().unwrap();
        for case in v["cases"].as_array().unwrap() {
            let desc = case["desc"].as_str().unwrap();
            let lease = case["lease_ms"].as_u64().unwrap() as u32;
            let mut s = Schedule::new(lease);
            let f = |key: &str| case[key].as_f64().unwrap();
            assert!(
                close(s.base_interval_ms(), f("base_interval_ms"), tol),
                "{desc}"
            );
            assert!(
                close(s.client_timeout_ms(), f("client_timeout_ms"), tol),
                "{desc}"
            );
            assert!(
                close(s.interval_ms(), f("initial_interval_ms"), tol),
                "{desc}"
            );
            for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
                s.observe_rtt_ms(step["rtt_ms"].as_f64().unwrap());
                let srtt = s.srtt_ms.unwrap();
                let want_srtt = step["srtt_ms"].as_f64().unwrap();
                let want_interval = step["interval_ms"].as_f64().unwrap();
                assert!(close(srtt, want_srtt, tol), "{desc} step {i}: srtt {srtt}");
                assert!(
                    close(s.interval_ms(), want_interval, tol),
                    "{desc} step {i}: interval {}",
                    s.interval_ms()
                );
            }
        }
    }

    #[test]
    fn durations_follow_milliseconds() {
        let mut s = Schedule::new(1000);
        assert_eq!(s.client_timeout(), Duration::from_millis(800));
        assert_eq!(s.interval(), Duration::from_millis(250));
        assert_eq!(s.lease(), Duration::from_millis(1000));
        s.observe_rtt(Duration::from_millis(10));
        assert_eq!(s.interval(), Duration::from_millis(230));
    }

    #[test]
    fn release_wait_is_the_client_timeout_capped_at_one_second() {
        assert_eq!(
            Schedule::new(500).release_wait(),
            Duration::from_millis(400)
        );
        assert_eq!(
            Schedule::new(1250).release_wait(),
            Duration::from_millis(1000)
        );
        assert_eq!(Schedule::new(30_000).release_wait(), Duration::from_secs(1));
        assert_eq!(Schedule::new(1).release_wait(), Duration::from_micros(800));
    }
}
