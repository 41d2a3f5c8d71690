"""The package's logger, in a module of its own: the reactor and the shells
log without importing the retry policy (:mod:`monolock._plan`) for it."""

from __future__ import annotations

import logging

logger = logging.getLogger("monolock")
