"""TLS: both clients against the scripted server wrapped in TLS, with a CA
and a server certificate made by the openssl command for this run."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monolock import _protocol as proto
from monolock import errors

from .support import Api, FakeServer, make_certificates, release_with


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def tls_server(certs: tuple[Path, Path, Path]) -> Iterator[FakeServer]:
    _, cert, key = certs
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    server = FakeServer(tls=ctx)
    yield server
    server.close()


def client_context(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def test_tls_session(api: Api, tls_server: FakeServer, certs: tuple[Path, Path, Path]) -> None:
    fut = api.acquire(tls_server.address, "tls/a", lease=1, ssl_context=client_context(certs[0]))
    conn = tls_server.accept()
    assert conn.read_acquire() == (1000, b"tls/a")
    conn.send(b"\x11")
    conn.read_heartbeat()
    conn.send(b"\x11" + proto.encode_acquired(77))  # ack, then promotion in one record
    handle = fut.result(10)
    assert handle.token == 77
    for _ in range(3):
        conn.read_heartbeat()
        conn.send(proto.encode_acquired(77))
    assert not handle.lock.lost.is_set()
    conn.send(proto.encode_error(0x02, "kicked"))
    assert handle.wait_lost(5)
    lost = handle.lock.lost_error
    assert lost is not None and isinstance(lost.cause, errors.AdminClosed)


def test_tls_server_hostname(
    api: Api, tls_server: FakeServer, certs: tuple[Path, Path, Path]
) -> None:
    # Connect by IP, verify the certificate's DNS name.
    fut = api.acquire(
        tls_server.address,
        "tls/b",
        lease=1,
        ssl_context=client_context(certs[0]),
        server_hostname="localhost",
    )
    conn = tls_server.accept()
    conn.read_acquire()
    conn.send(proto.encode_acquired(1))
    release_with(fut.result(10), conn)


def _assert_refused_handshakes_retry(api: Api, tls_server: FakeServer, **kwargs: Any) -> None:
    """A refused server certificate is a failed connection: a waiting
    acquisition tries again until its deadline, which carries the cause."""
    fut = api.acquire(tls_server.address, "tls/refused", lease=1, timeout=1.5, **kwargs)
    for _ in range(2):  # the first attempt and at least one retry
        with pytest.raises(ssl.SSLError):
            tls_server.accept()  # the client refuses the handshake
    with pytest.raises(errors.AcquireTimeout) as info:
        fut.result(10)
    cause = info.value.__cause__  # the last attempt's failure
    assert isinstance(cause, errors.ConnectError)
    assert cause.temporary


def test_tls_wrong_hostname_is_retried_until_deadline(
    api: Api, tls_server: FakeServer, certs: tuple[Path, Path, Path]
) -> None:
    _assert_refused_handshakes_retry(
        api,
        tls_server,
        ssl_context=client_context(certs[0]),
        server_hostname="not-this-server.example",
    )


def test_tls_untrusted_certificate_is_retried_until_deadline(
    api: Api, tls_server: FakeServer
) -> None:
    _assert_refused_handshakes_retry(api, tls_server, ssl_context=ssl.create_default_context())
