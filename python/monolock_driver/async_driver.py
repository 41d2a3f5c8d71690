"""The driver for the asyncio client: one task per claim."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any

from monolock import AsyncClient, AsyncLock, errors

from .common import (
    CAPABILITIES,
    AcquireCmd,
    emit,
    emit_acquired,
    emit_bad_command,
    emit_cancelled,
    emit_error,
    emit_lost,
    parse_acquire,
)


class Claim:
    """One acquire id: its acquisition task and, later, its lock."""

    def __init__(self, cmd: AcquireCmd) -> None:
        self.cmd = cmd
        self.lock: AsyncLock | None = None
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        cmd = self.cmd
        try:
            client = AsyncClient(cmd.servers, **cmd.client_kwargs())
            if cmd.try_only:
                lock = await client.try_acquire(cmd.name)
            else:
                lock = await client.acquire(
                    cmd.name,
                    timeout=cmd.timeout,
                    on_waiting=lambda name: emit("waiting", id=cmd.id),
                )
        except errors.MonolockError as exc:
            emit_error(cmd.id, exc)
            return
        except asyncio.CancelledError:
            emit_cancelled(cmd.id)
            return
        self.lock = lock
        emit_acquired(cmd.id, lock)
        lock.add_lost_callback(lambda err: emit_lost(cmd.id, err))

    async def release(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        if self.lock is not None:
            await self.lock.release()


def _stdin_lines(loop: asyncio.AbstractEventLoop) -> asyncio.Queue[str | None]:
    """Lines of stdin, read by a thread; None at EOF."""
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(queue.put_nowait, line)
        loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=read, daemon=True).start()
    return queue


async def run() -> int:
    emit("ready", client="python-asyncio", capabilities=CAPABILITIES)
    claims: dict[str, Claim] = {}
    releases: list[asyncio.Task[None]] = []
    lines = _stdin_lines(asyncio.get_running_loop())

    async def release(claim_id: str) -> None:
        claim = claims.get(claim_id)
        if claim is not None:
            await claim.release()
        emit("released", id=claim_id)

    while True:
        line = await lines.get()
        if line is None:
            break
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
            claims[claim_id] = Claim(parsed)
        elif kind == "cancel":
            if claim_id in claims:
                claims[claim_id].task.cancel()
        elif kind == "release":
            releases.append(asyncio.ensure_future(release(claim_id)))
        else:
            emit_bad_command(f"unknown command {kind!r}")
    await asyncio.gather(*releases, return_exceptions=True)
    await asyncio.gather(*(c.release() for c in claims.values()), return_exceptions=True)
    return 0


def main() -> int:
    return asyncio.run(run())
