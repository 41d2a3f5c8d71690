"""What both drivers share: the event stream, command parsing, the mapping
from exceptions to event kinds and from observations to observed events.
The drivers add only the I/O: threads (sync) or a task per claim and per
observation (asyncio)."""

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

CAPABILITIES = ["cancel", "election", "invalid_utf8_names", "sessions", "shared", "tls"]

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
    value: str | None = None
    """The claim's value (a campaign, protocol version 3); None: none."""
    session: str | None = None
    """The id of the session the claim goes on (protocol version 4);
    None: a connection of its own."""

    def claim_kwargs(self) -> dict[str, Any]:
        """The keywords of acquire / try_acquire: the mode (nothing for an
        exclusive claim, ``shared`` or ``limit`` for a shared one) and the
        value, if any."""
        kwargs: dict[str, Any] = {}
        if self.limit is not None:
            kwargs["limit"] = self.limit
        elif self.shared:
            kwargs["shared"] = True
        if self.value is not None:
            kwargs["value"] = self.value
        return kwargs

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for Client / AsyncClient."""
        return _client_kwargs(self.lease_ms, self.connect_timeout_ms, self.tls)


@dataclass(frozen=True)
class SessionCmd:
    """A parsed session command: open a session (protocol version 4)."""

    id: str
    servers: list[str]
    lease_ms: int
    connect_timeout_ms: float | None = None
    tls: TlsCmd | None = None

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for Client / AsyncClient."""
        return _client_kwargs(self.lease_ms, self.connect_timeout_ms, self.tls)


