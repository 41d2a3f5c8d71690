"""TLS: both clients against the scripted server wrapped in TLS, with a CA
and a server certificate made by the openssl command for this run."""

from __future__ import annotations

import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monolock import _protocol as proto
from monolock import errors

from .support import Api, FakeServer, RealServer, make_certificates, release_with, server_binary


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
    handshake = f"TLS handshake with {tls_server.address} failed: "
    assert str(cause).startswith(f"monolock: {handshake}"), cause
    assert "may not speak TLS" not in str(cause)
    assert f"(last attempt: {handshake}" in str(info.value)


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


def test_tls_to_the_plaintext_server_says_so(api: Api, real_server: RealServer) -> None:
    """The real server answers a ClientHello with a plaintext ERROR: the
    message names the address and says the server may not speak TLS, not
    OpenSSL's "wrong version number" alone."""
    tls = ssl.create_default_context()
    fut = api.acquire(real_server.address, "tls/plain", lease=1, ssl_context=tls, try_only=True)
    with pytest.raises(errors.ConnectError) as info:
        fut.result(10)
    expected = (
        f"monolock: TLS handshake with {real_server.address} failed; the server may not speak TLS ("
    )
    assert str(info.value).startswith(expected), info.value
    assert info.value.temporary and str(info.value).count("monolock: ") == 1


def test_tls_to_an_http_port_times_out_with_that_cause(api: Api) -> None:
    """A waiting acquisition retries (another server may be fine) and its
    timeout keeps the cause, rather than reading like a busy lock."""
    http = FakeServer()
    stop = threading.Event()

    def answer() -> None:
        while not stop.is_set():
            try:
                conn = http.accept(timeout=0.2)
            except OSError:
                continue
            conn.send(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        tls = ssl.create_default_context()
        fut = api.acquire(http.address, "tls/http", lease=1, ssl_context=tls, timeout=1)
        with pytest.raises(errors.AcquireTimeout) as info:
            fut.result(10)
    finally:
        stop.set()
        thread.join()
        http.close()
    assert isinstance(info.value.__cause__, errors.ConnectError)
    assert (
        f"(last attempt: TLS handshake with {http.address} failed; the server may not speak TLS"
        in str(info.value)
    ), info.value


# -- mutual TLS and the ACL against the real server, files by `monolock certs`


def monolock_certs(*args: str) -> None:
    subprocess.run([server_binary(), "certs", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def mtls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, RealServer]]:
    """`monolock serve` with mutual TLS and an ACL that lets cn:deployer
    take deploy/*; every file made by `monolock certs`."""
    pki = tmp_path_factory.mktemp("pki")
    monolock_certs("init", str(pki))
    monolock_certs("server", "--dir", str(pki), "--host", "127.0.0.1", "--host", "localhost")
    monolock_certs("client", "--dir", str(pki), "--cn", "deployer")
    monolock_certs("client", "--dir", str(pki), "--cn", "intruder")
    acl = pki / "acl"
    acl.write_text("cn:deployer deploy/*\n")
    server = RealServer(
        "--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
        "--tls-client-ca", str(pki / "ca.crt"), "--acl", str(acl),
    )  # fmt: skip
    yield pki, server
    server.stop()


def mtls_context(pki: Path, name: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(pki / f"{name}.crt", pki / f"{name}.key")
    return ctx


def test_mtls_acl_allows_the_deployer(api: Api, mtls_server: tuple[Path, RealServer]) -> None:
    pki, server = mtls_server
    for hostname in (None, "localhost"):  # the IP SAN, then the DNS SAN
        fut = api.acquire(
            server.address,
            f"deploy/{api.kind}",
            lease=2,
            ssl_context=mtls_context(pki, "deployer"),
            server_hostname=hostname,
        )
        handle = fut.result(10)
        assert handle.token > 0
        handle.release()


def test_mtls_acl_refuses_a_cn_it_does_not_name(
    api: Api, mtls_server: tuple[Path, RealServer]
) -> None:
    pki, server = mtls_server
    fut = api.acquire(
        server.address, f"deploy/{api.kind}-intruder", lease=2,
        ssl_context=mtls_context(pki, "intruder"), try_only=True,
    )  # fmt: skip
    with pytest.raises(errors.NotAuthorized) as info:
        fut.result(10)
    assert info.value.code == 0x18
