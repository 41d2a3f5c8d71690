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

from ._config import DEFAULT_LEASE, DEFAULT_PORT, DEFAULT_SERVER, Address
from ._lock import LostCallback, WaitingCallback
from .aio import AsyncClient, AsyncLock
from .client import Client, Lock, lock
from .errors import (
    AcquireCancelled,
    AcquireTimeout,
    AdminClosed,
    ConfigError,
    ConnectError,
    ConnectionClosed,
    DuplicateAcquire,
    EmptyName,
    ExpectedAcquire,
    HeartbeatTimeout,
    InvalidLease,
    LockBusy,
    LockLost,
    LockReleased,
    MonolockError,
    NameNotUTF8,
    NameTooLong,
    NotAuthorized,
    NotMonolock,
    ProtocolViolation,
    ServerEnded,
    ServerError,
    ShuttingDown,
    UnknownMessage,
    UnsupportedVersion,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_PORT",
    "DEFAULT_SERVER",
    "AcquireCancelled",
    "AcquireTimeout",
    "Address",
    "AdminClosed",
    "AsyncClient",
    "AsyncLock",
    "Client",
    "ConfigError",
    "ConnectError",
    "ConnectionClosed",
    "DuplicateAcquire",
    "EmptyName",
    "ExpectedAcquire",
    "HeartbeatTimeout",
    "InvalidLease",
    "Lock",
    "LockBusy",
    "LockLost",
    "LockReleased",
    "LostCallback",
    "MonolockError",
    "NameNotUTF8",
    "NameTooLong",
    "NotAuthorized",
    "NotMonolock",
    "ProtocolViolation",
    "ServerEnded",
    "ServerError",
    "ShuttingDown",
    "UnknownMessage",
    "UnsupportedVersion",
    "WaitingCallback",
    "__version__",
    "lock",
]
