//! TLS to the server with rustls (feature `tls`), for both clients.
//!
//! Give the client a rustls [`ClientConfig`] with
//! [`ClientBuilder::tls`](crate::ClientBuilder::tls). Build it from
//! [`config_builder`], which names this crate's crypto provider (ring), so
//! it works whatever else your program links:
//!
//! ```no_run
//! # fn demo(roots: rustls::RootCertStore) -> Result<(), monolock::Error> {
//! use std::sync::Arc;
//!
//! let tls = monolock::tls::config_builder()
//!     .with_root_certificates(roots)
//!     .with_no_client_auth();
//! let client = monolock::Client::builder()
//!     .server("locks.internal:7117")
//!     .tls(Arc::new(tls))
//!     .build()?;
//! # Ok(()) }
//! ```
//!
//! `rustls::ClientConfig::builder()` would instead look for the
//! process-level provider, and panics with "Could not automatically
//! determine the process-level CryptoProvider" when the program has both
//! ring (from this crate) and aws-lc-rs (rustls's default features) and
//! none was installed. If you build the config that way, install one
//! first: `rustls::crypto::ring::default_provider().install_default()`.
//! Client certificates (for the server's ACL) go into the config as usual,
//! with `with_client_auth_cert` instead of `with_no_client_auth`.

use std::io;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, ConfigBuilder, WantsVerifier};

use crate::addr::ServerAddr;
use crate::certificate::{refused, CertificateProblem};

/// A rustls client config builder on this crate's crypto provider (ring)
/// with rustls's safe default protocol versions (TLS 1.2 and 1.3). It needs
/// no process-level default provider.
pub fn config_builder() -> ConfigBuilder<ClientConfig, WantsVerifier> {
    ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        // ring supports every default version: this cannot fail.
        .expect("the ring provider supports TLS 1.2 and 1.3")
}

/// The TLS part of a client's configuration.
#[derive(Clone)]
pub(crate) struct TlsSettings {
    pub(crate) config: Arc<ClientConfig>,
    /// Overrides the host part of the server address for verification.
    pub(crate) server_name: Option<String>,
}

/// The first byte of every TLS record a server may open with: a handshake
/// (0x16), or an alert (0x15) when it refuses the client's hello.
const TLS_OPENERS: [u8; 2] = [0x16, 0x15];

/// Starts a client TLS session for `server`.
fn client_session(settings: &TlsSettings, server: &ServerAddr) -> io::Result<ClientConnection> {
    let host = settings
        .server_name
        .clone()
        .unwrap_or_else(|| server.host.clone());
    let name =
        ServerName::try_from(host).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    ClientConnection::new(Arc::clone(&settings.config), name).map_err(io::Error::other)
}

/// `err` as a [`CertificateProblem`] with `server` when rustls failed it on
/// a certificate; otherwise `Err(err)` as it was.
fn as_certificate_problem(server: &ServerAddr, err: io::Error) -> Result<io::Error, io::Error> {
    let side = match err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
        .and_then(refused)
    {
        Some(side) => side,
        None => return Err(err),
    };
    let kind = err.kind();
    let cause = *err
        .into_inner()
        .and_then(|e| e.downcast::<rustls::Error>().ok())
        .expect("checked above");
    let problem = CertificateProblem::new(server.to_string(), side, cause);
    Ok(io::Error::new(kind, problem))
}

/// A read's error on a TLS connection to `server` just after the handshake:
/// in TLS 1.3 the server's refusal of the client's certificate arrives as
/// an alert on the first read. Such an alert becomes a
/// [`CertificateProblem`]; any other error stays as it is.
pub(crate) fn read_failed(server: &ServerAddr, err: io::Error) -> io::Error {
    as_certificate_problem(server, err).unwrap_or_else(|err| err)
}

/// The error of a failed handshake, naming the server; `first` is the first
/// byte the server sent, if any. A server that answered with something
/// that starts no TLS record is most likely a plaintext server. A failure
/// on a certificate becomes a [`CertificateProblem`].
fn handshake_failed(server: &ServerAddr, first: Option<u8>, err: io::Error) -> io::Error {
    let err = match as_certificate_problem(server, err) {
        Ok(problem) => return problem,
        Err(err) => err,
    };
    let mut text = format!("TLS handshake with {server} failed ({err})");
    if first.is_some_and(|b| !TLS_OPENERS.contains(&b)) {
        text.push_str("; the server may not speak TLS");
    }
    io::Error::new(err.kind(), text)
}

/// The TCP socket during a blocking handshake, noting the first byte read.
struct Watched<'a> {
    tcp: &'a std::net::TcpStream,
    first: Option<u8>,
}

