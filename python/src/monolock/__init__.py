"""monolock: a client for the monolock lock service.

Blocking::

    import monolock

    client = monolock.Client("127.0.0.1:7117", lease=10)
    with client.lock("jobs/nightly-report") as lock:
        run_report(fencing_token=lock.token)

asyncio::

    from monolock.aio import AsyncClient

    async with AsyncClient("127.0.0.1:7117").lock("jobs/x") as lock:
        ...

Every exception is a :class:`MonolockError`; see :mod:`monolock.errors`.
"""

from __future__ import annotations

from . import _errors_gen
from ._config import DEFAULT_LEASE, DEFAULT_PORT, DEFAULT_SERVER, Address
from ._errors_gen import *  # noqa: F403 (the class of each code, see monolock.errors)
from ._lock import LostCallback, WaitingCallback
from ._watch import Holder, LeaderState, LockState, Observation, Waiter
from .aio import (
    AsyncClient,
    AsyncLock,
    AsyncObservations,
    AsyncSession,
    AsyncSessionPool,
    AsyncSessionWatch,
    AsyncTerm,
    AsyncWatch,
)
from .client import (
    Client,
    Lock,
    Observations,
    Session,
    SessionPool,
    SessionWatch,
    Term,
    Watch,
    lock,
)
from .errors import (
    AcquireCancelled,
    AcquireTimeout,
    ConfigError,
    ConnectError,
    ConnectionClosed,
    HeartbeatTimeout,
    LockBusy,
    LockLost,
    LockReleased,
    MonolockError,
    NotMonolock,
    ProtocolViolation,
    ServerEnded,
    ServerError,
    SharedUnsupported,
    ValueUnsupported,
    WatchTimeout,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_PORT",
    "DEFAULT_SERVER",
    "AcquireCancelled",
    "AcquireTimeout",
    "Address",
    "AsyncClient",
    "AsyncLock",
    "AsyncObservations",
    "AsyncSession",
    "AsyncSessionPool",
    "AsyncSessionWatch",
    "AsyncTerm",
    "AsyncWatch",
    "Client",
    "ConfigError",
    "ConnectError",
    "ConnectionClosed",
    "HeartbeatTimeout",
    "Holder",
    "LeaderState",
    "Lock",
    "LockBusy",
    "LockLost",
    "LockReleased",
    "LockState",
    "LostCallback",
    "MonolockError",
    "NotMonolock",
    "Observation",
    "Observations",
    "ProtocolViolation",
    "ServerEnded",
    "ServerError",
    "Session",
    "SessionPool",
    "SessionWatch",
    "SharedUnsupported",
    "Term",
    "ValueUnsupported",
    "Waiter",
    "WaitingCallback",
    "Watch",
    "WatchTimeout",
    "__version__",
    "lock",
]
__all__ += _errors_gen.__all__
