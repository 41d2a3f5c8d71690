"""What an attempt that ended without a grant hands back to the retry
policy: in a module of its own, so that the connection and the lock, which
make it, do not import the policy that reads it."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import MonolockError


@dataclass(frozen=True)
class Failure:
    """The outcome of an attempt that did not end in a grant."""

    error: MonolockError
    queued: float = 0.0
    """Seconds the claim had been queued (after WAITING) when it failed."""
