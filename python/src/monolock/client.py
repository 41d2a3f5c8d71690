"""The blocking client: :class:`Client`, :class:`Lock` and :func:`lock`.

Each lock claim owns one connection (:mod:`monolock._connection`), and every
connection of the process is served by one daemon thread, the *keeper*
(:mod:`monolock._reactor`): it connects, sends ACQUIRE, reads the server's
frames, sends the heartbeats, watches each validity deadline and closes, for
all claims at once. The caller's thread validates the call, runs the retry
plan and waits for what the keeper posts to it (queued, granted, failed,
closed); ``on_waiting`` runs there. So a held lock stays held while the
caller's thread is busy, and its loss is told on time even then. A loss the
keeper finds is told on a teller thread (the ``lost`` event, then the
callbacks), while the connection stays open; the connection closes when the
lock is released or the lease has passed. :meth:`Lock.release` asks the
keeper to half-close and waits until the server has closed too (bounded).
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import threading
import time
from collections.abc import Generator, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Callable, Protocol

from ._config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LEASE,
    DEFAULT_SERVER,
    Address,
    ClientConfig,
    Servers,
    check_timeout,
)
from ._connecting import connect_error
from ._connection import Connection, SockAddr
from ._failure import Failure
from ._lock import BaseLock, ClaimState, LostCallback, WaitingCallback
from ._mux_sync import Session, SessionWatch, open_session
from ._plan import Attempt, Step, prepare_acquisition, run_sync
from ._pool import SessionPool
from ._reactor import keeper
from ._serialized import SerializedSession
from ._sync_watch import Observations, Watch
from ._tls import TlsSessions
from ._watch import Observation
from .errors import AcquireCancelled, ConfigError, MonolockError

__all__ = [
    "Client",
    "Lock",
    "Observations",
    "Session",
    "SessionPool",
    "SessionWatch",
    "Term",
    "Watch",
    "lock",
]


class LockConn(Protocol):
    """What a sync lock asks of what carries it: its own connection, or
    its stream's session (:mod:`monolock._mux_sync`)."""

    def let_go(self) -> None: ...
    def proclaim(self, value: bytes) -> int: ...
    def wait_proclaimed(self, settled: Callable[[], bool]) -> None: ...


class Lock(BaseLock[threading.Event]):
    """A held lock. Returned by :meth:`Client.acquire`; release it with
    :meth:`release` or a ``with`` block.

    Poll :attr:`held`, :attr:`is_lost` or :meth:`check`: they say lost from
    the :attr:`valid_until` instant on. ``lost`` is a
    :class:`threading.Event` set when the loss is told (``lock.lost.wait()``),
    and :attr:`lost_error` says why. After a loss the connection stays open,
    without heartbeats, until you release the lock or the lease has passed
    since the last acknowledged heartbeat, so the server cannot hand the
    lock on while you are still being told. The lock is never re-acquired
    behind your back.
    """

    def __init__(self, conn: LockConn, session: ClaimState) -> None:
        super().__init__(session, threading.Event())
        self._conn = conn

    def release(self) -> None:
        """Release the lock by closing its connection; the server hands it to
        the next waiter at once. A valid lock's release returns once the
        server has closed its end too (at most ``min(0.8 x lease, 1 s)``), so
        the lock is free on the server by then; after a loss it closes at
        once. Idempotent."""
        self._mark_released()  # no loss is decided from now on
        self._conn.let_go()

    def proclaim(self, value: str | bytes) -> None:
        """Replace the lock's value (``bytes``, or a ``str`` sent as UTF-8, up
        to 1024 bytes; empty clears it), keeping its token and, while it
        waits, its place. Returns once the server has acknowledged it: its
        admin listing and :attr:`value` show the new value by then, and its
        reply refreshes the lease as a heartbeat's does. Raises
        :class:`~monolock.errors.ValueTooLong` for a longer value, the
        lock's :class:`~monolock.errors.LockLost` if it is lost first (at
        the latest at :attr:`valid_until`) and
        :class:`~monolock.errors.LockReleased` after :meth:`release`. A lock
        claimed without a value cannot proclaim (its server may not know
        values): :class:`~monolock.errors.MonolockError` before anything is
        sent. Safe from any thread; concurrent calls send the newest value
        not sent yet."""
        number = self._conn.proclaim(self._proclaim_value(value))
        self._conn.wait_proclaimed(lambda: self._proclaim_settled(number))

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class Term(Lock):
    """One leadership of a name (:meth:`Client.campaign`): the lock the
    candidate was granted. Fence every write with :attr:`token`, and stop
    leading when :attr:`lost` is set; :meth:`proclaim` announces a new
    value to the followers."""

    def resign(self) -> None:
        """End the term: the next candidate is elected at once."""
        self.release()


