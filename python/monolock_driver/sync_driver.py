"""The driver for the blocking client: one thread per claim."""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import monolock
from monolock import errors

from .common import (
    CAPABILITIES,
    AcquireCmd,
    emit,
    emit_acquired,
    emit_bad_command,
    emit_error,
    emit_lost,
    parse_acquire,
)


class Claim:
    """One acquire id: its pending acquisition and, later, its lock."""

    def __init__(self, cmd: AcquireCmd) -> None:
        self.cmd = cmd
        self.cancel = threading.Event()
        self.lock: monolock.Lock | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        cmd = self.cmd
        try:
            client = monolock.Client(cmd.servers, **cmd.client_kwargs())
            if cmd.try_only:
                lock = client.try_acquire(cmd.name)
            else:
                lock = client.acquire(
                    cmd.name,
                    timeout=cmd.timeout,
                    cancel=self.cancel,
                    on_waiting=lambda name: emit("waiting", id=cmd.id),
                )
        except errors.MonolockError as exc:
            emit_error(cmd.id, exc)
            self.done.set()
            return
        self.lock = lock
        emit_acquired(cmd.id, lock)
        # Registered after "acquired" so that "lost" always comes second.
        lock.add_lost_callback(lambda err: emit_lost(cmd.id, err))
        self.done.set()

    def release(self) -> None:
        self.cancel.set()
        self.done.wait()
        if self.lock is not None:
            self.lock.release()


def main() -> int:
    emit("ready", client="python-sync", capabilities=CAPABILITIES)
    claims: dict[str, Claim] = {}
    releasers: list[threading.Thread] = []

    def release(claim_id: str) -> None:
        claim = claims.get(claim_id)
        if claim is not None:
            claim.release()
        emit("released", id=claim_id)

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            cmd: dict[str, Any] = json.loads(line)
            kind = cmd["cmd"]
            if kind == "quit":
                break
            claim_id = str(cmd["id"])
        except (ValueError, KeyError, TypeError) as exc:
            emit_bad_command(f"bad command {line.strip()!r}: {exc}")
            continue
        if kind == "acquire":
            try:
                parsed = parse_acquire(cmd)
            except (ValueError, KeyError, TypeError) as exc:
                emit_bad_command(f"bad acquire {line.strip()!r}: {exc}")
                continue
            claim = Claim(parsed)
            claims[claim_id] = claim
            claim.thread.start()
        elif kind == "cancel":
            if claim_id in claims:
                claims[claim_id].cancel.set()
        elif kind == "release":
            # Off the command loop: release waits for the server's close.
            t = threading.Thread(target=release, args=(claim_id,), daemon=True)
            releasers.append(t)
            t.start()
        else:
            emit_bad_command(f"unknown command {kind!r}")
    for t in releasers:
        t.join()
    for claim in claims.values():
        claim.release()
    return 0
