"""What both drivers share: the event stream, command parsing and the
mapping from exceptions to event kinds. The drivers add only the I/O: a
pool of threads (sync) or a task per claim (asyncio)."""

from __future__ import annotations

import json
import os
import select
import ssl
import sys
import time
from dataclasses import dataclass
from typing import Any

import monolock
from monolock import errors

CAPABILITIES = ["cancel", "invalid_utf8_names", "shared", "tls"]

_start = time.monotonic()

# Each event line goes out in one write(2) of at most PIPE_BUF bytes, which
# POSIX makes atomic on a pipe, so threads print without a lock. A lock held
# across the write is held while its thread waits for the GIL after the
# system call, and every other thread that prints queues behind it: with 16
# claims at once that serialised the whole sync driver.
_PIPE_BUF = getattr(select, "PIPE_BUF", 512)
_STDOUT = sys.stdout.fileno()


def emit(event: str, **fields: Any) -> None:
    """Write one event line, unbuffered (thread-safe, no lock)."""
    record = {"event": event, **fields, "t_ms": round((time.monotonic() - _start) * 1000, 3)}
    data = (json.dumps(record, ensure_ascii=False) + "\n").encode()
    while len(data) > _PIPE_BUF and len(record.get("message") or "") > 16:
        message = record["message"]  # free text for humans: shorten it
        record["message"] = message[: len(message) - (len(data) - _PIPE_BUF) - 1] + "…"
        data = (json.dumps(record, ensure_ascii=False) + "\n").encode()
    view = memoryview(data)
    while view:
        view = view[os.write(_STDOUT, view) :]


