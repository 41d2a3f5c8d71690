//! Conformance driver for the Rust clients: JSON-line commands on stdin,
//! JSON-line events on stdout (see docs/writing-a-client.md). It uses the
//! crate's public API only.
//!
//! ```text
//! cargo build --features tokio,tls --example conformance_driver
//! target/debug/examples/conformance_driver --api blocking   # or --api tokio
//! ```
//!
//! This file holds what both APIs share (output, command parsing, the claim
//! table, the observed event); `blocking.rs` and `tokio_api.rs` hold one API
//! each.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use monolock::{ClientBuilder, Error, LeaderState, Observation, Origin};
use serde_json::{json, Value};

mod blocking;
mod tokio_api;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let api = match args.as_slice() {
        [flag, api] if flag == "--api" => api.clone(),
        _ => {
            eprintln!("usage: conformance_driver --api blocking|tokio");
            std::process::exit(2);
        }
    };
    let out = Out::new();
    match api.as_str() {
        "blocking" => blocking::run(out),
        "tokio" => tokio_api::run(out),
        other => {
            eprintln!("unknown api {other:?}: want blocking or tokio");
            std::process::exit(2);
        }
    }
}

/// Event output: one JSON object per line, flushed, stamped with `t_ms`.
#[derive(Clone)]
struct Out {
    start: Instant,
    stdout: Arc<Mutex<std::io::Stdout>>,
}

impl Out {
    fn new() -> Out {
        Out {
            start: Instant::now(),
            stdout: Arc::new(Mutex::new(std::io::stdout())),
        }
    }

    fn emit(&self, mut event: Value) {
        let t_ms = self.start.elapsed().as_secs_f64() * 1000.0;
        event["t_ms"] = json!((t_ms * 1000.0).round() / 1000.0);
        let mut line = event.to_string();
        line.push('\n');
        let mut out = self.stdout.lock().unwrap_or_else(PoisonError::into_inner);
        // A closed stdout means the runner is gone; nothing left to tell.
        let _ = out.write_all(line.as_bytes());
        let _ = out.flush();
    }

    fn driver_error(&self, message: impl Into<String>) {
        self.emit(json!({"event": "driver_error", "message": message.into()}));
    }

    fn acquired(&self, id: &str, token: u64, valid_until: Instant) {
        let valid_ms = valid_until
            .saturating_duration_since(Instant::now())
            .as_secs_f64()
            * 1000.0;
        self.emit(json!({"event": "acquired", "id": id, "token": token.to_string(), "valid_ms": valid_ms}));
    }

    fn error(&self, id: &str, err: &Error) {
        let kind = match err {
            Error::Busy { .. } => "busy",
            Error::Timeout { .. } | Error::ClientTimeout { .. } => "timeout",
            Error::Cancelled => "cancelled",
            Error::ServerEnded => "server", // an ERROR whose code never came: code null
            Error::Io(_) | Error::Protocol(_) | Error::NotMonolock { .. } => "connect",
            Error::Config(_) => "validation",
            coded => match coded.reason().map(|r| r.origin()) {
                Some(Origin::Client) => "validation",
                _ => "server",
            },
        };
        self.emit(describe(
            json!({"event": "error", "id": id, "kind": kind}),
            err,
        ));
    }

    fn lost(&self, id: &str, err: &Error) {
        let cause = match err {
            Error::Lost(cause) => cause.as_ref(),
            other => other,
        };
        let kind = match cause {
            Error::Timeout { .. } | Error::ClientTimeout { .. } => "timeout",
            Error::ServerEnded => "server",
            Error::Io(_) | Error::Protocol(_) => "io",
            _ if cause.code().is_some() => "server",
            _ => "io",
        };
        self.emit(describe(
            json!({"event": "lost", "id": id, "kind": kind}),
            cause,
        ));
    }
}

/// An observation as an observed event: token and value only with a token
/// (a leader, or a held-back one that has one), candidates for any known
/// picture.
fn observed(id: &str, o: &Observation) -> Value {
    let state = match o.state {
        LeaderState::Leading => "leader",
        LeaderState::NoLeader => "none",
        LeaderState::HeldBack => "held_back",
        LeaderState::Unknown => "unknown",
    };
    let mut event = json!({"event": "observed", "id": id, "state": state});
    if o.state == LeaderState::Unknown {
        return event;
    }
    event["candidates"] = json!(o.candidates);
    if o.token != 0 {
        event["token"] = json!(o.token.to_string());
        event["value"] = json!(String::from_utf8_lossy(&o.value));
    }
    event
}

