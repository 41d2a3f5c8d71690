"""The driver for the blocking client: each claim's acquire, each session's
open and close, each proclaim and each release runs as a job on a pool of threads that grows when no
thread is idle (an acquire may block until a later command's release, so a
job never waits for a thread); each observation has a thread of its own.
The command loop itself never blocks: it only parses and hands out jobs,
so a busy driver does not serialise its claims."""

from __future__ import annotations

import queue
import sys
import threading
from typing import Any, Callable

import monolock
from monolock import errors

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
    emit_error,
    emit_proclaim_failure,
    emit_waiting,
    read_command,
)


class Workers:
    """Threads for blocking jobs, reused: handing a job to an idle thread
    costs one wake-up, where starting a thread makes the command loop wait
    until the new thread runs."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._mutex = threading.Lock()
        self._all_done = threading.Condition(self._mutex)
        self._idle = 0
        self._pending = 0

    def submit(self, job: Callable[[], None]) -> None:
        with self._mutex:
            self._pending += 1
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1  # that thread (or another idle one) takes it
        self._jobs.put(job)
        if spawn:
            threading.Thread(target=self._work, daemon=True).start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except BaseException as exc:  # a job must not take the thread down
                emit("driver_error", message=f"driver job failed: {exc!r}")
            with self._mutex:
                self._idle += 1
                self._pending -= 1
                if self._pending == 0:
                    self._all_done.notify_all()

    def join(self) -> None:
        """Wait until every job handed out so far has ended."""
        with self._mutex:
            while self._pending:
                self._all_done.wait()


# One Client per setting: parsing the same addresses again for every claim
# is pointless work (TLS claims build their own, with their own context).
_clients: dict[tuple[Any, ...], monolock.Client] = {}


def _client(cmd: AcquireCmd | ObserveCmd | SessionCmd) -> monolock.Client:
    if cmd.tls is not None:
        return monolock.Client(cmd.servers, **cmd.client_kwargs())
    key = (tuple(cmd.servers), cmd.lease_ms, cmd.connect_timeout_ms)
    client = _clients.get(key)
    if client is None:
        client = monolock.Client(cmd.servers, **cmd.client_kwargs())
        if len(_clients) < 256:
            _clients[key] = client
    return client


class SessionEntry:
    """One session id: its session once open. Opening and closing are jobs;
    the claims put on it wait for the open to end."""

    def __init__(self, cmd: SessionCmd) -> None:
        self.cmd = cmd
        self.session: monolock.Session | None = None
        self.settled = threading.Event()
        """Set when the open has ended (and its event is out)."""

    def open(self) -> None:
        try:
            session = _client(self.cmd).session()
        except errors.MonolockError as exc:
            emit_error(self.cmd.id, exc)
        else:
            self.session = session
            emit("opened", id=self.cmd.id)
        finally:
            self.settled.set()

    def close(self) -> None:
        """Close the session once open: every claim it still holds is
        released, none told lost."""
        self.settled.wait()
        if self.session is not None:
            self.session.close()


class Claim:
    """One acquire id: its acquisition and, later, its lock. Releases asked
    for while the acquisition runs are carried out when it ends. A claim
    with ``on`` goes on that session instead of a connection of its own."""

    def __init__(
        self,
        cmd: AcquireCmd,
        workers: Workers,
        claims: dict[str, Claim],
        on: SessionEntry | None = None,
    ) -> None:
        self.cmd = cmd
        self.workers = workers
        self.claims = claims
        self.on = on
        self.cancel = threading.Event()
        self.lock: monolock.Lock | None = None
        self._mutex = threading.Lock()
        self._acquiring = True
        self._releases = 0
        """Release commands waiting for the acquisition to end."""
        self._settled = threading.Event()
        """Set when the acquisition has ended and its event is out."""

    def run(self) -> None:
        cmd = self.cmd
        try:
            opener: monolock.Client | monolock.Session
            if self.on is not None:
                self.on.settled.wait()
                if self.on.session is None:
                    raise errors.ConnectionClosed("monolock: the session did not open")
                opener = self.on.session
            else:
                opener = _client(cmd)
            if cmd.try_only:
                lock = opener.try_acquire(cmd.name, **cmd.claim_kwargs())
            else:
                lock = opener.acquire(
                    cmd.name,
                    **cmd.claim_kwargs(),
                    timeout=cmd.timeout,
                    cancel=self.cancel,
                    on_waiting=lambda name: emit_waiting(cmd.id),
                )
        except errors.MonolockError as exc:
            emit_error(cmd.id, exc)
        else:
            self.lock = lock
            emit_acquired(cmd.id, lock)
        finally:
            with self._mutex:
                self._acquiring = False
                releases, self._releases = self._releases, 0
            self._settled.set()
        for _ in range(releases):
            self.release_now()

    def release(self) -> None:
        """The release command: cancel a pending acquisition, release the
        lock, print ``released``; without blocking the command loop."""
        self.cancel.set()
        with self._mutex:
            if self._acquiring:
                self._releases += 1  # run() releases when it ends
                return
        self.workers.submit(self.release_now)

    def proclaim(self, value: str) -> None:
        """The proclaim command, as a job: once the acquisition has ended,
        replace the lock's value and print ``proclaimed`` when the server
        has it. A claim that was never granted has said so already."""
        self._settled.wait()
        lock = self.lock
        if lock is None:
            return
        try:
            lock.proclaim(value)
        except errors.MonolockError as exc:
            emit_proclaim_failure(self.cmd.id, exc)
        else:
            emit("proclaimed", id=self.cmd.id)

    def release_now(self) -> None:
        if self.lock is not None:
            self.lock.release()
        # Released for good: a later release of this id only prints
        # "released", and a long run keeps no garbage for the collector.
        if self.claims.get(self.cmd.id) is self:
            self.claims.pop(self.cmd.id, None)
        emit("released", id=self.cmd.id)


class Observer:
    """One observe id: a thread of its own follows the name and prints
    observed events until release or quit. Not a pool job: observe()
    blocks until the first picture is known, and a quit must not wait for
    a server that never answers."""

    def __init__(self, cmd: ObserveCmd) -> None:
        self.cmd = cmd
        self._events = ObservedEvents(cmd.id)
        self._mutex = threading.Lock()
        """Held while an event is printed: after stop(), nothing is."""
        self._stopped = False
        self._observations: monolock.Observations | None = None
        threading.Thread(target=self._run, name=f"observe {cmd.id}", daemon=True).start()

    def _run(self) -> None:
        try:
            observations = _client(self.cmd).observe(self.cmd.name)
        except errors.MonolockError as exc:
            self._emit_error(exc)
            return
        with self._mutex:
            stopped = self._stopped
            self._observations = observations
        if stopped:  # released while the first picture was on its way
            observations.close()
            return
        try:
            for seen in observations:
                with self._mutex:
                    if self._stopped:
                        return
                    self._events.emit(seen)
        except errors.MonolockError as exc:  # the watch ended on a terminal error
            self._emit_error(exc)

    def _emit_error(self, exc: errors.MonolockError) -> None:
        with self._mutex:
            if not self._stopped:
                emit_error(self.cmd.id, exc)

    def stop(self) -> None:
        """End the observation; no event of it is printed after this."""
        with self._mutex:
            self._stopped = True
            observations = self._observations
        if observations is not None:
            observations.close()


class Driver:
    """The command loop's state: the claims and observations by id."""

    def __init__(self) -> None:
        self.workers = Workers()
        self.claims: dict[str, Claim] = {}
        self.observers: dict[str, Observer] = {}
        self.sessions: dict[str, SessionEntry] = {}

    def handle(self, command: Command) -> None:
        """Act on one command without blocking: blocking work is a job."""
        claim_id = command.claim_id
        if command.acquire is not None:
            self.acquire(command.acquire)
        elif command.session is not None:
            self.open_session(command.session)
        elif command.observe is not None:
            self.observe(command.observe)
        elif command.kind == "proclaim":
            self.proclaim(claim_id, command.value)
        elif command.kind == "cancel":
            if claim_id in self.claims:
                self.claims[claim_id].cancel.set()
        else:
            self.release(claim_id)

    def acquire(self, cmd: AcquireCmd) -> None:
        on = None
        if cmd.session is not None:
            on = self.sessions.get(cmd.session)
            if on is None:
                emit_bad_command(f"acquire on {cmd.session!r}, which is no open session")
                return
        claim = Claim(cmd, self.workers, self.claims, on)
        self.claims[cmd.id] = claim
        self.workers.submit(claim.run)

    def open_session(self, cmd: SessionCmd) -> None:
        if cmd.id in self.claims or cmd.id in self.observers or cmd.id in self.sessions:
            emit_bad_command(f"id {cmd.id!r} is already used")
            return
        entry = SessionEntry(cmd)
        self.sessions[cmd.id] = entry
        self.workers.submit(entry.open)

    def observe(self, cmd: ObserveCmd) -> None:
        if cmd.id in self.claims or cmd.id in self.observers or cmd.id in self.sessions:
            emit_bad_command(f"id {cmd.id!r} is already used")
            return
        self.observers[cmd.id] = Observer(cmd)

    def proclaim(self, claim_id: str, value: str) -> None:
        claim = self.claims.get(claim_id)
        if claim is None:
            emit_bad_command(f"proclaim needs the id of a claim, not {claim_id!r}")
            return
        self.workers.submit(lambda: claim.proclaim(value))

    def release(self, claim_id: str) -> None:
        """Off the command loop: a release waits for the server's close."""
        session = self.sessions.pop(claim_id, None)
        if session is not None:

            def close() -> None:
                session.close()
                emit("released", id=claim_id)

            self.workers.submit(close)
            return
        observer = self.observers.pop(claim_id, None)
        if observer is not None:

            def stop() -> None:
                observer.stop()
                emit("released", id=claim_id)

            self.workers.submit(stop)
            return
        known = self.claims.get(claim_id)
        if known is not None:
            known.release()
        else:
            emit("released", id=claim_id)

    def close(self) -> None:
        """Quit: release everything, and let every job end before the
        interpreter does (a daemon thread caught in a print would spoil the
        exit)."""
        for observer in self.observers.values():
            observer.stop()
        for claim in list(self.claims.values()):
            claim.cancel.set()
        self.workers.join()  # the acquisitions end (cancelled), so do the releases
        for claim in list(self.claims.values()):
            if claim.lock is not None and claim.on is None:
                claim.lock.release()
        for session in self.sessions.values():
            self.workers.submit(session.close)  # its claims go with it
        self.workers.join()


def main() -> int:
    emit("ready", client="python-sync", capabilities=CAPABILITIES)
    driver = Driver()
    for line in sys.stdin:
        command = read_command(line)
        if command is None:
            continue
        if command.kind == "quit":
            break
        driver.handle(command)
    driver.close()
    return 0
