"""The driver for the asyncio client: one task per claim, per
observation and per session's open."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Coroutine
from typing import Any

from monolock import AsyncClient, AsyncLock, errors
from monolock.aio import AsyncSession

from .common import (
    CAPABILITIES,
    AcquireCmd,
    Command,
    ObserveCmd,
    ObservedEvents,
    SessionCmd,
    emit,
    emit_acquired,
    emit_bad_command,
    emit_cancelled,
    emit_error,
    emit_proclaim_failure,
    emit_waiting,
    read_command,
)


class SessionEntry:
    """One session id: the task that opens it, then the session."""

    def __init__(self, cmd: SessionCmd) -> None:
        self.cmd = cmd
        self.session: AsyncSession | None = None
        self.task = asyncio.ensure_future(self._open())

    async def _open(self) -> None:
        cmd = self.cmd
        try:
            session = await AsyncClient(cmd.servers, **cmd.client_kwargs()).session()
        except errors.MonolockError as exc:
            emit_error(cmd.id, exc)
            return
        self.session = session
        emit("opened", id=cmd.id)

    async def close(self) -> None:
        """Close the session once open: every claim it still holds is
        released, none told lost."""
        await asyncio.wait([self.task])
        if self.session is not None:
            await self.session.close()


class Claim:
    """One acquire id: its acquisition task and, later, its lock. A claim
    with ``on`` goes on that session instead of a connection of its own."""

    def __init__(self, cmd: AcquireCmd, on: SessionEntry | None = None) -> None:
        self.cmd = cmd
        self.on = on
        self.lock: AsyncLock | None = None
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        cmd = self.cmd
        try:
            opener: AsyncClient | AsyncSession
            if self.on is not None:
                await asyncio.wait([self.on.task])
                if self.on.session is None:
                    raise errors.ConnectionClosed("monolock: the session did not open")
                opener = self.on.session
            else:
                opener = AsyncClient(cmd.servers, **cmd.client_kwargs())
            if cmd.try_only:
                lock = await opener.try_acquire(cmd.name, **cmd.claim_kwargs())
            else:
                lock = await opener.acquire(
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

    async def proclaim(self, value: str) -> None:
        """The proclaim command: once the acquisition has ended, replace the
        lock's value and print ``proclaimed`` when the server has it. A
        claim that was never granted has said so already."""
        await asyncio.wait([self.task])  # not `await self.task`: a quit cancels us, not it
        if self.lock is None:
            return
        try:
            await self.lock.proclaim(value)
        except errors.MonolockError as exc:
            emit_proclaim_failure(self.cmd.id, exc)
        else:
            emit("proclaimed", id=self.cmd.id)

    async def release(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        if self.lock is not None:
            await self.lock.release()


class Observer:
    """One observe id: a task that follows the name and prints observed
    events until it is cancelled (release, quit)."""

    def __init__(self, cmd: ObserveCmd) -> None:
        self.cmd = cmd
        self._events = ObservedEvents(cmd.id)
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        cmd = self.cmd
        try:
            client = AsyncClient(cmd.servers, **cmd.client_kwargs())
            observations = await client.observe(cmd.name)
        except errors.MonolockError as exc:
            emit_error(cmd.id, exc)
            return
        try:
            async for seen in observations:
                self._events.emit(seen)
        except errors.MonolockError as exc:  # the watch ended on a terminal error
            emit_error(cmd.id, exc)
        finally:
            await observations.aclose()

    async def stop(self) -> None:
        """End the observation; no event of it is printed after this."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def _stdin_lines(loop: asyncio.AbstractEventLoop) -> asyncio.Queue[str | None]:
    """Lines of stdin, read by a thread; None at EOF."""
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(queue.put_nowait, line)
        loop.call_soon_threadsafe(queue.put_nowait, None)

    threading.Thread(target=read, daemon=True).start()
    return queue


class Driver:
    """The command loop's state: the claims and observations by id, and
    the tasks that answer releases and proclaims (kept so that none is
    collected before it ends)."""

    def __init__(self) -> None:
        self.claims: dict[str, Claim] = {}
        self.observers: dict[str, Observer] = {}
        self.sessions: dict[str, SessionEntry] = {}
        self.releases: set[asyncio.Future[Any]] = set()
        self.proclaims: set[asyncio.Future[Any]] = set()

    def handle(self, command: Command) -> None:
        """Act on one command; what waits runs as a task."""
        claim_id = command.claim_id
        if command.acquire is not None:
            self.acquire(command.acquire)
        elif command.session is not None:
            self.open_session(command.session)
        elif command.observe is not None:
            self.observe(command.observe)
        elif command.kind == "proclaim":
            claim = self.claims.get(claim_id)
            if claim is None:
                emit_bad_command(f"proclaim needs the id of a claim, not {claim_id!r}")
            else:
                _keep(self.proclaims, claim.proclaim(command.value))
        elif command.kind == "cancel":
            if claim_id in self.claims:
                self.claims[claim_id].task.cancel()
        else:
            _keep(self.releases, self.release(claim_id))

    def acquire(self, cmd: AcquireCmd) -> None:
        on = None
        if cmd.session is not None:
            on = self.sessions.get(cmd.session)
            if on is None:
                emit_bad_command(f"acquire on {cmd.session!r}, which is no open session")
                return
        self.claims[cmd.id] = Claim(cmd, on)

    def open_session(self, cmd: SessionCmd) -> None:
        if cmd.id in self.claims or cmd.id in self.observers or cmd.id in self.sessions:
            emit_bad_command(f"id {cmd.id!r} is already used")
            return
        self.sessions[cmd.id] = SessionEntry(cmd)

    def observe(self, cmd: ObserveCmd) -> None:
        if cmd.id in self.claims or cmd.id in self.observers or cmd.id in self.sessions:
            emit_bad_command(f"id {cmd.id!r} is already used")
            return
        self.observers[cmd.id] = Observer(cmd)

    async def release(self, claim_id: str) -> None:
        session = self.sessions.pop(claim_id, None)
        observer = self.observers.pop(claim_id, None)
        if session is not None:
            await session.close()
        elif observer is not None:
            await observer.stop()
        elif claim_id in self.claims:
            await self.claims[claim_id].release()
        emit("released", id=claim_id)

    async def close(self) -> None:
        """Quit: let the releases asked for end, then end everything (a
        proclaim still waiting ends with its claim)."""
        await asyncio.gather(*self.releases, return_exceptions=True)
        ending = [o.stop() for o in self.observers.values()]
        ending += [c.release() for c in self.claims.values()]
        await asyncio.gather(*ending, return_exceptions=True)
        closing = [s.close() for s in self.sessions.values()]
        await asyncio.gather(*closing, return_exceptions=True)
        await asyncio.gather(*self.proclaims, return_exceptions=True)


def _keep(tasks: set[asyncio.Future[Any]], work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` as a task held in ``tasks`` until it ends."""
    task = asyncio.ensure_future(work)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


async def run() -> int:
    emit("ready", client="python-asyncio", capabilities=CAPABILITIES)
    driver = Driver()
    lines = _stdin_lines(asyncio.get_running_loop())
    while (line := await lines.get()) is not None:
        command = read_command(line)
        if command is None:
            continue
        if command.kind == "quit":
            break
        driver.handle(command)
    await driver.close()
    return 0


def main() -> int:
    return asyncio.run(run())
