"""TLS details shared by the blocking client's connections: the close_notify
sent before a close, and the sessions a claim's connection resumes."""

from __future__ import annotations

import socket
import ssl
import threading
from contextlib import suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._config import Address


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


class TlsSessions:
    """A client's TLS sessions to resume: the last one with a ticket per
    server address. A single claim's connection takes it before its
    close_notify (TLS 1.3 tickets arrive after the handshake, with the
    server's first reply) and the next connection to that address offers
    it. Only a session of the context it was made with is offered."""

    def __init__(self) -> None:
        self._last: dict[Address, tuple[ssl.SSLContext, ssl.SSLSession]] = {}
        self._counting = threading.Lock()
        self.handshakes = 0
        """TLS handshakes of :meth:`wrap` (for tests)."""
        self.resumed = 0
        """How many of them resumed a session (for tests)."""

    def wrap(
        self,
        context: ssl.SSLContext,
        sock: socket.socket,
        address: Address,
        server_hostname: str | None,
    ) -> ssl.SSLSocket:
        """Run the TLS handshake on ``sock``, resuming the last session of
        ``address`` when there is one."""
        last = self._last.get(address)
        session = last[1] if last is not None and last[0] is context else None
        tls = context.wrap_socket(sock, server_hostname=server_hostname, session=session)
        with self._counting:
            self.handshakes += 1
            if tls.session_reused:
                self.resumed += 1
        return tls

    def keep(self, address: Address, sock: socket.socket) -> None:
        """Keep the session of ``sock``, a connection to ``address`` about
        to close, if it has a ticket."""
        if not isinstance(sock, ssl.SSLSocket):
            return
        with suppress(OSError, ValueError):
            session = sock.session
            if session is not None and session.has_ticket:
                self._last[address] = (sock.context, session)
