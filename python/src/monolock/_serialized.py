"""The sync client's session: the sans-IO core with one lock around each
call, since the keeper thread and the application's threads (a lock's
polled checks, its release) both call it. The core itself takes no lock
(:mod:`monolock._session`); the asyncio client, which calls it from its
event loop only, uses it as it is."""

from __future__ import annotations

import threading

from ._session import Session, SessionEvent
from .errors import LockLost


class SerializedSession(Session):
    """A :class:`Session` whose every input and derived reading holds one
    lock, so that calls from several threads come one at a time."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._calls = threading.Lock()

    def start(self, now: int) -> list[SessionEvent]:
        with self._calls:
            return super().start(now)

    def receive_data(self, data: bytes, now: int) -> list[SessionEvent]:
        with self._calls:
            return super().receive_data(data, now)

    def tick(self, now: int) -> list[SessionEvent]:
        with self._calls:
            return super().tick(now)

    def connection_lost(self, exc: BaseException | None = None) -> list[SessionEvent]:
        with self._calls:
            return super().connection_lost(exc)

    def release(self) -> None:
        with self._calls:
            super().release()

    def poll(self, now: int) -> LockLost | None:
        with self._calls:
            return super().poll(now)

    def proclaim(self, value: bytes) -> int:
        with self._calls:
            return super().proclaim(value)

    def next_wakeup(self) -> int | None:
        with self._calls:
            return super().next_wakeup()
