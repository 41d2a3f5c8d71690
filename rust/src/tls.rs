//! TLS to the server with rustls (feature `tls`), for both clients.

use std::io;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::ClientConnection;

/// The TLS part of a client's configuration.
#[derive(Clone)]
pub(crate) struct TlsSettings {
    pub(crate) config: Arc<rustls::ClientConfig>,
    /// Overrides the host part of the server address for verification.
    pub(crate) server_name: Option<String>,
}

/// The host part of `host:port`, `[v6]:port` or a bare host.
fn host_of(server: &str) -> &str {
    if let Some(rest) = server.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match server.rsplit_once(':') {
        Some((host, _)) if !host.contains(':') => host,
        _ => server,
    }
}

/// Starts a client TLS session for `server`.
fn client_session(settings: &TlsSettings, server: &str) -> io::Result<ClientConnection> {
    let host = settings
        .server_name
        .clone()
        .unwrap_or_else(|| host_of(server).to_owned());
    let name =
        ServerName::try_from(host).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    ClientConnection::new(Arc::clone(&settings.config), name).map_err(io::Error::other)
}

/// Completes the handshake on a blocking socket before `deadline`; the
/// returned session is ready for application data on `tcp`.
pub(crate) fn handshake_blocking(
    settings: &TlsSettings,
    server: &str,
    mut tcp: &std::net::TcpStream,
    deadline: std::time::Instant,
) -> io::Result<ClientConnection> {
    let mut conn = client_session(settings, server)?;
    while conn.is_handshaking() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            ));
        }
        tcp.set_read_timeout(Some(left))?;
        tcp.set_write_timeout(Some(left))?;
        match conn.complete_io(&mut tcp) {
            Ok((0, 0)) if conn.is_handshaking() => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection during the TLS handshake",
                ));
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
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
}

#[cfg(feature = "tokio")]
impl AsyncTls {
    /// Runs the handshake to completion.
    pub(crate) async fn handshake(
        settings: &TlsSettings,
        server: &str,
        tcp: tokio::net::TcpStream,
    ) -> io::Result<AsyncTls> {
        let mut tls = AsyncTls {
            tcp,
            conn: client_session(settings, server)?,
        };
        while tls.conn.is_handshaking() {
            tls.flush().await?;
            if tls.conn.is_handshaking() && tls.fill().await? {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection during the TLS handshake",
                ));
            }
        }
        tls.flush().await?;
        Ok(tls)
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

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn host_part_of_server_addresses() {
        assert_eq!(host_of("localhost:7117"), "localhost");
        assert_eq!(host_of("127.0.0.1:7117"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7117"), "::1");
        assert_eq!(host_of("locks.example"), "locks.example");
        assert_eq!(host_of("::1"), "::1");
    }
}