@dataclass(frozen=True)
class ObserveCmd:
    """A parsed observe command: follow the leader of ``name``."""

    id: str
    servers: list[str]
    name: str | bytes
    lease_ms: int
    connect_timeout_ms: float | None = None
    tls: TlsCmd | None = None

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for Client / AsyncClient."""
        return _client_kwargs(self.lease_ms, self.connect_timeout_ms, self.tls)


def _client_kwargs(
    lease_ms: int, connect_timeout_ms: float | None, tls: TlsCmd | None
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"lease": lease_ms / 1000}
    if connect_timeout_ms is not None:
        kwargs["connect_timeout"] = connect_timeout_ms / 1000
    if tls is not None:
        kwargs["ssl_context"] = tls.context()
        if tls.server_name is not None:
            kwargs["server_hostname"] = tls.server_name
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


def _parse_name(cmd: dict[str, Any]) -> str | bytes:
    """name_hex decoded when present (any bytes), else name."""
    if "name_hex" in cmd and cmd["name_hex"] is not None:
        return bytes.fromhex(cmd["name_hex"])
    name = cmd["name"]
    if not isinstance(name, str):
        raise ValueError("name must be a string")
    return name


def _parse_servers(cmd: dict[str, Any]) -> list[str]:
    servers = cmd["servers"]
    if isinstance(servers, str):
        servers = [servers]
    return list(servers)


def _parse_value(cmd: dict[str, Any]) -> str | None:
    value = cmd.get("value")
    if value is not None and not isinstance(value, str):
        raise ValueError("value must be a string")
    return value


def parse_acquire(cmd: dict[str, Any]) -> AcquireCmd:
    """Read an acquire command; KeyError/ValueError when malformed."""
    mode = cmd.get("mode", "wait")
    if mode not in ("wait", "try"):
        raise ValueError(f"unknown mode {mode!r}")
    timeout_ms = cmd.get("timeout_ms")
    shared = cmd.get("shared", False)
    if not isinstance(shared, bool):
        raise ValueError("shared must be true or false")
    limit = cmd.get("limit", 0)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValueError("limit must be a whole number")
    if limit and not shared:
        raise ValueError("limit is only for a shared claim")
    session = cmd.get("session")
    if session is not None and not isinstance(session, str):
        raise ValueError("session must be a string")
    on_session = session is not None  # then servers and lease are the session's
    return AcquireCmd(
        id=str(cmd["id"]),
        servers=_parse_servers(cmd) if not on_session or "servers" in cmd else [],
        name=_parse_name(cmd),
        lease_ms=int(cmd["lease_ms"] if not on_session else cmd.get("lease_ms") or 0),
        try_only=mode == "try",
        timeout=None if timeout_ms is None else timeout_ms / 1000,
        connect_timeout_ms=cmd.get("connect_timeout_ms"),
        tls=_parse_tls(cmd.get("tls")),
        shared=shared,
        limit=limit or None,
        value=_parse_value(cmd),
        session=session,
    )


def parse_session(cmd: dict[str, Any]) -> SessionCmd:
    """Read a session command; KeyError/ValueError when malformed."""
    return SessionCmd(
        id=str(cmd["id"]),
        servers=_parse_servers(cmd),
        lease_ms=int(cmd["lease_ms"]),
        connect_timeout_ms=cmd.get("connect_timeout_ms"),
        tls=_parse_tls(cmd.get("tls")),
    )


def parse_observe(cmd: dict[str, Any]) -> ObserveCmd:
    """Read an observe command; KeyError/ValueError when malformed."""
    return ObserveCmd(
        id=str(cmd["id"]),
        servers=_parse_servers(cmd),
        name=_parse_name(cmd),
        lease_ms=int(cmd["lease_ms"]),
        connect_timeout_ms=cmd.get("connect_timeout_ms"),
        tls=_parse_tls(cmd.get("tls")),
    )


@dataclass(frozen=True)
class Command:
    """One command line: ``kind`` is "acquire" (with ``acquire`` set),
    "observe" (with ``observe`` set), "session" (with ``session`` set),
    "proclaim" (with ``value`` set), "cancel", "release" or "quit"."""

    kind: str
    claim_id: str = ""
    acquire: AcquireCmd | None = None
    observe: ObserveCmd | None = None
    session: SessionCmd | None = None
    value: str = ""


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
    if kind in ("cancel", "release"):
        return Command(kind, claim_id)
    try:
        return _parse_command(kind, claim_id, cmd)
    except _COMMAND_ERRORS as exc:
        emit_bad_command(f"bad {kind} {line.strip()!r}: {exc}")
        return None


def _parse_command(kind: str, claim_id: str, cmd: dict[str, Any]) -> Command | None:
    """The commands with fields of their own; None (after a driver_error)
    for an unknown one."""
    if kind == "acquire":
        return Command(kind, claim_id, acquire=parse_acquire(cmd))
    if kind == "observe":
        return Command(kind, claim_id, observe=parse_observe(cmd))
    if kind == "session":
        return Command(kind, claim_id, session=parse_session(cmd))
    if kind == "proclaim":
        value = _parse_value(cmd)
        if value is None:
            raise ValueError("proclaim needs a value")
        return Command(kind, claim_id, value=value)
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


def emit_proclaim_failure(claim_id: str, exc: errors.MonolockError) -> None:
    """A proclaim that failed: an error event, unless the claim's own
    events tell it already (``lost`` for a loss, ``released`` for a
    release)."""
    if not isinstance(exc, (errors.LockLost, errors.LockReleased)):
        emit_error(claim_id, exc)


_STATES = {
    monolock.LeaderState.LEADER: "leader",
    monolock.LeaderState.NO_LEADER: "none",
    monolock.LeaderState.HELD_BACK: "held_back",
}


def observed_fields(seen: monolock.Observation) -> dict[str, Any]:
    """An observation in the pipe's words. Unknown vouches for nothing, so
    it names no token, value or count; token and value go together, only
    for a term (a held-back name with token 0 waits for leaders it does not
    know)."""
    state = _STATES.get(seen.state)
    if state is None:
        return {"state": "unknown"}
    fields: dict[str, Any] = {"state": state}
    if seen.token:
        fields["token"] = str(seen.token)
        fields["value"] = seen.value.decode("utf-8", errors="replace")
    fields["candidates"] = seen.candidates
    return fields


class ObservedEvents:
    """Prints one observe's observed events. The client yields an
    observation when anything in it changes, the hold's end or the
    leader's identity included, which the pipe does not carry: only a
    change the pipe can show is printed, since a repeated event is one the
    scenario did not expect. The first event is a known picture: the client
    waits for one, but it may lapse before it is read."""

    def __init__(self, observe_id: str) -> None:
        self.observe_id = observe_id
        self._last: dict[str, Any] | None = None

    def emit(self, seen: monolock.Observation) -> None:
        fields = observed_fields(seen)
        if fields == self._last or (self._last is None and fields["state"] == "unknown"):
            return
        self._last = fields
        emit("observed", id=self.observe_id, **fields)
