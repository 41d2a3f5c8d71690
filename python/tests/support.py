"""Test helpers: the spec files, the real server, a scripted fake server, and
one blocking facade over both client APIs so that a scenario is written once
and run against each."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Callable, TypeVar

import pytest

import monolock
from monolock.aio import AsyncClient, AsyncLock

T = TypeVar("T")

PYTHON_DIR = Path(__file__).resolve().parent.parent
REPO = PYTHON_DIR.parent
SPEC = REPO / "spec"


def load_spec(relative: str) -> Any:
    """Load a JSON file of ../spec."""
    with open(SPEC / relative, encoding="utf-8") as f:
        return json.load(f)


# -- system tools -----------------------------------------------------------------

SYSTEM_TOOLS = REPO / "scripts" / "system-tools.tsv"


def require_tool(name: str, tools_list: Path = SYSTEM_TOOLS) -> str:
    """The path of the system tool ``name`` of scripts/system-tools.tsv.
    Fails the test (never skips it) when the tool is missing, naming its
    Debian package and the command that installs it, and also when ``name``
    is not on the list: a test may run only what a new machine installs.
    ``tools_list`` is for the helper's own tests."""
    for line in tools_list.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#") or line.startswith("name\t"):
            continue
        tool, package, path, group, _used_by = line.split("\t")
        if tool != name:
            continue
        found = shutil.which(name) if path == "-" else (path if os.path.exists(path) else None)
        if found is None:
            how = (
                "bash bench/scripts/peers.sh install" if group == "bench" else "go run mage.go deps"
            )
            pytest.fail(
                f"{name} is not installed (Debian package {package}): "
                f"run {how} (apt-get install {package})"
            )
        return found
    pytest.fail(
        f"{name} is not on {tools_list}: declare it there (name, Debian package, "
        "path, group) so that a new machine installs it"
    )


# -- timing -----------------------------------------------------------------


def assert_on_time(
    what: str, actual: float, expected: float, *, late: float, early: float = 0.001
) -> None:
    """Check that the instant ``actual`` (``time.monotonic()`` seconds) is no
    more than ``early`` before ``expected`` and no more than ``late`` after
    it. Being early breaks a rule, so ``early`` only absorbs float noise;
    ``late`` is load on the machine and is derived from the lease by the
    caller. The message says which timing was missed and by how much."""
    off = actual - expected
    if off < -early:
        raise AssertionError(f"{what}: {-off * 1000:.1f} ms early (never allowed)")
    if off > late:
        raise AssertionError(
            f"{what}: {off * 1000:.0f} ms late, {(off - late) * 1000:.0f} ms over the "
            f"{late * 1000:.0f} ms allowed"
        )


# -- the real server ------------------------------------------------------


def server_binary() -> str:
    """$MONOLOCK_BIN, else build ../bin/monolock from ../go."""
    env = os.environ.get("MONOLOCK_BIN")
    if env:
        return env
    out = REPO / "bin" / "monolock"
    subprocess.run(
        ["go", "build", "-o", str(out), "./cmd/monolock"],
        cwd=REPO / "go",
        check=True,
    )
    os.environ["MONOLOCK_BIN"] = str(out)
    return str(out)


