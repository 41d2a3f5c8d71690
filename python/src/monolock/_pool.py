"""Opt-in pools of sessions for callers that take many short locks:
:class:`SessionPool` (blocking) and :class:`AsyncSessionPool` (asyncio).
One picking rule for both: the live session with the most room, opening a
new one while the pool has fewer than ``size``; a dead session is dropped
and replaced at the next claim, and one that has used every stream id is
retired: closed once its last claim has ended."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .errors import ConfigError, TooManyStreams

if TYPE_CHECKING:
    from ._mux_aio import AsyncSession
    from ._mux_sync import Session
    from .aio import AsyncClient, AsyncLock
    from .client import Client, Lock


class _Roomy(Protocol):
    @property
    def alive(self) -> bool: ...
    @property
    def open_streams(self) -> int: ...
    @property
    def max_streams(self) -> int: ...
    @property
    def ids_left(self) -> int: ...


S = TypeVar("S", bound=_Roomy)


def _check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(
            f"monolock: a session pool's size must be a whole number >= 1, got {size!r}"
        )
    return size


def retiring(session: _Roomy) -> bool:
    """Whether a live session has used every stream id: it takes no new
    claim and leaves the pool's count (its claims live on)."""
    return session.ids_left == 0


def sort_out(sessions: Sequence[S]) -> tuple[list[S], list[S]]:
    """The sessions to keep (live, and not retiring with no claim left) and
    the spent ones: retiring sessions whose last claim has ended, to be
    closed. Dead sessions are in neither."""
    keep: list[S] = []
    spent: list[S] = []
    for s in sessions:
        if s.alive:
            (spent if retiring(s) and not s.open_streams else keep).append(s)
    return keep, spent


def pick(sessions: Sequence[S], size: int) -> S | None:
    """The live session with the most room, or ``None`` when a new one
    should be opened; raises :class:`TooManyStreams` when every session is
    full and the pool is too. Sessions without ids left do not count."""
    live = [s for s in sessions if s.alive and not retiring(s)]
    roomy = [s for s in live if s.open_streams < s.max_streams]
    if roomy:
        return max(roomy, key=lambda s: s.max_streams - s.open_streams)
    if len(live) < size:
        return None
    raise TooManyStreams(
        f"every session of the pool ({size}) has its {live[0].max_streams} streams open",
        from_server=False,
    )


class SessionPool:
    """A few sessions of one :class:`~monolock.Client`, shared by many short
    claims: each claim goes to the live session with the most room (below
    its ``max_streams``), a new session is opened while fewer than ``size``
    are live, and a dead session is replaced at the next claim.

    The trade-off: claims on one session share its fate. One lost
    connection (a silent link, a server's ERROR, the session's deadline)
    loses every claim it carries at once, where single claims on their own
    connections would fail one by one; in return a claim costs one frame on
    an open connection instead of a connection of its own. Use it for many
    short locks; take a lock whose loss must stay alone with
    :meth:`monolock.Client.acquire`. Nothing is retried on another session:
    a claim refused or lost raises or is told as in a session. A session
    that has used every stream id (they are never reused) takes no new
    claim and leaves the pool's count at once; it is closed once its last
    claim has ended.
    """

    def __init__(self, client: Client, size: int = 4) -> None:
        self._client = client
        self._size = _check_size(size)
        self._sessions: list[Session] = []
        self._mutex = threading.Lock()
        self._closed = False

    def session(self) -> Session:
        """The session the next claim goes to (opening one if needed)."""
        spent: list[Session] = []
        try:
            with self._mutex:
                if self._closed:
                    raise ConfigError("monolock: the session pool is closed")
                self._sessions, spent = sort_out(self._sessions)
                chosen = pick(self._sessions, self._size)
                if chosen is None:
                    chosen = self._client.session()
                    self._sessions.append(chosen)
                return chosen
        finally:
            for session in spent:  # out of the mutex: a close may wait for its FIN
                session.close()

    def acquire(self, name: str | bytes, **kwargs: Any) -> Lock:
        """:meth:`monolock.Session.acquire` on the pool's pick."""
        return self.session().acquire(name, **kwargs)

    def try_acquire(self, name: str | bytes, **kwargs: Any) -> Lock:
        """:meth:`monolock.Session.try_acquire` on the pool's pick."""
        return self.session().try_acquire(name, **kwargs)

    @contextmanager
    def lock(self, name: str | bytes, **kwargs: Any) -> Iterator[Lock]:
        """``with pool.lock(name) as lock:`` acquires and releases."""
        held = self.acquire(name, **kwargs)
        try:
            yield held
        finally:
            held.release()

    @property
    def sessions(self) -> list[Session]:
        """The pool's sessions, live or not yet replaced."""
        return list(self._sessions)

    def close(self) -> None:
        """Close every session (releasing their claims)."""
        with self._mutex:
            self._closed = True
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()

    def __enter__(self) -> SessionPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncSessionPool:
    """The asyncio :class:`SessionPool`, of an
    :class:`~monolock.aio.AsyncClient`; the same rules and trade-off."""

    def __init__(self, client: AsyncClient, size: int = 4) -> None:
        self._client = client
        self._size = _check_size(size)
        self._sessions: list[AsyncSession] = []
        self._opening: asyncio.Lock | None = None
        self._closed = False

    async def session(self) -> AsyncSession:
        """The session the next claim goes to (opening one if needed)."""
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:  # one opening at a time: no burst of sessions
            if self._closed:
                raise ConfigError("monolock: the session pool is closed")
            self._sessions, spent = sort_out(self._sessions)
            for session in spent:
                await session.close()
            chosen = pick(self._sessions, self._size)
            if chosen is None:
                chosen = await self._client.session()
                self._sessions.append(chosen)
            return chosen

    async def acquire(self, name: str | bytes, **kwargs: Any) -> AsyncLock:
        """:meth:`monolock.aio.AsyncSession.acquire` on the pool's pick."""
        return await (await self.session()).acquire(name, **kwargs)

    async def try_acquire(self, name: str | bytes, **kwargs: Any) -> AsyncLock:
        """:meth:`monolock.aio.AsyncSession.try_acquire` on the pool's pick."""
        return await (await self.session()).try_acquire(name, **kwargs)

    @asynccontextmanager
    async def lock(self, name: str | bytes, **kwargs: Any) -> AsyncIterator[AsyncLock]:
        """``async with pool.lock(name) as lock:`` acquires and releases."""
        held = await self.acquire(name, **kwargs)
        try:
            yield held
        finally:
            await held.release()

    @property
    def sessions(self) -> list[AsyncSession]:
        """The pool's sessions, live or not yet replaced."""
        return list(self._sessions)

    async def close(self) -> None:
        """Close every session (releasing their claims)."""
        self._closed = True
        sessions, self._sessions = self._sessions, []
        for session in sessions:
            await session.close()

    async def __aenter__(self) -> AsyncSessionPool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