/// The observed events of one observe: each change of what the event
/// shows (a new hold's end or a new identity alone is none), and nothing
/// before the first known picture: the protocol never starts with unknown,
/// and a picture known when the watch started can lapse before it is read.
struct Changes {
    id: String,
    last: Option<Value>,
}

impl Changes {
    fn new(id: &str) -> Changes {
        Changes {
            id: id.to_owned(),
            last: None,
        }
    }

    /// The event to report for `o`, if it is news.
    fn news(&mut self, o: &Observation) -> Option<Value> {
        if self.last.is_none() && o.state == LeaderState::Unknown {
            return None;
        }
        let event = observed(&self.id, o);
        if self.last.as_ref() == Some(&event) {
            return None;
        }
        self.last = Some(event.clone());
        Some(event)
    }
}

/// Adds code, temporary and message to an event.
fn describe(mut event: Value, err: &Error) -> Value {
    let code = err.code();
    event["code"] = json!(code);
    event["temporary"] = match code {
        Some(_) => json!(err.is_temporary()),
        None => Value::Null,
    };
    event["message"] = json!(err.to_string());
    event
}

/// The TLS settings of an acquire: the rustls config and the server name.
#[cfg(feature = "tls")]
type Tls = (Arc<rustls::ClientConfig>, Option<String>);
#[cfg(not(feature = "tls"))]
type Tls = std::convert::Infallible;

type WaitingHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Where and how a command's client connects: the servers, the lease, the
/// connect timeout and TLS of an acquire or an observe.
struct Endpoint {
    servers: Vec<String>,
    lease: Duration,
    connect_timeout: Option<Duration>,
    // Never set without the tls feature: such a command is refused.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    tls: Option<Tls>,
}

impl Endpoint {
    fn parse(cmd: &Value, what: &str) -> Result<Endpoint, String> {
        let lease_ms = cmd["lease_ms"]
            .as_u64()
            .ok_or(format!("{what} without lease_ms"))?;
        let servers: Vec<String> = cmd["servers"]
            .as_array()
            .ok_or(format!("{what} without servers"))?
            .iter()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect();
        let tls = match &cmd["tls"] {
            Value::Null => None,
            t => Some(tls_settings(t)?),
        };
        Ok(Endpoint {
            servers,
            lease: Duration::from_millis(lease_ms),
            connect_timeout: cmd["connect_timeout_ms"]
                .as_u64()
                .map(Duration::from_millis),
            tls,
        })
    }

    /// Applies the settings to a builder of either client.
    fn configure<C>(&self, builder: ClientBuilder<C>) -> ClientBuilder<C> {
        let mut builder = builder.servers(self.servers.clone()).lease(self.lease);
        if let Some(timeout) = self.connect_timeout {
            builder = builder.connect_timeout(timeout);
        }
        #[cfg(feature = "tls")]
        if let Some((config, server_name)) = &self.tls {
            builder = builder.tls(Arc::clone(config));
            if let Some(name) = server_name {
                builder = builder.tls_server_name(name.clone());
            }
        }
        builder
    }
}

/// The lock name of a command: `name`, or the bytes of `name_hex`.
fn name_of(cmd: &Value, what: &str) -> Result<String, String> {
    match (cmd["name"].as_str(), cmd["name_hex"].as_str()) {
        (Some(name), _) => Ok(name.to_owned()),
        (None, Some(hex)) => {
            let bytes = decode_hex(hex)?;
            // The Rust API takes &str: invalid UTF-8 cannot reach it, so
            // this driver does not declare invalid_utf8_names.
            String::from_utf8(bytes).map_err(|_| "name_hex is not UTF-8".to_owned())
        }
        (None, None) => Err(format!("{what} without name")),
    }
}

