"""TLS: both clients against the scripted server wrapped in TLS, with a CA
and a server certificate made by the openssl command for this run."""

from __future__ import annotations

import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

import monolock
from monolock import _protocol as proto
from monolock import errors

from .session_support import open_session
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


def test_tls_release_sends_close_notify(api: Api, certs: tuple[Path, Path, Path]) -> None:
    """A released claim's connection ends with close_notify before the FIN:
    the scripted server reads a clean end, not a bare FIN (an
    SSLEOFError), which would also make OpenSSL throw the client's ticket
    away."""
    _, cert, key = certs
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    server = FakeServer(tls=ctx, ragged_eofs=False)
    try:
        fut = api.acquire(
            server.address, "tls/close-notify", lease=1, ssl_context=client_context(certs[0])
        )
        conn = server.accept()
        conn.read_acquire()
        conn.send(proto.encode_acquired(5))
        handle = fut.result(10)
        done = api.pool_call(handle.release)
        try:
            conn.wait_eof()
        except ssl.SSLEOFError:
            pytest.fail("the client closed its TLS connection without close_notify")
        finally:
            conn.close()
        done.result(10)
    finally:
        server.close()


SERVER_REFUSED = "(the server's certificate is not trusted: check the CA file and the server name)"
CLIENT_REFUSED = (
    "(the server refused this client's certificate: give a client certificate that its CA signs)"
)


def _assert_certificate_problem(
    api: Api,
    address: str,
    hint: str,
    serve: Callable[[], object] | None = None,
    **kwargs: Any,
) -> errors.ConnectError:
    """A waiting acquisition (deadline 10 s) of one server whose handshake
    fails on a certificate fails at once with a ConnectError that says so
    (spec/constants.json, tls_certificate_rule): not temporary, not a
    timeout. ``serve`` plays the server's side, if it is scripted."""
    start = time.monotonic()
    fut = api.acquire(address, "tls/refused", lease=1, timeout=10, **kwargs)
    if serve is not None:
        serve()
    with pytest.raises(errors.ConnectError) as info:
        fut.result(10)
    assert time.monotonic() - start < 2, "at once, not at the deadline"
    error = info.value
    assert not isinstance(error, errors.AcquireTimeout)
    assert not error.temporary and error.code is None
    text = str(error)
    assert text.startswith(f"monolock: TLS handshake with {address} failed: "), text
    assert text.endswith(hint), text
    assert "may not speak TLS" not in text and text.count("monolock: ") == 1
    return error


def _assert_refused_server_certificate(api: Api, tls_server: FakeServer, **kwargs: Any) -> None:
    def serve() -> None:
        with pytest.raises(ssl.SSLError):
            tls_server.accept()  # the client refuses the handshake

    _assert_certificate_problem(api, tls_server.address, SERVER_REFUSED, serve, **kwargs)
    tls_server.assert_no_connection(0.3)  # and does not come back


def test_tls_wrong_hostname_fails_at_once(
    api: Api, tls_server: FakeServer, certs: tuple[Path, Path, Path]
) -> None:
    _assert_refused_server_certificate(
        api,
        tls_server,
        ssl_context=client_context(certs[0]),
        server_hostname="not-this-server.example",
    )


def test_tls_untrusted_certificate_fails_at_once(api: Api, tls_server: FakeServer) -> None:
    _assert_refused_server_certificate(api, tls_server, ssl_context=ssl.create_default_context())


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


def test_tls_claims_resume_sessions(mtls_server: tuple[Path, RealServer]) -> None:
    """A blocking client's single claims resume the TLS session of the one
    before (its ticket kept, its close_notify sent): only the first
    connection pays a full handshake. The resumed ones still carry the
    client certificate the ACL names."""
    pki, server = mtls_server
    client = monolock.Client(server.address, lease=2, ssl_context=mtls_context(pki, "deployer"))
    sessions = client._tls_sessions
    for i in range(3):
        with client.lock(f"deploy/resume-{i}", timeout=10) as held:
            assert held.token > 0
        assert (sessions.handshakes, sessions.resumed) == (i + 1, i), "the first is full"


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


def test_mtls_without_a_client_certificate_fails_at_once(
    api: Api, mtls_server: tuple[Path, RealServer]
) -> None:
    """TLS 1.3: the handshake completes on the client's side; the server's
    certificate_required alert comes with the first read, after ACQUIRE."""
    pki, server = mtls_server
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    error = _assert_certificate_problem(api, server.address, CLIENT_REFUSED, ssl_context=context)
    assert "CERTIFICATE_REQUIRED" in str(error)


def test_mtls_client_certificate_of_another_ca_fails_at_once(
    api: Api, mtls_server: tuple[Path, RealServer], tmp_path: Path
) -> None:
    pki, server = mtls_server
    monolock_certs("init", str(tmp_path))
    monolock_certs("client", "--dir", str(tmp_path), "--cn", "deployer")
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(tmp_path / "deployer.crt", tmp_path / "deployer.key")
    error = _assert_certificate_problem(api, server.address, CLIENT_REFUSED, ssl_context=context)
    assert "UNKNOWN_CA" in str(error)


def test_mtls_wrong_ca_file_fails_at_once(
    api: Api, mtls_server: tuple[Path, RealServer], tmp_path: Path
) -> None:
    pki, server = mtls_server
    monolock_certs("init", str(tmp_path))
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    context.load_cert_chain(pki / "deployer.crt", pki / "deployer.key")
    _assert_certificate_problem(api, server.address, SERVER_REFUSED, ssl_context=context)


@pytest.mark.parametrize("first", ["no client certificate", "untrusted server"])
def test_certificate_problem_moves_on_to_the_next_server(
    api: Api,
    mtls_server: tuple[Path, RealServer],
    tls_server: FakeServer,
    certs: tuple[Path, Path, Path],
    first: str,
) -> None:
    """The server with the certificate problem leaves the rotation; the
    next server of the list is tried at once and grants."""
    pki, server = mtls_server
    # The scripted server's CA is trusted; the client has no certificate
    # for the mTLS server and, unless told, does not trust its CA either.
    context = client_context(certs[0])
    if first == "no client certificate":
        context.load_verify_locations(cafile=str(pki / "ca.crt"))
    start = time.monotonic()
    servers = [server.address, tls_server.address]
    fut = api.acquire(servers, "tls/next", lease=1, timeout=10, ssl_context=context)
    conn = tls_server.accept()
    assert conn.read_acquire() == (1000, b"tls/next")
    conn.send(proto.encode_acquired(9))
    handle = fut.result(10)
    assert handle.token == 9 and time.monotonic() - start < 2
    release_with(handle, conn)


def test_session_close_over_tls_releases_at_once(
    api: Api, mtls_server: tuple[Path, RealServer]
) -> None:
    """Closing a session over TLS sends close_notify before the FIN: the
    server releases its claims at once. A FIN without one ends the session
    as a reset, which holds the claims for the lease."""
    pki, server = mtls_server
    name = f"deploy/session-close-{api.kind}"
    context = mtls_context(pki, "deployer")
    session = open_session(api, server.address, lease=5, ssl_context=context).result(10)
    held = session.acquire(name).result(10)
    assert held.token > 0
    session.close()
    fut = api.acquire(server.address, name, lease=5, ssl_context=context, try_only=True)
    again = fut.result(10)
    assert again.token > held.token
    again.release()
