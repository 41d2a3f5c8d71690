//! Blocking connections: plain TCP, or TLS over TCP with the `tls` feature.
//!
//! Every method takes `&self`, so that a held lock's keeper thread can sit
//! in a read while the guard's thread half-closes the same connection to
//! release the lock (and, on plain TCP, reads the server's close too). With
//! TLS the rustls session sits behind a mutex that is never held across a
//! blocking socket read: the reader (only ever one) takes raw bytes from
//! the socket unlocked, then locks to decrypt them.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::addr::ServerAddr;
use crate::config::Config;

/// One connection to a server.
pub(crate) struct Conn {
    tcp: TcpStream,
    #[cfg(feature = "tls")]
    tls: Option<std::sync::Mutex<rustls::ClientConnection>>,
}

/// What one read from the connection gave.
enum Read1 {
    Data(usize),
    /// The read timeout passed.
    Nothing,
    /// The server closed its side.
    End,
}

impl Conn {
    /// Connects to `server`, trying each resolved address within `timeout`
    /// overall, with TCP_NODELAY set (frames are tiny). The error names
    /// the server.
    pub(crate) fn connect(
        config: &Config,
        server: &ServerAddr,
        timeout: Duration,
    ) -> io::Result<Conn> {
        let deadline = Instant::now() + timeout;
        let failed = |e: io::Error| io::Error::new(e.kind(), format!("{server}: {e}"));
        let mut last_err = None;
        for addr in (server.host.as_str(), server.port)
            .to_socket_addrs()
            .map_err(failed)?
        {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                last_err = Some(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"));
                break;
            }
            match TcpStream::connect_timeout(&addr, left) {
                Ok(tcp) => {
                    tcp.set_nodelay(true).map_err(failed)?;
                    return Conn::wrap(config, server, tcp, deadline);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(failed(last_err.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "no address found")
        })))
    }

    #[cfg(not(feature = "tls"))]
    fn wrap(_: &Config, _: &ServerAddr, tcp: TcpStream, _: Instant) -> io::Result<Conn> {
        Ok(Conn { tcp })
    }

    #[cfg(feature = "tls")]
    fn wrap(
        config: &Config,
        server: &ServerAddr,
        tcp: TcpStream,
        deadline: Instant,
    ) -> io::Result<Conn> {
        let tls = match &config.tls {
            None => None,
            Some(tls) => Some(std::sync::Mutex::new(crate::tls::handshake_blocking(
                tls, server, &tcp, deadline,
            )?)),
        };
        Ok(Conn { tcp, tls })
    }