impl io::Read for Watched<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = io::Read::read(&mut self.tcp, buf)?;
        if n > 0 && self.first.is_none() {
            self.first = Some(buf[0]);
        }
        Ok(n)
    }
}

impl io::Write for Watched<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::Write::write(&mut self.tcp, buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::Write::flush(&mut self.tcp)
    }
}

/// Completes the handshake on a blocking socket before `deadline`; the
/// returned session is ready for application data on `tcp`.
pub(crate) fn handshake_blocking(
    settings: &TlsSettings,
    server: &ServerAddr,
    tcp: &std::net::TcpStream,
    deadline: std::time::Instant,
) -> io::Result<ClientConnection> {
    let mut conn = client_session(settings, server)?;
    let mut io = Watched { tcp, first: None };
    while conn.is_handshaking() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            let err = io::Error::new(io::ErrorKind::TimedOut, "timed out");
            return Err(handshake_failed(server, io.first, err));
        }
        tcp.set_read_timeout(Some(left))?;
        tcp.set_write_timeout(Some(left))?;
        match conn.complete_io(&mut io) {
            Ok((0, 0)) if conn.is_handshaking() => {
                let err = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                );
                return Err(handshake_failed(server, io.first, err));
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(handshake_failed(server, io.first, e)),
        }
    }
    tcp.set_write_timeout(None)?;
    Ok(conn)
}

/// A TLS session over a tokio socket, driven by hand so that no further
/// dependency is needed. Reads are cancel-safe: the only await in a read is
/// the socket read itself.
#[cfg(feature = "tokio")]
pub(crate) struct AsyncTls {
    tcp: tokio::net::TcpStream,
    conn: ClientConnection,
    /// The first byte the server sent, for the handshake's error.
    first: Option<u8>,
}

#[cfg(feature = "tokio")]
impl AsyncTls {
    /// Runs the handshake to completion.
    pub(crate) async fn handshake(
        settings: &TlsSettings,
        server: &ServerAddr,
        tcp: tokio::net::TcpStream,
    ) -> io::Result<AsyncTls> {
        let mut tls = AsyncTls {
            tcp,
            conn: client_session(settings, server)?,
            first: None,
        };
        match tls.run_handshake().await {
            Ok(()) => Ok(tls),
            Err(e) => Err(handshake_failed(server, tls.first, e)),
        }
    }

    async fn run_handshake(&mut self) -> io::Result<()> {
        while self.conn.is_handshaking() {
            self.flush().await?;
            if self.conn.is_handshaking() && self.fill().await? {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ));
            }
        }
        self.flush().await
    }

    /// Writes out whatever rustls has queued.
    async fn flush(&mut self) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        while self.conn.wants_write() {
            let mut out = Vec::new();
            self.conn.write_tls(&mut out)?;
            self.tcp.write_all(&out).await?;
        }
        Ok(())
    }

    /// Reads one chunk of TLS records from the socket into rustls; `true`
    /// at end of stream.
    async fn fill(&mut self) -> io::Result<bool> {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 4096];
        let n = self.tcp.read(&mut buf).await?;
        if n > 0 && self.first.is_none() {
            self.first = Some(buf[0]);
        }
        let mut chunk = &buf[..n];
        loop {
            // With an empty chunk this tells rustls about the end of stream.
            self.conn.read_tls(&mut chunk)?;
            self.conn
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if chunk.is_empty() {
                return Ok(n == 0);
            }
        }
    }

    /// Reads plaintext; `Ok(0)` at the end of the stream.
    pub(crate) async fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        use std::io::Read;
        loop {
            match self.conn.reader().read(out) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if self.fill().await? {
                return match self.conn.reader().read(out) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                    other => other,
                };
            }
        }
    }

    /// Writes a whole frame (and anything else rustls has queued).
    pub(crate) async fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        use std::io::Write;
        self.conn.writer().write_all(frame)?;
        self.flush().await
    }

    /// Sends close_notify, then shuts down the socket's write side; the
    /// server's answer can still be read.
    pub(crate) async fn half_close(&mut self) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        self.conn.send_close_notify();
        self.flush().await?;
        self.tcp.shutdown().await
    }
}

