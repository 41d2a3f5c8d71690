//! Server addresses: the forms spec/vectors/addresses.json accepts and the
//! port a bare host gets.

use std::fmt;
use std::net::Ipv6Addr;

use crate::constants_gen as spec;
use crate::error::Error;

/// The port of a server address given without one (`locks.internal`).
pub const DEFAULT_PORT: u16 = spec::CLIENT_DEFAULTS_DEFAULT_PORT as u16;

/// A server address: `HOST:PORT`, `[IPV6]:PORT`, or a bare host (`HOST`,
/// `[IPV6]`, or an IPv6 literal without brackets) on [`DEFAULT_PORT`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerAddr {
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl ServerAddr {
    /// Parses an address as spec/vectors/addresses.json has it, or says
    /// what is wrong with it.
    pub(crate) fn parse(addr: &str) -> Result<ServerAddr, Error> {
        // "monolock: server address "X": " starts every address error, as in
        // the other clients.
        let bad = |why: &str| Error::Config(format!("server address {addr:?}: {why}"));
        // A URL ("http://host:port") is the commonest wrong address: say what
        // to drop (spec/vectors/addresses.json messages, the same text in
        // every client).
        if let Some(i) = addr.find("://") {
            let scheme = &addr[..i + 3];
            return Err(bad(&format!("drop the scheme {scheme:?}; give HOST:PORT")));
        }
        let (host, port) = if let Some(rest) = addr.strip_prefix('[') {
            let (host, after) = rest
                .split_once(']')
                .ok_or_else(|| bad("missing ']' after the IPv6 address"))?;
            if host.parse::<Ipv6Addr>().is_err() {
                return Err(bad("not an IPv6 address between '[' and ']'"));
            }
            let port = match after {
                "" => None,
                _ => Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| bad("expected ':PORT' after ']'"))?,
                ),
            };
            (host, port)
        } else if addr.matches(':').count() > 1 {
            // Several colons: an IPv6 literal without brackets, no port.
            if addr.parse::<Ipv6Addr>().is_err() {
                return Err(bad("too many ':' (write an IPv6 address as [ADDR]:PORT)"));
            }
            (addr, None)
        } else {
            match addr.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (addr, None),
            }
        };
        if host.is_empty() {
            // Refused, not taken as localhost (spec/vectors/addresses.json).
            return Err(bad(
                "no host (an empty host is not taken as localhost); give HOST:PORT",
            ));
        }
        let host_ok = |h: &str| {
            !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
        };
        if !host_ok(host) {
            return Err(bad("the host has characters a host name cannot have"));
        }
        let port = match port {
            None => DEFAULT_PORT,
            Some(port) => port
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0 && port.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| bad("the port must be a number from 1 to 65535"))?,
        };
        Ok(ServerAddr {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec;

    #[test]
    fn address_vectors() {
        let v = spec::load("vectors/addresses.json");
        let c = spec::load("constants.json");
        assert_eq!(c["client_defaults"]["default_port"], DEFAULT_PORT);
        let ok = v["ok"].as_array().unwrap();
        assert!(ok.len() >= 10);
        for case in ok {
            let input = case["in"].as_str().unwrap();
            let addr = ServerAddr::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(addr.host, case["host"].as_str().unwrap(), "{input:?}");
            assert_eq!(
                u64::from(addr.port),
                case["port"].as_u64().unwrap(),
                "{input:?}"
            );
        }
        // The same text in every client: a URL scheme, an empty host.
        let messages = v["messages"].as_array().unwrap();
        assert!(messages.len() >= 2);
        for case in messages {
            let input = case["in"].as_str().unwrap();
            let err = ServerAddr::parse(input).expect_err(input);
            assert_eq!(err.to_string(), case["message"].as_str().unwrap());
        }
        let errors = v["error"].as_array().unwrap();
        assert!(errors.len() >= 10);
        for case in errors {
            let input = case.as_str().unwrap();
            let err = ServerAddr::parse(input).expect_err(input);
            assert!(matches!(err, Error::Config(_)), "{input:?}: {err:?}");
            assert!(!err.is_temporary(), "{input:?}");
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("{input:?}")),
                "names the address: {msg}"
            );
        }
    }
}