    /// Whether the connection is TLS: then only one thread may read it.
    pub(crate) fn is_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        return false;
    }

    /// The TCP socket underneath, for a cancel handle's shutdown.
    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Reads what is there, waiting at most `timeout`. `Ok(None)` when the
    /// time ran out, an `UnexpectedEof` error when the server closed.
    pub(crate) fn read_within(
        &self,
        buf: &mut [u8],
        timeout: Duration,
    ) -> io::Result<Option<usize>> {
        match self.read1(buf, Instant::now() + timeout)? {
            Read1::Data(n) => Ok(Some(n)),
            Read1::Nothing => Ok(None),
            Read1::End => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            )),
        }
    }

    #[cfg(not(feature = "tls"))]
    fn read1(&self, buf: &mut [u8], deadline: Instant) -> io::Result<Read1> {
        self.read_tcp(buf, deadline)
    }

    #[cfg(feature = "tls")]
    fn read1(&self, buf: &mut [u8], deadline: Instant) -> io::Result<Read1> {
        let Some(tls) = &self.tls else {
            return self.read_tcp(buf, deadline);
        };
        let mut raw = [0u8; 4096];
        loop {
            {
                let mut session = lock(tls);
                match session.reader().read(buf) {
                    Ok(0) => return Ok(Read1::End), // close_notify
                    Ok(n) => return Ok(Read1::Data(n)),
                    // Closed without close_notify: an end all the same.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(Read1::End),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            // Unlocked while blocked: a half-close may happen meanwhile.
            let n = match self.read_tcp(&mut raw, deadline)? {
                Read1::Data(n) => n,
                Read1::Nothing => return Ok(Read1::Nothing),
                Read1::End => 0,
            };
            let mut session = lock(tls);
            let mut chunk = &raw[..n];
            loop {
                // With an empty chunk this tells rustls about the end.
                session.read_tls(&mut chunk)?;
                session
                    .process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                if chunk.is_empty() {
                    break;
                }
            }
            // Answers rustls may owe the server (a TLS 1.3 key update).
            write_tls(&mut session, &self.tcp)?;
        }
    }

    /// One read from the socket itself, waiting until `deadline` at most.
    fn read_tcp(&self, buf: &mut [u8], deadline: Instant) -> io::Result<Read1> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Read1::Nothing);
        }
        self.tcp.set_read_timeout(Some(left))?;
        match (&self.tcp).read(buf) {
            Ok(0) => Ok(Read1::End),
            Ok(n) => Ok(Read1::Data(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(Read1::Nothing)
            }
            Err(e) => Err(e),
        }
    }

    /// Writes a whole frame.
    pub(crate) fn send(&self, frame: &[u8]) -> io::Result<()> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let mut session = lock(tls);
            session.writer().write_all(frame)?;
            return write_tls(&mut session, &self.tcp);
        }
        (&self.tcp).write_all(frame)
    }

    /// Half-closes: ends our direction (after a TLS close_notify) and
    /// leaves the server's open, so its close can still be read.
    pub(crate) fn half_close(&self) -> io::Result<()> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            close_notify(&mut lock(tls), &self.tcp)?;
        }
        self.tcp.shutdown(Shutdown::Write)
    }

    /// Closes both directions at once, after a TLS close_notify unless
    /// another thread is writing (a write stalled on a server that stopped
    /// reading must not hold up the close: this close is what ends it). A
    /// read blocked in another thread returns. Errors are of no interest:
    /// the socket may be closed already.
    pub(crate) fn close(&self) {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let session = match tls.try_lock() {
                Ok(session) => Some(session),
                Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            };
            if let Some(mut session) = session {
                let _ = self.tcp.set_write_timeout(Some(CLOSE_NOTIFY_WAIT));
                let _ = close_notify(&mut session, &self.tcp);
            }
        }
        let _ = self.tcp.shutdown(Shutdown::Both);
    }
}

/// A connection dropped without [`Conn::close`] (an acquire that failed or
/// gave up) still ends its TLS session with a close_notify; rustls sends it
/// once, so after a close or a half-close this writes nothing.
#[cfg(feature = "tls")]
impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(tls) = &mut self.tls {
            let session = tls
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = self.tcp.set_write_timeout(Some(CLOSE_NOTIFY_WAIT));
            let _ = close_notify(session, &self.tcp);
        }
    }
}

/// How long a close may wait to write the close_notify: long only when the
/// server has stopped reading and the socket's buffer is full.
#[cfg(feature = "tls")]
const CLOSE_NOTIFY_WAIT: Duration = Duration::from_millis(100);

/// Sends the TLS close_notify (once: rustls queues it only the first time).
#[cfg(feature = "tls")]
fn close_notify(session: &mut rustls::ClientConnection, tcp: &TcpStream) -> io::Result<()> {
    session.send_close_notify();
    write_tls(session, tcp)
}

#[cfg(feature = "tls")]
fn lock(
    tls: &std::sync::Mutex<rustls::ClientConnection>,
) -> std::sync::MutexGuard<'_, rustls::ClientConnection> {
    tls.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes out whatever rustls has queued.
#[cfg(feature = "tls")]
fn write_tls(session: &mut rustls::ClientConnection, mut tcp: &TcpStream) -> io::Result<()> {
    while session.wants_write() {
        session.write_tls(&mut tcp)?;
    }
    Ok(())
}
