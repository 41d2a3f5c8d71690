//! Client settings and their builder, shared by both clients.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::addr::ServerAddr;
use crate::claim::Claim;
use crate::core::codec::{invalid_lease, MAX_LEASE_MS};
use crate::error::Error;

/// The server used when none is configured.
pub const DEFAULT_SERVER: &str = crate::constants_gen::CLIENT_DEFAULTS_DEFAULT_SERVER;
/// The lease used when none is configured: how long the server keeps a
/// silent session. Heartbeats go out every quarter of it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);
/// The connect timeout used when none is configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

type WaitingHook = Arc<dyn Fn(&str) + Send + Sync>;

/// The lease in whole milliseconds, or the 0x17 refusal: a lease that is
/// not a whole number of milliseconds is refused, never rounded.
pub(crate) fn lease_ms(lease: Duration) -> Result<u32, Error> {
    let whole = lease.subsec_nanos() % 1_000_000 == 0;
    match u32::try_from(lease.as_millis()) {
        Ok(ms) if whole && ms > 0 && u64::from(ms) <= MAX_LEASE_MS => Ok(ms),
        _ => Err(invalid_lease(&format!("{lease:?}"))),
    }
}

/// Settings shared by every acquire of one client, checked by `build`.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) servers: Vec<ServerAddr>,
    pub(crate) lease_ms: u32,
    pub(crate) connect_timeout: Duration,
    pub(crate) on_waiting: Option<WaitingHook>,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<crate::tls::TlsSettings>,
}

impl Config {
    /// Runs the WAITING hook, if any.
    pub(crate) fn notify_waiting(&self, name: &str) {
        if let Some(hook) = &self.on_waiting {
            hook(name);
        }
    }

    /// Validates `name` and `claim` and builds their ACQUIRE with the
    /// configured lease.
    pub(crate) fn acquire_frame(&self, name: &str, claim: &Claim) -> Result<Vec<u8>, Error> {
        crate::core::codec::encode_claim(name.as_bytes(), u64::from(self.lease_ms), claim)
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Config");
        d.field("servers", &self.servers)
            .field("lease_ms", &self.lease_ms)
            .field("connect_timeout", &self.connect_timeout)
            .field("on_waiting", &self.on_waiting.is_some());
        #[cfg(feature = "tls")]
        d.field("tls", &self.tls.is_some());
        d.finish()
    }
}

/// Builds a client: [`Client::builder`](crate::Client::builder) starts
/// one for the blocking [`Client`](crate::Client), and, with the `tokio`
/// feature, [`tokio::Client::builder`](crate::tokio::Client::builder) one
/// for the async [`tokio::Client`](crate::tokio::Client). The type
/// parameter is the client that `build` returns: write the blocking one's
/// builder as `ClientBuilder<Client>`, the tokio one's as
/// [`tokio::ClientBuilder`](crate::tokio::ClientBuilder).
///
/// `build` checks the settings: a server address that does not parse is
/// [`Error::Config`], a lease outside the protocol's range (or not a
/// whole number of milliseconds) is [`Error::InvalidLease`]. Neither is
/// ever temporary.
///
/// ```
/// use std::time::Duration;
///
/// let client = monolock::Client::builder()
///     .server("127.0.0.1:7117")
///     .lease(Duration::from_secs(5))
///     .connect_timeout(Duration::from_secs(2))
///     .on_waiting(|name| eprintln!("queued for {name}"))
///     .build()?;
/// # drop(client);
/// # Ok::<(), monolock::Error>(())
/// ```
//
// This module names neither client, so that no two modules import each
// other: each client's module adds the `build` that returns it (the
// blocking one also `new` and `Default`).
pub struct ClientBuilder<C> {
    servers: Vec<String>,
    lease: Duration,
    connect_timeout: Duration,
    on_waiting: Option<WaitingHook>,
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::TlsSettings>,
    client: PhantomData<fn() -> C>,
}

impl<C> Clone for ClientBuilder<C> {
    fn clone(&self) -> Self {
        ClientBuilder {
            servers: self.servers.clone(),
            lease: self.lease,
            connect_timeout: self.connect_timeout,
            on_waiting: self.on_waiting.clone(),
            #[cfg(feature = "tls")]
            tls: self.tls.clone(),
            client: PhantomData,
        }
    }
}

impl<C> fmt::Debug for ClientBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ClientBuilder");
        d.field("servers", &self.servers)
            .field("lease", &self.lease)
            .field("connect_timeout", &self.connect_timeout)
            .field("on_waiting", &self.on_waiting.is_some());
        #[cfg(feature = "tls")]
        d.field("tls", &self.tls.is_some());
        d.finish()
    }
}

impl<C> ClientBuilder<C> {
    pub(crate) fn with_defaults() -> ClientBuilder<C> {
        ClientBuilder {
            servers: Vec::new(),
            lease: DEFAULT_LEASE,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            on_waiting: None,
            #[cfg(feature = "tls")]
            tls: None,
            client: PhantomData,
        }
    }

