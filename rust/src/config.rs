//! Client settings and their builder, shared by both clients.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;

/// The server used when none is configured.
pub const DEFAULT_SERVER: &str = "127.0.0.1:7117";
/// The lease used when none is configured: how long the server keeps a
/// silent session. Heartbeats go out every quarter of it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);
/// The connect timeout used when none is configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

type WaitingHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Settings shared by every acquire of one client.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) servers: Vec<String>,
    pub(crate) lease: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) on_waiting: Option<WaitingHook>,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<crate::tls::TlsSettings>,
}

impl Config {
    /// The lease in whole milliseconds, as the wire carries it. Values that
    /// do not fit are passed on as they are so that validation refuses them
    /// with the protocol's code.
    pub(crate) fn lease_ms(&self) -> u64 {
        u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX)
    }

    /// Runs the WAITING hook, if any.
    pub(crate) fn notify_waiting(&self, name: &str) {
        if let Some(hook) = &self.on_waiting {
            hook(name);
        }
    }

    /// Validates `name` with the configured lease and builds its ACQUIRE.
    pub(crate) fn acquire_frame(&self, name: &str) -> Result<(Vec<u8>, u32), Error> {
        let frame = crate::core::codec::encode_acquire(name.as_bytes(), self.lease_ms())?;
        // encode_acquire has checked the range.
        Ok((frame, self.lease_ms() as u32))
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Config");
        d.field("servers", &self.servers)
            .field("lease", &self.lease)
            .field("connect_timeout", &self.connect_timeout)
            .field("on_waiting", &self.on_waiting.is_some());
        #[cfg(feature = "tls")]
        d.field("tls", &self.tls.is_some());
        d.finish()
    }
}

/// Builds a [`Client`](crate::Client) (or, with the `tokio` feature, a
/// [`tokio::Client`](crate::tokio::Client)).
///
/// ```
/// use std::time::Duration;
///
/// let client = monolock::Client::builder()
///     .server("127.0.0.1:7117")
///     .lease(Duration::from_secs(5))
///     .connect_timeout(Duration::from_secs(2))
///     .on_waiting(|name| eprintln!("queued for {name}"))
///     .build();
/// # drop(client);
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    config: Config,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder::new()
    }
}

impl ClientBuilder {
    /// A builder with the defaults: server [`DEFAULT_SERVER`], lease
    /// [`DEFAULT_LEASE`], connect timeout [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn new() -> ClientBuilder {
        ClientBuilder {
            config: Config {
                servers: Vec::new(),
                lease: DEFAULT_LEASE,
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                on_waiting: None,
                #[cfg(feature = "tls")]
                tls: None,
            },
        }
    }

    /// Adds a server, as `host:port`. With several servers, connection
    /// attempts go round the list in order.
    pub fn server(mut self, addr: impl Into<String>) -> ClientBuilder {
        self.config.servers.push(addr.into());
        self
    }

    /// Replaces the server list.
    pub fn servers<I, S>(mut self, addrs: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.servers = addrs.into_iter().map(Into::into).collect();
        self
    }

    /// The lease: how long the server keeps a session that stopped
    /// heartbeating. It sets how fast a dead holder is detected, not how
    /// long a lock may be held (that is unlimited).
    ///
    /// Whole milliseconds from 1 to 4294967295 are valid; anything else is
    /// refused at acquire time with [`Error::InvalidLease`](crate::Error::InvalidLease),
    /// before a byte is sent. Sub-millisecond parts are dropped.
    pub fn lease(mut self, lease: Duration) -> ClientBuilder {
        self.config.lease = lease;
        self
    }

    /// How long one connection attempt may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.config.connect_timeout = timeout;
        self
    }

    /// Calls `hook` with the lock name each time the server queues this
    /// client (WAITING): once per connection, so again after a re-queue.
    /// It runs on the acquiring thread (or task) and should return quickly.
    pub fn on_waiting<F>(mut self, hook: F) -> ClientBuilder
    where
        F: Fn(&str) + Send + Sync + 'static,
    {
        self.config.on_waiting = Some(Arc::new(hook));
        self
    }

    /// Connects with TLS using this rustls configuration. The server name
    /// checked against the certificate is the host part of each server
    /// address, unless [`ClientBuilder::tls_server_name`] sets one.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, config: Arc<rustls::ClientConfig>) -> ClientBuilder {
        let name = self.config.tls.take().and_then(|t| t.server_name);
        self.config.tls = Some(crate::tls::TlsSettings {
            config,
            server_name: name,
        });
        self
    }

    /// The name to verify the server certificate against, for every server.
    /// Only takes effect together with [`ClientBuilder::tls`].
    #[cfg(feature = "tls")]
    pub fn tls_server_name(mut self, name: impl Into<String>) -> ClientBuilder {
        if let Some(tls) = &mut self.config.tls {
            tls.server_name = Some(name.into());
        }
        self
    }

    fn finish(mut self) -> Arc<Config> {
        if self.config.servers.is_empty() {
            self.config.servers.push(DEFAULT_SERVER.to_owned());
        }
        Arc::new(self.config)
    }

    /// Builds the blocking client.
    pub fn build(self) -> crate::Client {
        crate::Client::from_config(self.finish())
    }

    /// Builds the async client for tokio.
    #[cfg(feature = "tokio")]
    pub fn build_async(self) -> crate::tokio::Client {
        crate::tokio::Client::from_config(self.finish())
    }
}