class RealServer:
    """A `monolock serve` process on a free loopback port, with
    `extra_args` (TLS files, an ACL) after the defaults."""

    def __init__(self, *extra_args: str) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="monolock-py-")
        self._log_path = Path(self._dir.name) / "server.log"
        self._ready_path = Path(self._dir.name) / "ready.json"
        data_dir = Path(self._dir.name) / "data"
        with open(self._log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    server_binary(),
                    "serve",
                    "--listen",
                    "127.0.0.1:0",
                    "--admin",
                    "127.0.0.1:0",
                    "--data-dir",
                    str(data_dir),
                    "--ready-file",
                    str(self._ready_path),
                    *extra_args,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.address, self.admin_address = self._wait_for_addresses()
        """The lock protocol's address, and the admin HTTP API's."""

    def _wait_for_addresses(self) -> tuple[str, str]:
        """Wait for the server's --ready-file (docs/operating.md): it is
        renamed into place whole, so once it exists it parses."""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self._ready_path.exists():
                ready = json.loads(self._ready_path.read_text(encoding="utf-8"))
                return ready["lock_addr"], ready["admin_addr"]
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        status = self.proc.poll()
        why = "was not ready within 15 s" if status is None else f"exited with status {status}"
        tail = self._log_tail()  # before stop removes the log
        self.stop()
        raise RuntimeError(f"monolock serve {why}; its stderr:\n{tail}")

    def _log_tail(self, limit: int = 16384) -> str:
        text = self._log_path.read_text(errors="replace")
        return text[-limit:]

    @property
    def log(self) -> str:
        """The server's stderr so far."""
        return self._log_path.read_text(errors="replace")

    def terminate(self) -> None:
        """Ask for a graceful shutdown (SIGTERM)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """Stop the process and remove its files."""
        self.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._dir.cleanup()


# -- a scripted fake server --------------------------------------------------


class FakeConn:
    """The server end of one client connection, driven by the test."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def read_exact(self, n: int, timeout: float = 5.0) -> bytes:
        """Read exactly n bytes or fail the test."""
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out reading {n} bytes, have {bytes(self.buf)!r}")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            if not data:
                raise AssertionError(f"client closed while {n} bytes were expected")
            self.buf += data
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_acquire(self, timeout: float = 5.0) -> tuple[int, bytes]:
        """Read an ACQUIRE frame and return (lease_ms, name)."""
        head = self.read_exact(8, timeout)
        assert head[0] == 0x01 and head[1] == 0x01, head
        lease_ms = int.from_bytes(head[2:6], "big")
        name = self.read_exact(int.from_bytes(head[6:8], "big"), timeout)
        return lease_ms, name

    def read_heartbeat(self, timeout: float = 5.0) -> float:
        """Read one HEARTBEAT byte; return the monotonic time it arrived."""
        assert self.read_exact(1, timeout) == b"\x02"
        return time.monotonic()

    def send(self, data: bytes) -> None:
        """Write bytes to the client."""
        self.sock.sendall(data)

    def wait_eof(self, timeout: float = 5.0, *, heartbeats: bool = True) -> float:
        """Wait until the client closes; fail on any byte but heartbeats
        (on any byte at all without ``heartbeats``). Returns the monotonic
        time the close was seen."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError("client did not close the connection")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except ConnectionResetError:
                return time.monotonic()
            if not data:
                return time.monotonic()
            assert heartbeats and set(data) == {0x02}, data

    def assert_silent(self, seconds: float) -> None:
        """Fail if the client sends anything or closes within ``seconds``."""
        self.sock.settimeout(seconds)
        try:
            data = self.sock.recv(4096)
        except socket.timeout:
            return
        raise AssertionError(f"expected silence, got {data!r}")

    def close(self) -> None:
        """Close the server end."""
        self.sock.close()


class FakeServer:
    """A listening socket whose connections the test answers by hand,
    optionally over TLS."""

    def __init__(self, tls: ssl.SSLContext | None = None, *, ragged_eofs: bool = True) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.tls = tls
        self.ragged_eofs = ragged_eofs
        """False: over TLS, a FIN without close_notify raises
        :class:`ssl.SSLEOFError` on the server's read."""
        self.conns: list[FakeConn] = []

    def accept(self, timeout: float = 5.0) -> FakeConn:
        """Accept the next client connection."""
        self.listener.settimeout(timeout)
        sock, _ = self.listener.accept()
        sock.settimeout(None)
        if self.tls is not None:
            sock = self.tls.wrap_socket(
                sock, server_side=True, suppress_ragged_eofs=self.ragged_eofs
            )
        conn = FakeConn(sock)
        self.conns.append(conn)
        return conn

    def assert_no_connection(self, seconds: float) -> None:
        """Fail if a client connects within ``seconds``."""
        self.listener.settimeout(seconds)
        try:
            sock, _ = self.listener.accept()
        except socket.timeout:
            return
        sock.close()
        raise AssertionError("unexpected connection")

    def close(self) -> None:
        """Close the listener and every accepted connection."""
        for conn in self.conns:
            conn.close()
        self.listener.close()


def unused_address() -> str:
    """A loopback address nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


# -- one blocking facade over the sync and asyncio APIs ---------------------------


class LockHandle:
    """A held lock of either API, used from the test thread."""

    def __init__(self, api: Api, lock: monolock.Lock | AsyncLock) -> None:
        self.api = api
        self.lock = lock

    @property
    def token(self) -> int:
        return self.lock.token

    def release(self) -> None:
        if isinstance(self.lock, AsyncLock):
            self.api.run(self.lock.release())
        else:
            self.lock.release()

    def proclaim(self, value: str | bytes) -> None:
        """Proclaim ``value`` and wait for the server's ack (or the error)."""
        if isinstance(self.lock, AsyncLock):
            self.api.run(self.lock.proclaim(value))
        else:
            self.lock.proclaim(value)

    def wait_lost(self, timeout: float) -> bool:
        """Wait until the lock is lost; False on timeout."""
        lock = self.lock
        if isinstance(lock, AsyncLock):

            async def wait() -> bool:
                try:
                    await asyncio.wait_for(lock.lost.wait(), timeout)
                except asyncio.TimeoutError:
                    return False
                return True

            return self.api.run(wait())
        return lock.lost.wait(timeout)


def release_with(handle: LockHandle, conn: FakeConn) -> None:
    """Release through a fake server that answers the client's close with
    its own, as the real server does (release waits for that)."""
    done = handle.api.pool_call(handle.release)
    conn.wait_eof()
    conn.close()
    done.result(10)


class Api:
    """Run client calls of one API ("sync" or "asyncio") from the test
    thread; acquisitions run in the background and return futures."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=8)
        self._loop: asyncio.AbstractEventLoop | None = None
        if kind == "asyncio":
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
            self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the API's loop and wait for its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def run_later(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start a coroutine on the API's loop; its future."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def pool_call(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        """Run a blocking call in the background."""
        return self._pool.submit(fn)

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Run fn on the loop thread (asyncio) or right here (sync)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(fn)
        else:
            fn()

    def acquire(
        self,
        servers: Any,
        name: str | bytes,
        *,
        try_only: bool = False,
        **kwargs: Any,
    ) -> concurrent.futures.Future[LockHandle]:
        """Start an acquisition; kwargs go to the client (lease, ...)
        and to acquire (shared, limit, value, timeout, on_waiting, on_lost)."""
        acquire_keys = {"shared", "limit", "value", "timeout", "on_waiting", "on_lost", "cancel"}
        call_kw = {k: v for k, v in kwargs.items() if k in acquire_keys}
        client_kw = {k: v for k, v in kwargs.items() if k not in acquire_keys}
        if self._loop is not None:

            async def go() -> LockHandle:
                client = AsyncClient(servers, **client_kw)
                if try_only:
                    lock = await client.try_acquire(name, **call_kw)
                else:
                    lock = await client.acquire(name, **call_kw)
                return LockHandle(self, lock)

            return asyncio.run_coroutine_threadsafe(go(), self._loop)

        def run() -> LockHandle:
            client = monolock.Client(servers, **client_kw)
            if try_only:
                return LockHandle(self, client.try_acquire(name, **call_kw))
            return LockHandle(self, client.acquire(name, **call_kw))

        return self._pool.submit(run)

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        if self._loop is None:
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run(cancel_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


# -- TLS material -----------------------------------------------------------------


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 / localhost, made with
    the openssl command. Returns (ca.pem, server.pem, server.key)."""
    ca_key, ca = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    ext = directory / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl = require_tool("openssl")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True)

    run(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=monolock test CA", "-keyout", str(ca_key), "-out", str(ca),
    )  # fmt: skip
    run(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
        "-keyout", str(key), "-out", str(csr),
    )  # fmt: skip
    run(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert),
    )  # fmt: skip
    return ca, cert, key
