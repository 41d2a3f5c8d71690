//! Async connections: plain TCP, or TLS over TCP with the `tls` feature.

use std::io;

use ::tokio::io::{AsyncReadExt, AsyncWriteExt};
use ::tokio::net::{lookup_host, TcpStream};

use crate::addr::ServerAddr;
use crate::config::Config;

/// One connection to a server.
pub(crate) enum Conn {
    Tcp(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<crate::tls::AsyncTls>),
}

impl Conn {
    /// Connects to `server`, trying each resolved address in turn, with
    /// TCP_NODELAY set. The caller bounds it with a timeout. The error
    /// names the server.
    pub(crate) async fn connect(config: &Config, server: &ServerAddr) -> io::Result<Conn> {
        let failed = |e: io::Error| io::Error::new(e.kind(), format!("{server}: {e}"));
        let mut last_err = None;
        let addrs = lookup_host((server.host.as_str(), server.port))
            .await
            .map_err(failed)?;
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(tcp) => {
                    tcp.set_nodelay(true).map_err(failed)?;
                    return Conn::wrap(config, server, tcp).await;
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(failed(last_err.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "no address found")
        })))
    }

    #[cfg(not(feature = "tls"))]
    async fn wrap(_: &Config, _: &ServerAddr, tcp: TcpStream) -> io::Result<Conn> {
        Ok(Conn::Tcp(tcp))
    }

    #[cfg(feature = "tls")]
    async fn wrap(config: &Config, server: &ServerAddr, tcp: TcpStream) -> io::Result<Conn> {
        match &config.tls {
            None => Ok(Conn::Tcp(tcp)),
            Some(tls) => Ok(Conn::Tls(Box::new(
                crate::tls::AsyncTls::handshake(tls, server, tcp).await?,
            ))),
        }
    }

    /// Reads what is there. Cancel-safe: if the future is dropped before it
    /// completes, no byte is lost. An `UnexpectedEof` error when the server
    /// closed the connection.
    pub(crate) async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match self {
            Conn::Tcp(tcp) => tcp.read(buf).await?,
            #[cfg(feature = "tls")]
            Conn::Tls(tls) => tls.read(buf).await?,
        };
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            ));
        }
        Ok(n)
    }

    /// Writes a whole frame.
    pub(crate) async fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        match self {
            Conn::Tcp(tcp) => tcp.write_all(frame).await,
            #[cfg(feature = "tls")]
            Conn::Tls(tls) => tls.send(frame).await,
        }
    }

    /// Half-closes: ends our direction (after a TLS close_notify) and
    /// leaves the server's open, so its close can still be read.
    pub(crate) async fn half_close(&mut self) -> io::Result<()> {
        match self {
            Conn::Tcp(tcp) => tcp.shutdown().await,
            #[cfg(feature = "tls")]
            Conn::Tls(tls) => tls.half_close().await,
        }
    }
}
