"""Client settings: addresses, timeouts, lease."""

from __future__ import annotations

import ssl

import pytest

import monolock
from monolock import errors
from monolock._config import Address, ClientConfig, check_timeout, parse_address, parse_servers


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("127.0.0.1:7117", "127.0.0.1", 7117),
        ("locks.internal:9000", "locks.internal", 9000),
        ("locks.internal", "locks.internal", 7117),
        ("[::1]:7200", "::1", 7200),
        ("[::1]", "::1", 7117),
        ("::1", "::1", 7117),
        (" 10.0.0.1:1 ", "10.0.0.1", 1),
        (("example", 65535), "example", 65535),
    ],
)
def test_parse_address(text: str | tuple[str, int], host: str, port: int) -> None:
    assert parse_address(text) == Address(host, port)


@pytest.mark.parametrize(
    "text", ["", ":7117", "host:", "host:x", "host:0", "host:65536", "[::1", "[::1]x", ("h", -1)]
)
def test_bad_addresses(text: str | tuple[str, int]) -> None:
    with pytest.raises(ValueError):
        parse_address(text)


def test_address_str_round_trips() -> None:
    for text in ("127.0.0.1:7117", "[::1]:7117", "host:1"):
        assert str(parse_address(text)) == text


def test_parse_servers() -> None:
    assert parse_servers("a:1") == (Address("a", 1),)
    assert parse_servers(("a", 1)) == (Address("a", 1),)
    assert parse_servers(["a:1", ("b", 2)]) == (Address("a", 1), Address("b", 2))
    with pytest.raises(ValueError):
        parse_servers([])
    with pytest.raises(TypeError):
        parse_servers([5])  # type: ignore[list-item]


def test_client_defaults() -> None:
    client = monolock.Client()
    assert client.servers == (Address("127.0.0.1", 7117),)
    assert client.lease == 10.0 and client.lease_ms == 10_000
    assert client.connect_timeout == 5.0
    assert client.tls_hostname(client.servers[0]) is None
    assert repr(client) == "<Client [127.0.0.1:7117] lease=10s>"


def test_invalid_lease_raises_at_construction() -> None:
    for cls in (monolock.Client, monolock.AsyncClient):
        with pytest.raises(errors.InvalidLease) as info:
            cls(lease=0)
        assert not info.value.from_server


def test_tls_hostname() -> None:
    ctx = ssl.create_default_context()
    client = ClientConfig("10.1.2.3:7117", ssl_context=ctx)
    assert client.tls_hostname(client.servers[0]) == "10.1.2.3"
    named = ClientConfig("10.1.2.3:7117", ssl_context=ctx, server_hostname="locks.example")
    assert named.tls_hostname(named.servers[0]) == "locks.example"
    assert "tls" in repr(named)
    with pytest.raises(TypeError):
        ClientConfig(ssl_context="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, float("nan"), "1"])
def test_bad_timeouts(value: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        check_timeout(value)  # type: ignore[arg-type]
    with pytest.raises((ValueError, TypeError)):
        ClientConfig(connect_timeout=value)  # type: ignore[arg-type]


def test_good_timeouts() -> None:
    assert check_timeout(None) is None
    assert check_timeout(0) == 0.0
    assert check_timeout(2) == 2.0
