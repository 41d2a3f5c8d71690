"""The driver for the blocking client: one thread per claim."""

from __future__ import annotations

import sys
import threading

import monolock
from monolock import errors

from .common import (
    CAPABILITIES,
    AcquireCmd,
    emit,
    emit_acquired,
    emit_error,
    emit_waiting,
    read_command,
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
                    on_waiting=lambda name: emit_waiting(cmd.id),
                )
        except errors.MonolockError as exc:
            emit_error(cmd.id, exc)
            self.done.set()
            return
        self.lock = lock
        emit_acquired(cmd.id, lock)
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
        command = read_command(line)
        if command is None:
            continue
        if command.kind == "quit":
            break
        claim_id = command.claim_id
        if command.acquire is not None:
            claim = Claim(command.acquire)
            claims[claim_id] = claim
            claim.thread.start()
        elif command.kind == "cancel":
            if claim_id in claims:
                claims[claim_id].cancel.set()
        else:  # release, off the command loop: it waits for the server's close
            t = threading.Thread(target=release, args=(claim_id,), daemon=True)
            releasers.append(t)
            t.start()
    for t in releasers:
        t.join()
    for claim in claims.values():
        claim.release()
    return 0