def log(message: str) -> None:
    """A diagnostic line on stderr."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


@dataclass(frozen=True)
class AcquireCmd:
    """A parsed acquire command."""

    id: str
    servers: list[str]
    name: str | bytes
    lease_ms: int
    try_only: bool
    timeout: float | None
    connect_timeout_ms: float | None
    tls: TlsCmd | None = None
    shared: bool = False
    limit: int | None = None
    """A semaphore's permits (only with ``shared``); None: no bound."""

    def claim_kwargs(self) -> dict[str, Any]:
        """The mode keywords of acquire / try_acquire: nothing for an
        exclusive claim, ``shared`` or ``limit`` for a shared one."""
        if self.limit is not None:
            return {"limit": self.limit}
        if self.shared:
            return {"shared": True}
        return {}

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for Client / AsyncClient."""
        kwargs: dict[str, Any] = {"lease": self.lease_ms / 1000}
        if self.connect_timeout_ms is not None:
            kwargs["connect_timeout"] = self.connect_timeout_ms / 1000
        if self.tls is not None:
            kwargs["ssl_context"] = self.tls.context()
            if self.tls.server_name is not None:
                kwargs["server_hostname"] = self.tls.server_name
        return kwargs


@dataclass(frozen=True)
class TlsCmd:
    """The tls object of an acquire command: PEM files and the name the
    server's certificate must carry (None: the host of the address)."""

    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    server_name: str | None

    def context(self) -> ssl.SSLContext:
        """A verifying client context with the CA and client certificate."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


def _parse_tls(value: Any) -> TlsCmd | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("tls must be an object")

    def text(key: str) -> str | None:
        field = value.get(key)
        if field is not None and not isinstance(field, str):
            raise ValueError(f"tls.{key} must be a string")
        return field

    return TlsCmd(text("ca_file"), text("cert_file"), text("key_file"), text("server_name"))


def parse_acquire(cmd: dict[str, Any]) -> AcquireCmd:
    """Read an acquire command; KeyError/ValueError when malformed."""
    name: str | bytes
    if "name_hex" in cmd and cmd["name_hex"] is not None:
        name = bytes.fromhex(cmd["name_hex"])
    else:
        name = cmd["name"]
        if not isinstance(name, str):
            raise ValueError("name must be a string")
    mode = cmd.get("mode", "wait")
    if mode not in ("wait", "try"):
        raise ValueError(f"unknown mode {mode!r}")
    servers = cmd["servers"]
    if isinstance(servers, str):
        servers = [servers]
    timeout_ms = cmd.get("timeout_ms")
    connect_ms = cmd.get("connect_timeout_ms")
    shared = cmd.get("shared", False)
    if not isinstance(shared, bool):
        raise ValueError("shared must be true or false")
    limit = cmd.get("limit", 0)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValueError("limit must be a whole number")
    if limit and not shared:
        raise ValueError("limit is only for a shared claim")
    return AcquireCmd(
        id=str(cmd["id"]),
        servers=list(servers),
        name=name,
        lease_ms=int(cmd["lease_ms"]),
        try_only=mode == "try",
        timeout=None if timeout_ms is None else timeout_ms / 1000,
        connect_timeout_ms=connect_ms,
        tls=_parse_tls(cmd.get("tls")),
        shared=shared,
        limit=limit or None,
    )


@dataclass(frozen=True)
class Command:
    """One command line: ``kind`` is "acquire" (with ``acquire`` set),
    "cancel", "release" or "quit"."""

    kind: str
    claim_id: str = ""
    acquire: AcquireCmd | None = None


_COMMAND_ERRORS = (ValueError, KeyError, TypeError)


def read_command(line: str) -> Command | None:
    """Parse one line of stdin. Blank lines give None; so do malformed and
    unknown commands, after a driver_error event."""
    if not line.strip():
        return None
    try:
        cmd: dict[str, Any] = json.loads(line)
        kind = cmd["cmd"]
        if kind == "quit":
            return Command("quit")
        claim_id = str(cmd["id"])
    except _COMMAND_ERRORS as exc:
        emit_bad_command(f"bad command {line.strip()!r}: {exc}")
        return None
    if kind == "acquire":
        try:
            return Command(kind, claim_id, parse_acquire(cmd))
        except _COMMAND_ERRORS as exc:
            emit_bad_command(f"bad acquire {line.strip()!r}: {exc}")
            return None
    if kind in ("cancel", "release"):
        return Command(kind, claim_id)
    emit_bad_command(f"unknown command {kind!r}")
    return None


def _code_fields(exc: errors.MonolockError) -> dict[str, Any]:
    code = exc.code
    return {
        "code": code,
        "temporary": None if code is None else exc.temporary,
        "message": str(exc),
    }


def error_kind(exc: BaseException) -> str:
    """The event kind of an acquisition failure."""
    if isinstance(exc, errors.AcquireCancelled):
        return "cancelled"
    if isinstance(exc, errors.LockBusy):
        return "busy"
    if isinstance(exc, (errors.AcquireTimeout, errors.HeartbeatTimeout)):
        return "timeout"
    if isinstance(exc, errors.ServerError):
        return "server" if exc.from_server else "validation"
    if isinstance(exc, errors.ServerEnded):
        return "server"  # an ERROR whose code never came: code null
    return "connect"


def emit_error(claim_id: str, exc: errors.MonolockError) -> None:
    emit("error", id=claim_id, kind=error_kind(exc), **_code_fields(exc))


def emit_cancelled(claim_id: str) -> None:
    emit(
        "error",
        id=claim_id,
        kind="cancelled",
        code=None,
        temporary=None,
        message="acquisition cancelled",
    )


def emit_waiting(claim_id: str) -> None:
    emit("waiting", id=claim_id)


def emit_acquired(claim_id: str, lock: monolock.Lock | monolock.AsyncLock) -> None:
    """Report the grant, then the lock's loss if it comes."""
    valid_ms = (lock.valid_until - time.monotonic()) * 1000
    emit("acquired", id=claim_id, token=str(lock.token), valid_ms=round(valid_ms, 3))
    # Registered after "acquired" so that "lost" always comes second.
    lock.add_lost_callback(lambda err: emit_lost(claim_id, err))


def emit_lost(claim_id: str, error: errors.LockLost) -> None:
    cause = error.cause
    if isinstance(cause, (errors.ServerError, errors.ServerEnded)):
        kind = "server"
    elif isinstance(cause, errors.HeartbeatTimeout):
        kind = "timeout"
    else:
        kind = "io"
    emit("lost", id=claim_id, kind=kind, **_code_fields(error))


def emit_bad_command(message: str) -> None:
    emit("driver_error", message=message)