/// Dropping an established session (every close that is not a
/// half-close: an acquire that failed or gave up, a session that ended)
/// sends its close_notify if the socket takes it at once; a drop cannot
/// wait. rustls queues it only once, so after a half-close this writes
/// nothing. A handshake cut short ends without one, as on the blocking
/// client.
#[cfg(feature = "tokio")]
impl Drop for AsyncTls {
    fn drop(&mut self) {
        if self.conn.is_handshaking() {
            return;
        }
        self.conn.send_close_notify();
        let mut out = Vec::new();
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut out).is_err() {
                return;
            }
        }
        if !out.is_empty() {
            let _ = self.tcp.try_write(&out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificate::{certificate_problem, Refused};

    #[test]
    fn a_failed_handshake_names_the_server_and_says_when_it_may_not_be_tls() {
        let server = ServerAddr::parse("localhost:7117").unwrap();
        let eof = || io::Error::from(io::ErrorKind::InvalidData);
        let plain = handshake_failed(&server, Some(0x13), eof()).to_string();
        assert!(
            plain.starts_with("TLS handshake with localhost:7117 failed (")
                && plain.ends_with("); the server may not speak TLS"),
            "{plain}"
        );
        for tls_first in [Some(0x16), Some(0x15), None] {
            let msg = handshake_failed(&server, tls_first, eof()).to_string();
            assert!(!msg.contains("may not speak TLS"), "{tls_first:?}: {msg}");
        }
    }

    /// The rule's certificate problems (spec/constants.json,
    /// client_defaults.tls_certificate_rule): which side refused, the
    /// message, and that it is a connect failure that is not temporary.
    #[test]
    fn certificate_problems_say_which_side_refused() {
        use rustls::AlertDescription as A;
        let rule = crate::spec::load("constants.json")["client_defaults"]["tls_certificate_rule"]
            .as_str()
            .unwrap()
            .to_owned();
        let server = ServerAddr::parse("locks.internal:7117").unwrap();
        let bad_cert = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let mut cases = vec![(bad_cert, Some(Refused::ServerCert))];
        for (alert, code) in [
            (A::BadCertificate, 42),
            (A::UnsupportedCertificate, 43),
            (A::CertificateRevoked, 44),
            (A::CertificateExpired, 45),
            (A::CertificateUnknown, 46),
            (A::UnknownCA, 48),
            (A::AccessDenied, 49),
            (A::CertificateRequired, 116),
        ] {
            assert_eq!(u8::from(alert), code);
            assert!(rule.contains(&format!(" {code}")), "{code} not in the rule");
            cases.push((
                rustls::Error::AlertReceived(alert),
                Some(Refused::ClientCert),
            ));
        }
        for other in [A::HandshakeFailure, A::ProtocolVersion, A::DecryptError] {
            cases.push((rustls::Error::AlertReceived(other), None));
        }
        cases.push((rustls::Error::DecryptError, None));
        for (cause, side) in cases {
            let text = cause.to_string();
            let io_err = io::Error::new(io::ErrorKind::InvalidData, cause);
            let read = read_failed(&server, io_err);
            let err = crate::Error::io(read);
            assert_eq!(err.is_certificate_problem(), side.is_some(), "{text}");
            let Some(side) = side else {
                assert!(err.is_temporary(), "{text}");
                continue;
            };
            let crate::Error::Io(inner) = &err else {
                unreachable!()
            };
            assert_eq!(certificate_problem(inner).unwrap().side(), side);
            assert!(!err.is_temporary() && err.code().is_none() && !err.is_timeout());
            let hint = match side {
                Refused::ServerCert => "(the server's certificate is not trusted: check the CA file and the server name)",
                Refused::ClientCert => "(the server refused this client's certificate: give a client certificate that its CA signs)",
            };
            assert!(rule.contains(&hint[1..hint.len() - 1]), "{hint}");
            assert_eq!(
                err.to_string(),
                format!("monolock: TLS handshake with locks.internal:7117 failed: {text} {hint}")
            );
        }
        // A failed handshake says the same; only rustls's own error counts.
        let alert = rustls::Error::AlertReceived(A::BadCertificate);
        let failed = |e| handshake_failed(&server, Some(0x15), e);
        let err = failed(io::Error::new(io::ErrorKind::InvalidData, alert));
        assert_eq!(
            certificate_problem(&err).unwrap().side(),
            Refused::ClientCert
        );
        assert_eq!(
            err.to_string(),
            "TLS handshake with locks.internal:7117 failed: received fatal alert: BadCertificate (the server refused this client's certificate: give a client certificate that its CA signs)"
        );
        let text = io::Error::new(
            io::ErrorKind::InvalidData,
            "received fatal alert: BadCertificate",
        );
        assert!(certificate_problem(&failed(text)).is_none());
    }

    /// The config builder needs no process-level provider (the test binary
    /// installs none).
    #[test]
    fn config_builder_brings_its_own_provider() {
        let config = config_builder()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        assert!(rustls::crypto::CryptoProvider::get_default().is_none());
        drop(config);
    }
}
