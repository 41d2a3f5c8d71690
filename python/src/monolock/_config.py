"""Client settings shared by the sync and asyncio clients (the httpx
``BaseClient`` idea): everything that is checked or computed before any I/O."""

from __future__ import annotations

import ipaddress
import json
import math
import ssl
import string
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Union

from . import _constants_gen as spec
from . import _protocol as proto
from ._tls import TlsSessions
from .errors import ConfigError

DEFAULT_PORT = spec.CLIENT_DEFAULTS_DEFAULT_PORT
DEFAULT_SERVER = spec.CLIENT_DEFAULTS_DEFAULT_SERVER
DEFAULT_LEASE = 10.0
DEFAULT_CONNECT_TIMEOUT = 5.0

ServerAddress = Union[str, tuple[str, int]]
"""``"host:port"``, ``"[v6]:port"``, a bare host (``"host"``, ``"[v6]"``,
``"v6"``: port 7117) or ``(host, port)``."""

Servers = Union[ServerAddress, Iterable[ServerAddress]]
"""One server address or several, tried in order."""


@dataclass(frozen=True)
class Address:
    """A parsed server address."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


_HOST_CHARS = frozenset(string.ascii_letters + string.digits + "-._")


def parse_address(value: ServerAddress) -> Address:
    """Parse one server address (spec/vectors/addresses.json runs the rule);
    raise :class:`ConfigError` when it makes no sense."""
    if isinstance(value, tuple):
        host, port = value
        if not isinstance(host, str) or not host:
            raise _bad_address(value, "no host")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise _bad_address(value, "the port must be a number from 1 to 65535")
        return Address(host, port)
    if not isinstance(value, str):
        raise TypeError(
            f"monolock: server address must be str or (host, port), not {type(value).__name__}"
        )
    return _parse_text(value)


def _parse_text(text: str) -> Address:
    port = ""
    # A URL ("http://host:port") is the commonest wrong address: say what to
    # drop (spec/vectors/addresses.json messages, the same text in every client).
    scheme, sep, _ = text.partition("://")
    if sep:
        raise ConfigError(
            f"monolock: server address {_quote(text)}: drop the scheme "
            f"{_quote(scheme + sep)}; give HOST:PORT"
        )
    if not text:
        raise _bad_address(text, "empty")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise _bad_address(text, "no closing ]")
        if rest and not rest.startswith(":"):
            raise _bad_address(text, "unexpected text after ]")
        if not _is_ipv6(host):
            raise _bad_address(text, "not an IPv6 address between [ and ]")
        has_port, port = bool(rest), rest[1:]
    elif text.count(":") > 1:
        # Only an IPv6 address has more than one colon without brackets.
        if not _is_ipv6(text):
            raise _bad_address(
                text, "not an IPv6 address, and one colon at most is allowed otherwise"
            )
        host, has_port = text, False
    else:
        host, colon, port = text.partition(":")
        has_port = bool(colon)
        if not host:
            # Refused, not taken as localhost (spec/vectors/addresses.json).
            raise ConfigError(
                f"monolock: server address {_quote(text)}: no host "
                "(an empty host is not taken as localhost); give HOST:PORT"
            )
        bad = next((c for c in host if c not in _HOST_CHARS), None)
        if bad is not None:
            raise _bad_address(text, f"{bad!r} is not allowed in a host name")
    if not has_port:
        return Address(host, DEFAULT_PORT)
    if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise _bad_address(text, "the port must be a number from 1 to 65535")
    return Address(host, int(port))


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _quote(text: str) -> str:
    """Double quotes, as the Go, Node and Rust clients quote an address."""
    return json.dumps(text, ensure_ascii=False)


def _bad_address(value: ServerAddress, why: str) -> ConfigError:
    shown = _quote(value) if isinstance(value, str) else repr(value)
    return ConfigError(
        f"monolock: server address {shown}: {why} "
        f"(want HOST:PORT, [IPV6]:PORT or a bare host for port {DEFAULT_PORT})"
    )


def leader_index(servers: tuple[Address, ...], reason: str) -> int | None:
    """The index in ``servers`` of the server an ERROR 0x03's ``reason``
    names (spec/vectors/retry.json, leader_names), or ``None``: the reason
    is parsed as a server address is, then matched by host, without regard
    to ASCII case, and port; first match wins. Nothing is resolved, so only
    an address this client was given can be named."""
    try:
        named = _parse_text(reason)
    except ConfigError:
        return None  # the canonical text, or an address that makes no sense
    host = _ascii_lower(named.host)
    for index, server in enumerate(servers):
        if server.port == named.port and _ascii_lower(server.host) == host:
            return index
    return None


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _ascii_lower(text: str) -> str:
    # str.lower() would fold non-ASCII letters too; host names compare by ASCII.
    return text.translate(_ASCII_LOWER)


def parse_servers(servers: Servers) -> tuple[Address, ...]:
    """Parse one address or a list of them; at least one is required."""
    if isinstance(servers, (str, tuple)):
        items: list[ServerAddress] = [servers]
    else:
        items = list(servers)
    if not items:
        raise ConfigError("monolock: at least one server address is required")
    return tuple(parse_address(item) for item in items)


def _check_seconds(what: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"monolock: {what} must be a number of seconds or None")
    if math.isnan(value) or value < 0:
        raise ConfigError(f"monolock: {what} must be >= 0 seconds, got {value}")
    return float(value)


class ClientConfig:
    """Validated settings of a client; the base of ``Client`` and
    ``AsyncClient``.

    The lease is checked here, before any name is looked at and before any
    byte is sent, so an invalid lease raises
    :class:`~monolock.errors.InvalidLease` from the constructor.
    """

    def __init__(
        self,
        servers: Servers = DEFAULT_SERVER,
        *,
        lease: float = DEFAULT_LEASE,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> None:
        self.lease_ms = proto.lease_seconds_to_ms(lease)
        self.servers = parse_servers(servers)
        self.connect_timeout = _check_seconds("connect_timeout", connect_timeout)
        if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
            raise TypeError("monolock: ssl_context must be an ssl.SSLContext")
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self._tls_sessions = TlsSessions()
        """The TLS sessions the blocking client's single claims resume
        (asyncio's connections cannot be handed a session)."""

    @property
    def lease(self) -> float:
        """The lease in seconds (whole milliseconds)."""
        return self.lease_ms / 1000

    def tls_hostname(self, address: Address) -> str | None:
        """The name to verify the server certificate against, or ``None``
        without TLS."""
        if self.ssl_context is None:
            return None
        return self.server_hostname or address.host

    def __repr__(self) -> str:
        servers = ", ".join(str(a) for a in self.servers)
        tls = ", tls" if self.ssl_context else ""
        return f"<{type(self).__name__} [{servers}] lease={self.lease:g}s{tls}>"


def check_timeout(timeout: float | None) -> float | None:
    """Validate a caller's acquire timeout in seconds (``None``: no limit)."""
    return _check_seconds("timeout", timeout)