/// The fields of an `acquire` command.
struct AcquireCmd {
    id: String,
    name: String,
    try_mode: bool,
    /// Exclusive, shared, or a semaphore's permit (`shared`, `limit`),
    /// with the campaign's `value` if any.
    claim: monolock::Claim,
    timeout: Option<Duration>,
    endpoint: Endpoint,
    on_waiting: Option<WaitingHook>,
}

impl AcquireCmd {
    fn parse(cmd: &Value) -> Result<AcquireCmd, String> {
        let id = cmd["id"].as_str().ok_or("acquire without id")?.to_owned();
        let try_mode = match cmd["mode"].as_str() {
            Some("try") => true,
            Some("wait") | None => false,
            Some(other) => return Err(format!("unknown mode {other}")),
        };
        Ok(AcquireCmd {
            id,
            name: name_of(cmd, "acquire")?,
            try_mode,
            claim: claim_of(cmd)?,
            timeout: cmd["timeout_ms"].as_u64().map(Duration::from_millis),
            endpoint: Endpoint::parse(cmd, "acquire")?,
            on_waiting: None,
        })
    }

    /// Applies the command's settings to a builder of either client.
    fn configure<C>(&self, builder: ClientBuilder<C>) -> ClientBuilder<C> {
        let builder = self.endpoint.configure(builder);
        match &self.on_waiting {
            Some(hook) => {
                let hook = Arc::clone(hook);
                builder.on_waiting(move |name| hook(name))
            }
            None => builder,
        }
    }
}

/// The fields of an `observe` command.
struct ObserveCmd {
    id: String,
    name: String,
    endpoint: Endpoint,
}

impl ObserveCmd {
    fn parse(cmd: &Value) -> Result<ObserveCmd, String> {
        Ok(ObserveCmd {
            id: cmd["id"].as_str().ok_or("observe without id")?.to_owned(),
            name: name_of(cmd, "observe")?,
            endpoint: Endpoint::parse(cmd, "observe")?,
        })
    }
}

/// The claim of an acquire command: `"shared": true` (absent: false) makes
/// it shared, and `"limit": N` (absent or 0: no limit; only with shared) a
/// semaphore of N permits. A limit out of range goes to the client, which
/// refuses it (0x19); one too large even for its parameter is passed as the
/// largest it takes, refused just the same. A `value` makes it a campaign's
/// claim (protocol version 3).
fn claim_of(cmd: &Value) -> Result<monolock::Claim, String> {
    let shared = match &cmd["shared"] {
        Value::Null => false,
        Value::Bool(b) => *b,
        other => return Err(format!("shared must be true or false, got {other}")),
    };
    let limit = match &cmd["limit"] {
        Value::Null => 0,
        v => match (v.as_u64(), v.as_i64()) {
            (Some(n), _) => n,
            (None, Some(n)) => return Err(format!("limit must not be negative, got {n}")),
            _ => return Err(format!("limit must be a whole number, got {v}")),
        },
    };
    let claim = match (shared, limit) {
        (false, 0) => monolock::Claim::exclusive(),
        (false, n) => return Err(format!("limit {n} without shared")),
        (true, 0) => monolock::Claim::shared(),
        (true, n) => monolock::Claim::semaphore(u32::try_from(n).unwrap_or(u32::MAX)),
    };
    match &cmd["value"] {
        Value::Null => Ok(claim),
        Value::String(v) => Ok(claim.with_value(v.as_bytes())),
        other => Err(format!("value must be a string, got {other}")),
    }
}

/// The driver's capabilities: `tls` only when built with the crate's `tls`
/// feature.
fn capabilities() -> Value {
    if cfg!(feature = "tls") {
        json!(["cancel", "election", "sessions", "shared", "tls"])
    } else {
        json!(["cancel", "election", "sessions", "shared"])
    }
}

/// A `session` command: its id and where and how to connect.
struct SessionCmd {
    id: String,
    endpoint: Endpoint,
}

impl SessionCmd {
    fn parse(cmd: &Value) -> Result<SessionCmd, String> {
        Ok(SessionCmd {
            id: cmd["id"].as_str().ok_or("session without id")?.to_owned(),
            endpoint: Endpoint::parse(cmd, "session")?,
        })
    }
}

/// The acquire ids of a session's claims not yet granted, by lock name:
/// the session's `on_waiting` hook names a lock, and the first claim
/// queued on it is the one that waits.
#[derive(Clone, Default)]
struct WaitingIds(Arc<Mutex<HashMap<String, std::collections::VecDeque<String>>>>);