class _Connection(Connection[Lock]):
    """A claim's connection, whose grant is a :class:`Lock`."""

    def _make_lock(self) -> Lock:
        return Lock(self, self.session)


class _TermConnection(_Connection):
    """A candidate's connection, whose grant is a :class:`Term`."""

    def _make_lock(self) -> Lock:
        return Term(self, self.session)


def check_candidate_value(name: str | bytes, value: str | bytes) -> None:
    """Refuse a campaign without a value: followers reach the leader by it."""
    if not value:
        shown = name.decode("utf-8", "replace") if isinstance(name, bytes) else name
        raise ConfigError(
            f"monolock: campaign for {json.dumps(shown, ensure_ascii=False)}: a leader's value "
            "must not be empty (followers reach the leader by it)"
        )


_HAS_POLL = hasattr(select, "poll")
"""Whether the keeper connects (non-blocking); elsewhere (Windows, where a
refused connect never shows as writable) the caller connects."""

_numeric: dict[tuple[str, int], list[SockAddr] | None] = {}
"""Addresses of IP-address hosts, converted once; None for host names."""


def _addresses(address: Address) -> list[SockAddr]:
    """(family, proto, sockaddr) of each address ``address`` stands for. An
    IP address is converted once; a host name is resolved every time, as
    :func:`socket.create_connection` does (in the caller's thread: the
    keeper never blocks)."""
    key = (address.host, address.port)
    found = _numeric.get(key)
    if found is not None:
        return list(found)
    if key not in _numeric:
        try:
            infos = socket.getaddrinfo(
                address.host, address.port, 0, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST
            )
        except socket.gaierror:
            infos = None
        found = None if infos is None else [(f, p, a) for f, _, p, _, a in infos]
        if len(_numeric) < 1024:
            _numeric[key] = found
        if found is not None:
            return list(found)
    infos = socket.getaddrinfo(address.host, address.port, 0, socket.SOCK_STREAM)
    return [(f, p, a) for f, _, p, _, a in infos]


def _open_socket(
    config: ClientConfig,
    address: Address,
    timeout: float | None,
    sessions: TlsSessions | None = None,
) -> socket.socket:
    """Connect (and run the TLS handshake) within ``timeout`` seconds, in
    the caller's thread; returns the socket non-blocking, for the keeper.
    With ``sessions``, the handshake resumes the last TLS session of
    ``address`` there is."""
    try:
        sock = socket.create_connection((address.host, address.port), timeout=timeout)
    except OSError as exc:
        raise connect_error(address, exc) from exc
    tls = config.ssl_context
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None and sessions is not None:
            sock = sessions.wrap(tls, sock, address, config.tls_hostname(address))
        elif tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=config.tls_hostname(address))
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise connect_error(address, exc, handshake=tls is not None) from exc
    return sock


