"""What a failed connection attempt is: the TCP connect, or the TLS
handshake, whose certificate problems are told apart (spec/constants.json,
client_defaults.tls_certificate_rule). The session core and the plan both
use it, so it depends on neither."""

from __future__ import annotations

import ssl

from ._config import Address
from .errors import PREFIX, ConnectError

# OpenSSL's reasons for a first record that is not TLS: what a plaintext
# server (a monolock ERROR frame, an HTTP or SSH banner) answers with.
_NOT_TLS_REASONS = frozenset(
    {
        "WRONG_VERSION_NUMBER",
        "UNKNOWN_PROTOCOL",
        "UNEXPECTED_RECORD",
        "PACKET_LENGTH_TOO_LONG",
        "RECORD_LAYER_FAILURE",
        "HTTP_REQUEST",
        "HTTPS_PROXY_REQUEST",
    }
)


# OpenSSL's reasons for a TLS alert by which the server refused this
# client's certificate (spec/constants.json, tls_certificate_rule): alerts
# 42 to 46, 48, 49 and 116. In TLS 1.3 it arrives on the first read after
# the handshake, when ACQUIRE has been sent already.
_CLIENT_CERT_REFUSED = frozenset(
    {
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "TLSV1_ALERT_UNKNOWN_CA",
        "TLSV1_ALERT_ACCESS_DENIED",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    }
)

SERVER_CERT_REFUSED = "server"
"""This client refused the server's certificate."""
CLIENT_CERT_REFUSED = "client"
"""The server refused this client's certificate."""

_CERT_HINTS = {
    SERVER_CERT_REFUSED: "the server's certificate is not trusted: "
    "check the CA file and the server name",
    CLIENT_CERT_REFUSED: "the server refused this client's certificate: "
    "give a client certificate that its CA signs",
}


def certificate_problem(exc: BaseException | None) -> str | None:
    """Whose certificate a TLS failure refused: :data:`SERVER_CERT_REFUSED`,
    :data:`CLIENT_CERT_REFUSED`, or ``None`` when it is no certificate
    problem (a reset, a timeout, a server that does not speak TLS)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return SERVER_CERT_REFUSED
    if isinstance(exc, ssl.SSLError) and getattr(exc, "reason", None) in _CLIENT_CERT_REFUSED:
        return CLIENT_CERT_REFUSED
    return None


def connect_error(address: Address | str, exc: OSError, *, handshake: bool = False) -> ConnectError:
    """The error for a failed connection attempt: the TCP connect, or the TLS
    handshake (``handshake``, or any :class:`ssl.SSLError`, also one read
    right after the handshake)."""
    # A refused certificate will be refused again: the error is not
    # temporary, and the plan leaves that server out as one that does not
    # speak monolock (tls_certificate_rule). The next server of the list is
    # tried at once; with none left the caller gets it at once.
    side = certificate_problem(exc)
    if isinstance(exc, ssl.SSLError) and getattr(exc, "reason", None) in _NOT_TLS_REASONS:
        text = f"TLS handshake with {address} failed; the server may not speak TLS ({exc})"
    elif side is not None:
        text = f"TLS handshake with {address} failed: {exc} ({_CERT_HINTS[side]})"
    elif handshake or isinstance(exc, ssl.SSLError):
        text = f"TLS handshake with {address} failed: {exc}"
    else:
        text = f"cannot connect to {address}: {exc}"
    error = ConnectError(PREFIX + text)
    if side is not None:
        error.certificate = side
        error.temporary = False
    return error
