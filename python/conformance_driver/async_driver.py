"""The driver for the asyncio client: one task per claim."""

from __future__ import annotations

import asyncio
import sys
import threading

from monolock import AsyncClient, AsyncLock, errors

from .common import (
    CAPABILITIES,
    AcquireCmd,
    emit,
    emit_acquired,
    emit_cancelled,
    emit_error,
    emit_waiting,
    read_command,
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
                lock = await client.try_acquire(cmd.name, **cmd.claim_kwargs())
            else:
                lock = await client.acquire(
                    cmd.name,
                    **cmd.claim_kwargs(),
                    timeout=cmd.timeout,
                    on_waiting=lambda name: emit_waiting(cmd.id),
                )
        except errors.MonolockError as exc:
            emit_error(cmd.id, exc)
            return
        except asyncio.CancelledError:
            emit_cancelled(cmd.id)
            return
        self.lock = lock
        emit_acquired(cmd.id, lock)

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
        command = read_command(line)
        if command is None:
            continue
        if command.kind == "quit":
            break
        claim_id = command.claim_id
        if command.acquire is not None:
            claims[claim_id] = Claim(command.acquire)
        elif command.kind == "cancel":
            if claim_id in claims:
                claims[claim_id].task.cancel()
        else:  # release
            releases.append(asyncio.ensure_future(release(claim_id)))
    await asyncio.gather(*releases, return_exceptions=True)
    await asyncio.gather(*(c.release() for c in claims.values()), return_exceptions=True)
    return 0


def main() -> int:
    return asyncio.run(run())
