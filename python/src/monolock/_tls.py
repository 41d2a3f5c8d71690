"""TLS details shared by the blocking client's connections: the close_notify
sent before a close."""

from __future__ import annotations

import socket
import ssl
from contextlib import suppress


def close_notify(sock: socket.socket) -> None:
    """TLS: send close_notify before the FIN, the clean end TLS asks for. A
    FIN without one could have been injected by anyone on the path: the
    server ends a session on it as a reset, and a TLS stack may throw away
    the session of a connection that ended so. Never blocks: on the
    non-blocking socket unwrap() sends the alert, then raises
    SSLWantReadError for the server's, which a hand-back reads (or the
    close drops); a full send buffer or a dead connection leaves it
    unsent. Call it once."""
    if not isinstance(sock, ssl.SSLSocket):
        return
    with suppress(OSError, ValueError):
        sock.setblocking(False)  # the keeper's sockets are; bound it anyway
        sock.unwrap()