impl WaitingIds {
    fn add(&self, name: &str, id: &str) {
        lock(&self.0)
            .entry(name.to_owned())
            .or_default()
            .push_back(id.to_owned());
    }

    fn remove(&self, name: &str, id: &str) {
        if let Some(ids) = lock(&self.0).get_mut(name) {
            ids.retain(|i| i != id);
        }
    }

    /// The hook of the session's client: `waiting` for the claim queued.
    fn hook(&self, out: &Out) -> impl Fn(&str) + Send + Sync + 'static {
        let (ids, out) = (self.clone(), out.clone());
        move |name| {
            let id = lock(&ids.0).get_mut(name).and_then(|ids| ids.pop_front());
            if let Some(id) = id {
                out.emit(json!({"event": "waiting", "id": id}));
            }
        }
    }
}

/// Applies the command's tls object: the CA to verify the server with, an
/// optional client certificate and key (PEM files), and the server name.
#[cfg(feature = "tls")]
fn tls_settings(t: &Value) -> Result<Tls, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let file = |key: &str| -> Result<Option<&str>, String> {
        match &t[key] {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.as_str())),
            _ => Err(format!("tls.{key} must be a string")),
        }
    };
    let certs = |path: &str| -> Result<Vec<CertificateDer<'static>>, String> {
        CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("{path}: {e}"))
    };
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = file("ca_file")? {
        for cert in certs(ca)? {
            roots.add(cert).map_err(|e| format!("{ca}: {e}"))?;
        }
    }
    let config = monolock::tls::config_builder().with_root_certificates(roots);
    let config = match (file("cert_file")?, file("key_file")?) {
        (Some(cert), Some(key)) => {
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{key}: {e}"))?;
            config
                .with_client_auth_cert(certs(cert)?, key)
                .map_err(|e| format!("client certificate: {e}"))?
        }
        (None, None) => config.with_no_client_auth(),
        _ => return Err("tls: cert_file and key_file go together".into()),
    };
    Ok((Arc::new(config), file("server_name")?.map(str::to_owned)))
}

#[cfg(not(feature = "tls"))]
fn tls_settings(_: &Value) -> Result<Tls, String> {
    Err("tls needs the crate's tls feature (cargo build --features tokio,tls)".into())
}

