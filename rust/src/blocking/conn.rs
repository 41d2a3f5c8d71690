//! Blocking connections: plain TCP, or TLS over TCP with the `tls` feature.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::config::Config;

/// One connection to a server.
pub(crate) enum Conn {
    Tcp(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Conn {
    /// Connects to `server` (`host:port`), trying each resolved address
    /// within `timeout` overall, with TCP_NODELAY set (frames are tiny).
    pub(crate) fn connect(config: &Config, server: &str, timeout: Duration) -> io::Result<Conn> {
        let deadline = Instant::now() + timeout;
        let mut last_err = None;
        for addr in server.to_socket_addrs()? {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                last_err = Some(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"));
                break;
            }
            match TcpStream::connect_timeout(&addr, left) {
                Ok(tcp) => {
                    tcp.set_nodelay(true)?;
                    return Conn::wrap(config, server, tcp, deadline);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no address for {server}"),
            )
        }))
    }

    #[cfg(not(feature = "tls"))]
    fn wrap(_: &Config, _: &str, tcp: TcpStream, _: Instant) -> io::Result<Conn> {
        Ok(Conn::Tcp(tcp))
    }

    #[cfg(feature = "tls")]
    fn wrap(config: &Config, server: &str, tcp: TcpStream, deadline: Instant) -> io::Result<Conn> {
        match &config.tls {
            None => Ok(Conn::Tcp(tcp)),
            Some(tls) => {
                let stream = crate::tls::handshake_blocking(tls, server, tcp, deadline)?;
                Ok(Conn::Tls(Box::new(stream)))
            }
        }
    }

    /// The TCP socket underneath, for timeouts and shutdown.
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Tcp(tcp) => tcp,
            #[cfg(feature = "tls")]
            Conn::Tls(tls) => tls.get_ref(),
        }
    }

    /// Reads what is there, waiting at most `timeout`. `Ok(None)` when the
    /// time ran out, an `UnexpectedEof` error when the server closed.
    pub(crate) fn read_within(
        &mut self,
        buf: &mut [u8],
        timeout: Duration,
    ) -> io::Result<Option<usize>> {
        self.tcp().set_read_timeout(Some(timeout))?;
        let res = match self {
            Conn::Tcp(tcp) => tcp.read(buf),
            #[cfg(feature = "tls")]
            Conn::Tls(tls) => tls.read(buf),
        };
        match res {
            Ok(0) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            )),
            Ok(n) => Ok(Some(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Writes a whole frame.
    pub(crate) fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        match self {
            Conn::Tcp(tcp) => tcp.write_all(frame),
            #[cfg(feature = "tls")]
            Conn::Tls(tls) => {
                tls.write_all(frame)?;
                tls.flush()
            }
        }
    }
}