    /// Adds a server: `host:port`, `[ipv6]:port`, or a bare host, which
    /// means port [`DEFAULT_PORT`](crate::DEFAULT_PORT). With several
    /// servers, connection attempts go round the list in order.
    pub fn server(mut self, addr: impl Into<String>) -> Self {
        self.servers.push(addr.into());
        self
    }

    /// Replaces the server list.
    pub fn servers<I, S>(mut self, addrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.servers = addrs.into_iter().map(Into::into).collect();
        self
    }

    /// The lease: how long the server keeps a session that stopped
    /// heartbeating. It sets how fast a dead holder is detected, not how
    /// long a lock may be held (that is unlimited).
    ///
    /// A whole number of milliseconds from 1 ms to 4294967295 ms; `build`
    /// refuses anything else with [`Error::InvalidLease`] (`1.5 ms` is
    /// refused, not truncated).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long one connection attempt (TCP, and the TLS handshake) may
    /// take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Calls `hook` with the lock name each time the server queues this
    /// client (WAITING): once per connection, so again after a re-queue.
    /// It runs on the acquiring thread (or task) and should return quickly.
    pub fn on_waiting<F>(mut self, hook: F) -> Self
    where
        F: Fn(&str) + Send + Sync + 'static,
    {
        self.on_waiting = Some(Arc::new(hook));
        self
    }

    /// Connects with TLS using this rustls configuration; build it with
    /// [`tls::config_builder`](crate::tls::config_builder). The server name
    /// checked against the certificate is the host part of each server
    /// address, unless [`ClientBuilder::tls_server_name`] sets one.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, config: Arc<rustls::ClientConfig>) -> Self {
        let name = self.tls.take().and_then(|t| t.server_name);
        self.tls = Some(crate::tls::TlsSettings {
            config,
            server_name: name,
        });
        self
    }

    /// The name to verify the server certificate against, for every server.
    /// Only takes effect together with [`ClientBuilder::tls`].
    #[cfg(feature = "tls")]
    pub fn tls_server_name(mut self, name: impl Into<String>) -> Self {
        if let Some(tls) = &mut self.tls {
            tls.server_name = Some(name.into());
        }
        self
    }

    /// Checks the settings: the errors of a configuration come here, not
    /// at connect time.
    pub(crate) fn finish(self) -> Result<Arc<Config>, Error> {
        let mut servers = self
            .servers
            .iter()
            .map(|s| ServerAddr::parse(s))
            .collect::<Result<Vec<_>, _>>()?;
        if servers.is_empty() {
            servers.push(ServerAddr::parse(DEFAULT_SERVER)?);
        }
        Ok(Arc::new(Config {
            servers,
            lease_ms: lease_ms(self.lease)?,
            connect_timeout: self.connect_timeout,
            on_waiting: self.on_waiting,
            #[cfg(feature = "tls")]
            tls: self.tls,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec;

    /// Each client's `build` is `finish` and a constructor, so the checks
    /// are tested here without a client.
    fn builder() -> ClientBuilder<()> {
        ClientBuilder::with_defaults()
    }

    #[test]
    fn a_bad_address_fails_the_build_not_the_acquire() {
        let err = builder()
            .server("localhost:7117")
            .server("host:0")
            .finish()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "monolock: server address \"host:0\": the port must be a number from 1 to 65535"
        );
        let c = builder().server("locks.internal").finish().unwrap();
        assert_eq!(c.servers[0].to_string(), "locks.internal:7117");
        let c = builder().server("::1").finish().unwrap();
        assert_eq!(c.servers[0].to_string(), "[::1]:7117");
        let c = builder().finish().unwrap();
        assert_eq!(c.servers[0].to_string(), DEFAULT_SERVER);
        let spec_default = &spec::load("constants.json")["client_defaults"]["default_server"];
        assert_eq!(spec_default, DEFAULT_SERVER);
    }

    /// The lease rule of spec/constants.json: whole milliseconds from 1 to
    /// 4294967295, anything else refused with 0x17, never rounded.
    #[test]
    fn lease_is_whole_milliseconds_or_refused() {
        let rule = spec::load("constants.json")["client_defaults"]["lease_rule"]
            .as_str()
            .unwrap()
            .to_owned();
        let wording = "lease must be a whole number of milliseconds from 1 ms to 4294967295 ms";
        assert!(rule.contains(wording), "the spec's wording changed: {rule}");
        assert_eq!(lease_ms(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(lease_ms(Duration::from_secs(2)).unwrap(), 2000);
        assert_eq!(
            lease_ms(Duration::from_millis(MAX_LEASE_MS)).unwrap(),
            u32::MAX
        );
        for (lease, given) in [
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(1_000_001), "1.000001ms"),
            (Duration::from_micros(999), "999µs"),
            (Duration::ZERO, "0ns"),
            (Duration::from_millis(MAX_LEASE_MS + 1), "4294967.296s"),
        ] {
            let err = builder().lease(lease).finish().unwrap_err();
            assert_eq!(err.code(), Some(0x17), "{lease:?}");
            assert!(!err.is_temporary());
            assert_eq!(err.reason().unwrap().origin(), crate::error::Origin::Client);
            assert_eq!(
                err.to_string(),
                format!("monolock: {wording}, got {given} (0x17)")
            );
        }
    }
}