fn decode_hex(s: &str) -> Result<Vec<u8>, String> {
    if s.len() % 2 != 0 {
        return Err(format!("odd hex length: {s}"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads stdin lines on a thread and hands each parsed command to `handle`;
/// returns at `quit` or end of input.
fn command_loop(out: &Out, mut handle: impl FnMut(&str, &Value)) {
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let cmd: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(_) => {
                out.driver_error(format!("not JSON: {line}"));
                continue;
            }
        };
        match cmd["cmd"].as_str() {
            Some("quit") => return,
            Some(
                name @ ("acquire" | "release" | "cancel" | "proclaim" | "observe" | "session"),
            ) => handle(name, &cmd),
            _ => out.driver_error(format!("unknown command: {line}")),
        }
    }
}

/// What the driver knows of one command id, in either API: `P` is how to
/// cancel a pending acquire, `G` the lock guard, shared with a proclaim in
/// flight.
enum Claim<P, G> {
    Pending(P),
    Held(Arc<G>),
    Done,
}

type Claims<P, G> = Arc<Mutex<HashMap<String, Claim<P, G>>>>;

/// What the driver asks of a lock guard, in either API.
trait Guard {
    type Watch;
    fn token(&self) -> u64;
    fn valid_until(&self) -> Instant;
    fn watch(&self) -> Self::Watch;
}

/// Parses an acquire command, checks that its id is free and hooks the
/// `waiting` event to its settings; on a problem it reports a driver error
/// and returns `None`.
fn start_acquire<P, G>(out: &Out, claims: &Claims<P, G>, cmd: &Value) -> Option<AcquireCmd> {
    let mut parsed = match AcquireCmd::parse(cmd) {
        Ok(p) => p,
        Err(e) => {
            out.driver_error(e);
            return None;
        }
    };
    if matches!(
        lock(claims).get(&parsed.id),
        Some(Claim::Pending(_) | Claim::Held(_))
    ) {
        out.driver_error(format!("id {} is already in use", parsed.id));
        return None;
    }
    let (waiting_out, waiting_id) = (out.clone(), parsed.id.clone());
    parsed.on_waiting = Some(Arc::new(move |_: &str| {
        waiting_out.emit(json!({"event": "waiting", "id": waiting_id}))
    }));
    Some(parsed)
}

/// Records the outcome of an acquire and reports it; returns the watch of
/// a granted lock. The event goes out under the lock, so that a release
/// that follows it finds the claim.
fn record<P, G: Guard>(
    out: &Out,
    claims: &Claims<P, G>,
    id: &str,
    res: Result<G, Error>,
) -> Option<G::Watch> {
    let mut map = lock(claims);
    match res {
        Ok(guard) => {
            out.acquired(id, guard.token(), guard.valid_until());
            let watch = guard.watch();
            map.insert(id.to_owned(), Claim::Held(Arc::new(guard)));
            Some(watch)
        }
        Err(err) => {
            map.insert(id.to_owned(), Claim::Done);
            out.error(id, &err);
            None
        }
    }
}

/// Takes the claim a release command names: `Some((id, Some(guard)))` to
/// release, `Some((id, None))` when it ended already, `None` after
/// reporting a driver error. Finish with [`end_release`].
fn begin_release<P, G>(
    out: &Out,
    claims: &Claims<P, G>,
    cmd: &Value,
) -> Option<(String, Option<Arc<G>>)> {
    let id = cmd["id"].as_str().unwrap_or_default().to_owned();
    let claim = lock(claims).remove(&id);
    match claim {
        Some(Claim::Held(guard)) => Some((id, Some(guard))),
        Some(Claim::Done) => Some((id, None)),
        Some(Claim::Pending(cancel)) => {
            lock(claims).insert(id.clone(), Claim::Pending(cancel));
            out.driver_error(format!("release: id {id} is still pending"));
            None
        }
        None => {
            out.driver_error(format!("release: no lock for id {id}"));
            None
        }
    }
}

/// Marks a released claim done and reports it.
fn end_release<P, G>(out: &Out, claims: &Claims<P, G>, id: String) {
    lock(claims).insert(id.clone(), Claim::Done);
    out.emit(json!({"event": "released", "id": id}));
}

/// The guard a proclaim command names and the value to proclaim; `None`
/// after reporting a driver error (no such held claim, no value).
fn start_proclaim<P, G>(
    out: &Out,
    claims: &Claims<P, G>,
    cmd: &Value,
) -> Option<(String, Arc<G>, String)> {
    let id = cmd["id"].as_str().unwrap_or_default().to_owned();
    let Some(value) = cmd["value"].as_str() else {
        out.driver_error(format!("proclaim {id} without value"));
        return None;
    };
    let guard = match lock(claims).get(&id) {
        Some(Claim::Held(guard)) => Arc::clone(guard),
        _ => {
            out.driver_error(format!("proclaim: id {id} holds no lock"));
            return None;
        }
    };
    Some((id, guard, value.to_owned()))
}

/// Reports a proclaim's outcome: proclaimed once the server has the value;
/// a lock lost first has said so with its lost event already.
fn end_proclaim(out: &Out, id: &str, res: Result<(), Error>) {
    match res {
        Ok(()) => out.emit(json!({"event": "proclaimed", "id": id})),
        Err(Error::Lost(_)) => {}
        Err(err) => out.error(id, &err),
    }
}

/// Parses an observe command and checks that its id is free of claims and
/// of other observes (`observing`); on a problem it reports a driver error
/// and returns `None`.
fn start_observe<P, G>(
    out: &Out,
    claims: &Claims<P, G>,
    observing: impl Fn(&str) -> bool,
    cmd: &Value,
) -> Option<ObserveCmd> {
    let parsed = match ObserveCmd::parse(cmd) {
        Ok(p) => p,
        Err(e) => {
            out.driver_error(e);
            return None;
        }
    };
    if observing(&parsed.id) || lock(claims).contains_key(&parsed.id) {
        out.driver_error(format!("id {} is already used", parsed.id));
        return None;
    }
    Some(parsed)
}
