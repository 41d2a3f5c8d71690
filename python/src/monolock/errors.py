"""Exceptions raised by monolock.

Every exception derives from :class:`MonolockError`, which carries the wire
``code`` (or ``None``) and ``temporary``: whether trying again may help.
The code is the contract; messages are for humans.

- :class:`ServerError` and one subclass per wire code (``except NameTooLong``)
  stand for an ERROR the server sent, or the same error raised by the client
  before sending anything (``from_server`` tells which). Codes this version
  does not know become a plain :class:`ServerError`.
- :class:`LockBusy`, :class:`AcquireTimeout` and :class:`AcquireCancelled`
  end an acquisition.
- :class:`LockLost` reports a held lock that is gone; its ``cause`` is the
  :class:`ServerError`, :class:`HeartbeatTimeout` or
  :class:`ConnectionClosed` behind it.
- :class:`ConfigError` (also a :class:`ValueError`) refuses a setting, such
  as a server address, when the client is built.

Every message starts with ``monolock: `` once: a message that quotes
another error's drops that error's prefix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from . import _errors_gen
from ._errors_gen import *  # noqa: F403 (the class of each code)
from ._errors_gen import CODE_CLASSES, UnsupportedVersion
from ._server_error import (
    FIRST_TERMINAL_CODE,
    KnownServerError,
    MonolockError,
    ServerError,
    is_temporary_code,
)

__all__ = [
    "FIRST_TERMINAL_CODE",
    "AcquireCancelled",
    "AcquireTimeout",
    "ConfigError",
    "ConnectError",
    "ConnectionClosed",
    "HeartbeatTimeout",
    "LockBusy",
    "LockLost",
    "LockReleased",
    "MonolockError",
    "NotMonolock",
    "ProtocolViolation",
    "ServerEnded",
    "ServerError",
    "SharedUnsupported",
    "ValueUnsupported",
    "WatchTimeout",
    "error_for_code",
    "is_temporary_code",
    "unprefixed",
]
__all__ += _errors_gen.__all__  # one class per code of spec/errors.json

PREFIX = "monolock: "
"""The start of every message of this package, once."""


def unprefixed(error: BaseException | str) -> str:
    """The text of ``error`` without its leading ``monolock: ``, to quote it
    inside another message."""
    text = str(error)
    return text[len(PREFIX) :] if text.startswith(PREFIX) else text


# The base classes live in _server_error.py and the class of each code in
# _errors_gen.py (generated from spec/errors.json), which needs the base
# before this module can map codes to classes.

_ERRORS_BY_CODE: dict[int, type[KnownServerError]] = {cls.code: cls for cls in CODE_CLASSES}

ERRORS_BY_CODE: Mapping[int, type[ServerError]] = _ERRORS_BY_CODE
"""Every wire code this version knows, mapped to its exception class."""


def error_for_code(code: int, reason: str = "", *, from_server: bool = True) -> ServerError:
    """Build the exception for a wire code: its own class when the code is
    known, a plain :class:`ServerError` (temporary by range) otherwise."""
    cls = _ERRORS_BY_CODE.get(code)
    if cls is None:
        return ServerError(code, reason, from_server=from_server)
    return cls(reason, from_server=from_server)


class SharedUnsupported(UnsupportedVersion):
    """The server answered a shared claim (a protocol version 2 ACQUIRE)
    with 0x10: it speaks version 1 only, which has exclusive locks and no
    shared locks or semaphores. Terminal: the same server answers the same
    way, so the claim is not retried. Still an :class:`UnsupportedVersion`
    (code 0x10, ``reason`` is the server's); ``address`` is the server's."""

    __module__ = "monolock.errors"

    def __init__(self, address: str, reason: str = "") -> None:
        super().__init__(reason, from_server=True)
        self.address = address
        MonolockError.__init__(
            self,
            _unsupported_message(address, "shared locks or semaphores", 2, "use an exclusive lock"),
        )


class ValueUnsupported(UnsupportedVersion):
    """The server answered a claim with a value (a protocol version 3
    ACQUIRE) with 0x10: it predates values. Terminal: no earlier version
    can carry a value, so the claim is not retried. Still an
    :class:`UnsupportedVersion` (code 0x10, ``reason`` is the server's);
    ``address`` is the server's."""

    __module__ = "monolock.errors"

    def __init__(self, address: str, reason: str = "") -> None:
        super().__init__(reason, from_server=True)
        self.address = address
        MonolockError.__init__(
            self, _unsupported_message(address, "claims with a value", 3, "claim without a value")
        )


def _unsupported_message(address: str, what: str, version: int, instead: str) -> str:
    """The message of a feature the server's protocol version lacks."""
    return (
        f"monolock: server {address} does not support {what} "
        f"(it answered a protocol version {version} ACQUIRE with 0x10 unsupported "
        f"protocol version); {instead}, or upgrade the server"
    )


class LockBusy(MonolockError):
    """``try_acquire`` found no room for its claim on the lock ``name``.

    ``shared`` and ``limit`` are the claim's (0: no bound); the message says
    what kept it out: another session holding an exclusive claim's lock, the
    taken permits of a semaphore, or an exclusive holder of a shared lock.
    """

    temporary = True

    def __init__(self, name: str, *, shared: bool = False, limit: int = 0) -> None:
        super().__init__(PREFIX + _busy_text(json.dumps(name, ensure_ascii=False), shared, limit))
        self.name = name
        self.shared = shared
        self.limit = limit


def _busy_text(quoted: str, shared: bool, limit: int) -> str:
    """In the words of every client (spec/vectors/messages.json, busy)."""
    if not shared:
        return f"lock {quoted} is held by another session"
    if limit == 1:
        return f"the 1 permit of {quoted} is taken"
    if limit > 1:
        # An exclusive holder takes them all too: say only that none is free.
        return f"all {limit} permits of {quoted} are taken"
    # Shared with no bound: only an exclusive claim keeps it out.
    return f"lock {quoted} is held exclusively by another session"


class ConfigError(MonolockError, ValueError):
    """A setting that makes no sense, refused before any I/O: a server
    address that cannot be parsed or a negative ``connect_timeout`` when the
    client is built, a negative ``timeout`` when ``acquire`` is called.
    Never temporary: the same setting fails again."""


class AcquireTimeout(MonolockError, TimeoutError):
    """The caller's timeout passed before the lock was granted.

    ``__cause__`` is the last failed attempt's error (a refused connection,
    a failed TLS handshake, a server shutting down), which the message
    quotes, so that a server that is down does not read like a busy lock.
    With no cause, the last attempt was still queued: the lock stayed busy.
    """

    temporary = True

    def __init__(self, message: str = "monolock: timed out waiting for the lock") -> None:
        MonolockError.__init__(self, message)


class WatchTimeout(MonolockError, TimeoutError):
    """The caller's timeout passed before a watch's first picture was
    vouched for (``__cause__``: why the last connection ended, if one did)."""

    temporary = True


class AcquireCancelled(MonolockError):
    """The caller cancelled a pending acquisition (sync API ``cancel=``)."""

    temporary = True

    def __init__(self, message: str = "monolock: acquisition cancelled") -> None:
        super().__init__(message)


class ConnectError(MonolockError):
    """A server could not be reached: the TCP connect or the TLS handshake
    failed (a handshake answered by something that is not TLS says that the
    server may not speak TLS). A try-acquisition raises it when no server of
    the list could be reached; ``__cause__`` is the last failure.

    A handshake that failed on a certificate sets ``certificate``:
    ``"server"`` when this client refused the server's certificate,
    ``"client"`` when the server refused this client's (in TLS 1.3 that
    refusal arrives on the first read after the handshake). Such an error
    is not temporary: an acquisition does not ask that server again, and
    with no other server left it is raised at once, not at the deadline."""

    temporary = True
    certificate: str | None = None


class ConnectionClosed(MonolockError):
    """The connection ended or failed after it was established."""

    temporary = True


class ServerEnded(ConnectionClosed):
    """The server ended the session with an ERROR whose code had not arrived
    when its type byte was read. An ERROR is the last message of a session,
    so the session ends at that byte and the client does not wait for the
    rest. Without a code there is no class: ``code`` is None, and a waiting
    acquisition queues again as after a dropped connection."""

    def __init__(self, message: str = "") -> None:
        text = "the server ended the session with an ERROR (its code did not arrive)"
        super().__init__(message or PREFIX + text)


class HeartbeatTimeout(MonolockError):
    """No reply to an ACQUIRE or HEARTBEAT within the client timeout
    (0.8 x lease): the server may already consider the session dead."""

    temporary = True


class ProtocolViolation(MonolockError):
    """The server sent bytes that break the protocol (unknown message type,
    a reply nobody asked for, a changed token). The connection is closed."""

    temporary = True


class NotMonolock(ProtocolViolation):
    """The server's first byte starts no server message: it does not speak
    the monolock protocol (an HTTP port such as the admin port, a TLS server
    spoken to in plaintext). An acquisition does not ask that server again;
    with no other server left the error goes to the caller. ``sent`` holds
    the first bytes it sent (at most 12). Not temporary: the address is
    wrong, and that server answers the same way next time."""

    # spec/vectors/temporary.json (the other clients say the same).
    temporary = False

    def __init__(self, address: str, sent: bytes) -> None:
        quoted = _quote_bytes(sent, 12)
        message = f'monolock: {address} does not speak the monolock protocol (it sent "{quoted}")'
        if sent.startswith(b"HTTP/"):
            message += "; is this the admin port?"
        super().__init__(message)
        self.address = address
        self.sent = sent[:12]


def _quote_bytes(data: bytes, limit: int) -> str:
    """Up to ``limit`` bytes for a message: printable ASCII as it is, other
    bytes (and ``\\``, ``"``) as ``\\xNN``, an ellipsis when cut."""
    text = "".join(
        chr(b) if 0x20 <= b < 0x7F and b not in b'\\"' else f"\\x{b:02x}" for b in data[:limit]
    )
    return text + "…" if len(data) > limit else text


class LockLost(MonolockError):
    """A held lock is gone: the work it guards must stop.

    ``cause`` (also ``__cause__``) is what ended it: a :class:`ServerError`
    (``code`` and ``temporary`` are copied from it), a
    :class:`HeartbeatTimeout` or a :class:`ConnectionClosed`. The lock is
    never re-acquired behind the caller's back; acquire again for a new
    token.
    """

    def __init__(self, name: str, token: int, cause: MonolockError) -> None:
        super().__init__(f"monolock: lock {name!r} (token {token}) lost: {unprefixed(cause)}")
        self.name = name
        self.token = token
        self.cause = cause
        self.code = cause.code
        self.temporary = cause.temporary
        self.__cause__ = cause


class LockReleased(MonolockError):
    """``check()`` on a lock that its owner already released."""

    def __init__(self, name: str, token: int) -> None:
        super().__init__(f"monolock: lock {name!r} (token {token}) was released")
        self.name = name
        self.token = token