class Client(ClientConfig):
    """A blocking monolock client.

    ``servers`` is one address (``"host:port"``, ``"[::1]:7117"``, a bare
    host for port 7117, ``(host, port)``) or a list tried in order; an
    address that cannot be parsed raises
    :class:`~monolock.errors.ConfigError` here. ``lease`` (seconds, a whole
    number of milliseconds from 0.001 to 4294967.295) sets how fast the
    server notices a dead holder; heartbeats go out every quarter lease and
    a lock counts as lost 0.8 x lease after the last acknowledged one. Any
    other lease raises :class:`~monolock.errors.InvalidLease` here; it is
    never rounded. ``connect_timeout`` bounds each connection attempt. Pass
    an :class:`ssl.SSLContext` for TLS; the certificate is checked against
    ``server_hostname`` or the address's host. The client holds no
    connection itself: each claim has its own, so one client may be shared
    by threads. Acquisitions log on the ``monolock`` logger: retries at
    WARNING, progress at DEBUG.
    """

    def acquire(
        self,
        name: str | bytes,
        *,
        shared: bool = False,
        limit: int | None = None,
        value: str | bytes | None = None,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> Lock:
        """Block until the lock ``name`` is granted and return it.

        The claim is exclusive unless ``shared`` is true: then it holds the
        lock together with any other shared claims, never while an exclusive
        claim holds it. ``limit`` (1 to 65535, implies ``shared``) makes it a
        permit of a semaphore: at most ``limit`` shared holders at once, and
        every claimant of the name must state the same ``limit``
        (:class:`~monolock.errors.LimitMismatch`); another number raises
        :class:`~monolock.errors.InvalidMode` before anything is sent. Claims
        are granted in arrival order, so a shared claim queued behind a
        waiting exclusive one waits for it. Each holder gets its own fencing
        token. A server that speaks protocol version 1 only refuses shared
        claims with :class:`~monolock.errors.SharedUnsupported`.

        ``value`` (``bytes``, or a ``str`` sent as UTF-8, up to 1024 bytes)
        is what the server shows of this claim while it waits and holds: who
        holds the lock and how to reach it (an address, a URL, a small JSON
        object). An empty value is no value. A longer one raises
        :class:`~monolock.errors.ValueTooLong` before anything is sent. A
        claim with a value travels as protocol version 3, which an older
        server refuses with :class:`~monolock.errors.ValueUnsupported`.

        ``timeout`` (seconds, ``None``: no limit) bounds the whole wait,
        re-queues included: :class:`~monolock.errors.AcquireTimeout`. Setting
        ``cancel`` gives up (:class:`~monolock.errors.AcquireCancelled`) and
        leaves the queue at once. ``on_waiting(name)`` runs each time the
        server queues the claim, ``on_lost(error)`` if the lock is later lost.
        Temporary errors and broken connections while waiting lead to a new
        place in the queue after a backoff; terminal errors are raised. Invalid
        names raise before anything is sent.
        """
        return self._acquire(
            name, shared, limit, value, timeout, cancel, on_waiting, on_lost, try_only=False
        )

    def try_acquire(
        self,
        name: str | bytes,
        *,
        shared: bool = False,
        limit: int | None = None,
        value: str | bytes | None = None,
        on_lost: LostCallback | None = None,
    ) -> Lock:
        """Take the lock ``name`` if it is free right now (for a shared
        claim: if it can be shared now), else raise
        :class:`~monolock.errors.LockBusy`. ``shared``, ``limit`` and
        ``value`` as for :meth:`acquire`. One pass over the servers without sleeps or
        re-queues: the last error is raised."""
        return self._acquire(name, shared, limit, value, None, None, None, on_lost, try_only=True)

    @contextmanager
    def lock(
        self,
        name: str | bytes,
        *,
        shared: bool = False,
        limit: int | None = None,
        value: str | bytes | None = None,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> Iterator[Lock]:
        """``with client.lock(name) as lock:`` acquires like :meth:`acquire`
        and releases when the block ends; ``client.lock(name, shared=True)``
        holds it shared."""
        held = self.acquire(
            name,
            shared=shared,
            limit=limit,
            value=value,
            timeout=timeout,
            cancel=cancel,
            on_waiting=on_waiting,
            on_lost=on_lost,
        )
        try:
            yield held
        finally:
            held.release()

    def semaphore(
        self,
        name: str | bytes,
        limit: int,
        *,
        value: str | bytes | None = None,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> AbstractContextManager[Lock]:
        """``with client.semaphore(name, 4) as permit:`` holds one of the 4
        permits of the semaphore ``name`` for the block: the same as
        ``client.lock(name, limit=4)``."""
        return self.lock(
            name,
            limit=limit,
            value=value,
            timeout=timeout,
            cancel=cancel,
            on_waiting=on_waiting,
            on_lost=on_lost,
        )

    def _acquire(
        self,
        name: str | bytes,
        shared: bool,
        limit: int | None,
        value: str | bytes | None,
        timeout: float | None,
        cancel: threading.Event | None,
        on_waiting: WaitingCallback | None,
        on_lost: LostCallback | None,
        *,
        try_only: bool,
        connection: type[_Connection] = _Connection,
    ) -> Lock:
        plan: Generator[Step, Lock | Failure | None, Lock]
        claim, plan = prepare_acquisition(
            self, name, timeout, try_only=try_only, shared=shared, limit=limit, value=value
        )

        def attempt(step: Attempt) -> Lock | Failure:
            if cancel is not None and cancel.is_set():
                raise AcquireCancelled()
            reactor = keeper()
            session = claim.session(
                self.lease_ms, try_only=try_only, server=str(step.address), core=SerializedSession
            )
            conn = connection(reactor, session, on_waiting, on_lost)
            if self.ssl_context is None and _HAS_POLL:
                try:
                    candidates = _addresses(step.address)
                except OSError as exc:
                    raise connect_error(step.address, exc) from exc
                reactor.submit(conn.connect, step.address, candidates, step.connect_timeout)
            else:
                sessions = self._tls_sessions
                sock = _open_socket(self, step.address, step.connect_timeout, sessions)
                reactor.submit(conn.adopt, sock, step.address, sessions)
            return conn.acquire(step.deadline, cancel)

        def sleep(seconds: float) -> None:
            if cancel is None:
                time.sleep(seconds)
            elif cancel.wait(seconds):
                raise AcquireCancelled()

        return run_sync(plan, attempt, sleep)

    # -- sessions (protocol version 4) -----------------------------------------

    def session(self) -> Session:
        """Open a session: one connection that carries many claims
        (``with client.session() as session: session.acquire(name)``), on
        the first server of the list that answers. Its claims share the
        client's lease and the connection's fate (see
        :class:`~monolock.Session`). Raises the last server's error when none
        opened one; a server older than protocol version 4 raises
        :class:`~monolock.errors.UnsupportedVersion`."""
        last: MonolockError | None = None
        for address in self.servers:
            try:
                sock = _open_socket(self, address, self.connect_timeout)
                return open_session(keeper(), sock, self.lease_ms, str(address))
            except MonolockError as exc:
                last = exc
        assert last is not None
        raise last

    # -- leader election ----------------------------------------------------

    def watch(self, name: str | bytes, *, timeout: float | None = None) -> Watch:
        """Follow the lock ``name`` (protocol version 3): returns once its
        first picture is vouched for, or raises the error that keeps the
        server from answering (the ACL, a server that does not know version
        3), or :class:`~monolock.errors.WatchTimeout` after ``timeout``
        seconds. The watch then runs, reconnecting by itself, until you
        close it (a ``with`` block does)."""
        check_timeout(timeout)
        watch = Watch(self, name, _open_socket)
        watch._wait_until_known(timeout)
        return watch

    def campaign(
        self,
        name: str | bytes,
        value: str | bytes,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        on_waiting: WaitingCallback | None = None,
        on_lost: LostCallback | None = None,
    ) -> Term:
        """Wait until this client is elected leader of ``name``, with
        ``value`` (how followers reach it: an address, a URL; it must not be
        empty), and return the :class:`Term`. Candidates are elected in the
        order they campaigned; the rest as for :meth:`acquire`."""
        check_candidate_value(name, value)
        term = self._acquire(
            name, False, None, value, timeout, cancel, on_waiting, on_lost,
            try_only=False, connection=_TermConnection,
        )  # fmt: skip
        assert isinstance(term, Term)
        return term

    def observe(self, name: str | bytes, *, timeout: float | None = None) -> Observations:
        """Follow the leadership of ``name``: iterate for an
        :class:`~monolock.Observation` whenever it changes (a new leader, a
        new value, no leader, a hold, unknown), the first as soon as it is
        known. ``timeout`` bounds the wait for that first one, as for
        :meth:`watch`; close it (or use a ``with`` block) to stop."""
        return Observations(self.watch(name, timeout=timeout))

    def leader(self, name: str | bytes, *, timeout: float | None = None) -> Observation:
        """Who leads ``name`` now: one watch, its first picture, closed."""
        with self.watch(name, timeout=timeout) as watch:
            return watch.leader()


def lock(
    name: str | bytes,
    servers: Servers = DEFAULT_SERVER,
    *,
    shared: bool = False,
    limit: int | None = None,
    value: str | bytes | None = None,
    lease: float = DEFAULT_LEASE,
    timeout: float | None = None,
    connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
) -> AbstractContextManager[Lock]:
    """One-liner: ``with monolock.lock("jobs/nightly") as lock:`` holds the
    lock for the block. Arguments as for :class:`Client` and
    :meth:`Client.acquire`."""
    client = Client(
        servers,
        lease=lease,
        connect_timeout=connect_timeout,
        ssl_context=ssl_context,
        server_hostname=server_hostname,
    )
    return client.lock(name, shared=shared, limit=limit, value=value, timeout=timeout)
