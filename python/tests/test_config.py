"""Client settings: addresses, timeouts, lease."""

from __future__ import annotations

import json
import ssl
from typing import Any

import pytest

import monolock
from monolock import errors
from monolock._config import (
    Address,
    ClientConfig,
    check_timeout,
    leader_index,
    parse_address,
    parse_servers,
)

from .support import load_spec

ADDRESSES = load_spec("vectors/addresses.json")
LEADER_NAMES = load_spec("vectors/retry.json")["leader_names"]


@pytest.mark.parametrize("case", ADDRESSES["ok"], ids=lambda c: c["in"])
def test_address_vector(case: dict[str, Any]) -> None:
    assert parse_address(case["in"]) == Address(case["host"], case["port"])


@pytest.mark.parametrize("text", ADDRESSES["error"])
def test_bad_address_vector(text: str) -> None:
    """Refused when the client is built, as a configuration error that
    names the address and is never temporary."""
    for cls in (monolock.Client, monolock.AsyncClient):
        with pytest.raises(errors.ConfigError) as info:
            cls(text)
        error = info.value
        assert isinstance(error, ValueError) and not error.temporary and error.code is None
        assert str(error).startswith(f"monolock: server address {json.dumps(text)}: ")
        assert str(error).count("monolock: ") == 1


@pytest.mark.parametrize("case", ADDRESSES["messages"], ids=lambda c: c["in"])
def test_address_message_vector(case: dict[str, str]) -> None:
    """The same text in every client: a URL scheme, an empty host."""
    for cls in (monolock.Client, monolock.AsyncClient):
        with pytest.raises(errors.ConfigError) as info:
            cls(case["in"])
        assert str(info.value) == case["message"]


@pytest.mark.parametrize(
    ("value", "address"),
    [(("example", 65535), Address("example", 65535)), (("::1", 7000), Address("::1", 7000))],
)
def test_tuple_addresses(value: tuple[str, int], address: Address) -> None:
    assert parse_address(value) == address


@pytest.mark.parametrize("value", [("", 7117), ("h", 0), ("h", -1), ("h", 65536), ("h", True)])
def test_bad_tuple_addresses(value: tuple[str, int]) -> None:
    with pytest.raises(errors.ConfigError):
        parse_address(value)


def test_spaces_are_not_trimmed() -> None:
    with pytest.raises(errors.ConfigError):
        parse_address(" 10.0.0.1:1")


def test_address_str_round_trips() -> None:
    for text in ("127.0.0.1:7117", "[::1]:7117", "host:1"):
        assert str(parse_address(text)) == text


def test_parse_servers() -> None:
    assert parse_servers("a:1") == (Address("a", 1),)
    assert parse_servers(("a", 1)) == (Address("a", 1),)
    assert parse_servers(["a:1", ("b", 2)]) == (Address("a", 1), Address("b", 2))
    with pytest.raises(errors.ConfigError):
        parse_servers([])
    with pytest.raises(TypeError):
        parse_servers([5])  # type: ignore[list-item]


def test_client_defaults() -> None:
    defaults = load_spec("constants.json")["client_defaults"]
    assert monolock.DEFAULT_SERVER == defaults["default_server"]
    assert monolock.DEFAULT_PORT == defaults["default_port"]
    client = monolock.Client()
    assert client.servers == (Address("127.0.0.1", 7117),)
    assert monolock.AsyncClient().servers == client.servers
    assert client.lease == 10.0 and client.lease_ms == 10_000
    assert client.connect_timeout == 5.0
    assert client.tls_hostname(client.servers[0]) is None
    assert repr(client) == "<Client [127.0.0.1:7117] lease=10s>"


@pytest.mark.parametrize("lease", [0, 0.0015, 1.0005, 4294967.296])
def test_invalid_lease_raises_at_construction(lease: float) -> None:
    """The lease rule of spec/constants.json: 1.5 ms is refused, not rounded."""
    rule = load_spec("constants.json")["client_defaults"]["lease_rule"]
    for cls in (monolock.Client, monolock.AsyncClient):
        with pytest.raises(errors.InvalidLease) as info:
            cls(lease=lease)
        error = info.value
        assert not error.from_server and error.code == 0x17
        text = "lease must be a whole number of milliseconds from 1 ms to 4294967295 ms"
        assert text in rule and text in str(error)
        assert f"got {lease!r} s" in str(error)


def test_tls_hostname() -> None:
    ctx = ssl.create_default_context()
    client = ClientConfig("10.1.2.3:7117", ssl_context=ctx)
    assert client.tls_hostname(client.servers[0]) == "10.1.2.3"
    named = ClientConfig("10.1.2.3:7117", ssl_context=ctx, server_hostname="locks.example")
    assert named.tls_hostname(named.servers[0]) == "locks.example"
    assert "tls" in repr(named)
    with pytest.raises(TypeError):
        ClientConfig(ssl_context="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "cls"),
    [(-1, errors.ConfigError), (float("nan"), errors.ConfigError), ("1", TypeError)],
)
def test_bad_timeouts(value: object, cls: type[Exception]) -> None:
    with pytest.raises(cls, match=r"^monolock: "):
        check_timeout(value)  # type: ignore[arg-type]
    with pytest.raises(cls, match=r"^monolock: "):
        ClientConfig(connect_timeout=value)  # type: ignore[arg-type]


def test_good_timeouts() -> None:
    assert check_timeout(None) is None
    assert check_timeout(0) == 0.0
    assert check_timeout(2) == 2.0


@pytest.mark.parametrize("case", LEADER_NAMES["cases"], ids=lambda c: c["reason"] or "empty")
def test_leader_name_vector(case: dict[str, Any]) -> None:
    """spec/vectors/retry.json leader_names: which server of the list an
    ERROR 0x03's reason names, if any."""
    servers = ClientConfig(LEADER_NAMES["servers"]).servers
    assert leader_index(servers, case["reason"]) == case.get("index")
