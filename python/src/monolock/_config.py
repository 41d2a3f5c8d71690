"""Client settings shared by the sync and asyncio clients (the httpx
``BaseClient`` idea): everything that is checked or computed before any I/O."""

from __future__ import annotations

import math
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Union

from . import _protocol as proto

DEFAULT_PORT = 7117
DEFAULT_SERVER = f"127.0.0.1:{DEFAULT_PORT}"
DEFAULT_LEASE = 10.0
DEFAULT_CONNECT_TIMEOUT = 5.0

ServerAddress = Union[str, tuple[str, int]]
"""``"host:port"``, ``"[v6]:port"``, ``"host"`` (port 7117) or ``(host, port)``."""

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


def parse_address(value: ServerAddress) -> Address:
    """Parse one server address; raise ValueError when it makes no sense."""
    if isinstance(value, tuple):
        host, port = value
    elif isinstance(value, str):
        host, port = _split_host_port(value.strip())
    else:
        raise TypeError(f"server address must be str or (host, port), not {type(value).__name__}")
    if not host:
        raise ValueError(f"server address {value!r} has no host")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"server address {value!r} has an invalid port")
    return Address(host, port)


def _split_host_port(text: str) -> tuple[str, int]:
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep:
            raise ValueError(f"server address {text!r}: missing ']'")
        if not rest:
            return host, DEFAULT_PORT
        if not rest.startswith(":"):
            raise ValueError(f"server address {text!r}: expected ':port' after ']'")
        return host, _port(rest[1:], text)
    if text.count(":") > 1:  # a bare IPv6 address
        return text, DEFAULT_PORT
    host, sep, port = text.partition(":")
    return host, _port(port, text) if sep else DEFAULT_PORT


def _port(text: str, whole: str) -> int:
    if not text.isdigit():
        raise ValueError(f"server address {whole!r}: port {text!r} is not a number")
    return int(text)


def parse_servers(servers: Servers) -> tuple[Address, ...]:
    """Parse one address or a list of them; at least one is required."""
    if isinstance(servers, (str, tuple)):
        items: list[ServerAddress] = [servers]
    else:
        items = list(servers)
    if not items:
        raise ValueError("at least one server address is required")
    return tuple(parse_address(item) for item in items)


def _check_seconds(what: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds or None")
    if math.isnan(value) or value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
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
            raise TypeError("ssl_context must be an ssl.SSLContext")
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname

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
