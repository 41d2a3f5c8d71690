//! The `log` feature: an acquisition that keeps failing is visible. Retries
//! are logged at `warn`, each failed attempt at `debug`, under the target
//! `monolock`, without the error's own "monolock: " prefix.
#![cfg(feature = "log")]

use std::sync::Mutex;
use std::time::Duration;

/// A logger that keeps every record: (level, target, message).
struct Capture(Mutex<Vec<(log::Level, String, String)>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let entry = (
            record.level(),
            record.target().to_owned(),
            record.args().to_string(),
        );
        self.0.lock().unwrap().push(entry);
    }

    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

#[test]
fn retries_are_logged_at_warn_and_attempts_at_debug() {
    log::set_logger(&CAPTURE).unwrap();
    log::set_max_level(log::LevelFilter::Debug);
    // A port that was free a moment ago: connections are refused.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let c = monolock::Client::builder().server(&addr).build().unwrap();
    c.acquire_timeout("jobs/log", Duration::from_millis(400))
        .unwrap_err();

    let records = CAPTURE.0.lock().unwrap();
    let of = |level| {
        records
            .iter()
            .filter(move |(l, target, _)| *l == level && target == "monolock")
            .map(|(_, _, msg)| msg.as_str())
            .collect::<Vec<_>>()
    };
    let warns = of(log::Level::Warn);
    let retry = warns
        .first()
        .unwrap_or_else(|| panic!("no warn: {records:?}"));
    assert!(
        retry.starts_with(&format!(
            "acquire \"jobs/log\": attempt on {addr} failed: connection failed: "
        )) && retry.contains("; retrying in "),
        "{retry}"
    );
    let debugs = of(log::Level::Debug);
    assert!(
        debugs
            .iter()
            .any(|m| m.starts_with(&format!("acquire \"jobs/log\": attempt on {addr} failed: "))),
        "{debugs:?}"
    );
    assert!(
        records.iter().all(|(_, _, msg)| !msg.contains("monolock:")),
        "a log line repeats the prefix: {records:?}"
    );
}
