//! A TLS handshake that failed on a certificate
//! (spec/constants.json, client_defaults.tls_certificate_rule): what it is
//! and how to find it in an I/O error. A module of its own that needs
//! nothing of the crate, so that the error type can ask it
//! (`Error::is_certificate_problem`) and the TLS dialer can make it
//! without the two, and the address type that both use, depending on each
//! other in a circle.

use std::io;

/// Which side refused a certificate in a TLS handshake
/// (spec/constants.json, client_defaults.tls_certificate_rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// This client refused the server's certificate.
    ServerCert,
    /// The server refused this client's certificate (or its absence).
    ClientCert,
}

/// Whose certificate `err` says was refused, if it is a certificate
/// failure at all: a verification failure of ours, or one of the alerts a
/// server sends when it refuses the client's certificate.
pub(crate) fn refused(err: &rustls::Error) -> Option<Refused> {
    use rustls::AlertDescription as A;
    match err {
        rustls::Error::InvalidCertificate(_) | rustls::Error::InvalidCertRevocationList(_) => {
            Some(Refused::ServerCert)
        }
        rustls::Error::AlertReceived(
            A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::UnknownCA
            | A::AccessDenied
            | A::CertificateRequired,
        ) => Some(Refused::ClientCert),
        _ => None,
    }
}

/// A TLS handshake with a server that failed on a certificate. It would
/// fail the same way again: the acquisition does not ask that server again
/// (the retry plan's `not_monolock` outcome), and the error is not
/// temporary. It travels inside [`Error::Io`](crate::Error::Io).
#[derive(Debug)]
pub(crate) struct CertificateProblem {
    server: String,
    side: Refused,
    cause: rustls::Error,
}

impl CertificateProblem {
    pub(crate) fn new(server: String, side: Refused, cause: rustls::Error) -> CertificateProblem {
        CertificateProblem {
            server,
            side,
            cause,
        }
    }

    /// Which side refused a certificate.
    #[cfg(test)]
    pub(crate) fn side(&self) -> Refused {
        self.side
    }
}

impl std::fmt::Display for CertificateProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hint = match self.side {
            Refused::ServerCert => {
                "the server's certificate is not trusted: check the CA file and the server name"
            }
            Refused::ClientCert => {
                "the server refused this client's certificate: give a client certificate that its CA signs"
            }
        };
        write!(
            f,
            "TLS handshake with {} failed: {} ({hint})",
            self.server, self.cause
        )
    }
}

impl std::error::Error for CertificateProblem {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.cause)
    }
}

/// The certificate problem inside an I/O error, if it carries one.
pub(crate) fn certificate_problem(err: &io::Error) -> Option<&CertificateProblem> {
    err.get_ref()?.downcast_ref::<CertificateProblem>()
}
