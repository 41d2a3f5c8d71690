"""Profile the Python clients' acquire -> release cycle (workload 1, one
worker) with cProfile.

    python/.venv/bin/python bench/profile/python_cycles.py ADDR [seconds]

Prints cycles/s for the sync and the asyncio client, then the top functions
by own time. The server at ADDR is a running `monolock serve`.
"""

import asyncio
import cProfile
import pstats
import sys
import time

import monolock
from monolock.aio import AsyncClient

ADDR = sys.argv[1]
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0


def sync_cycles() -> int:
    client = monolock.Client(ADDR, lease=10)
    n, end = 0, time.monotonic() + SECONDS
    while time.monotonic() < end:
        with client.lock(f"prof/sync/{n}", timeout=10):
            pass
        n += 1
    return n


async def async_cycles() -> int:
    client = AsyncClient(ADDR, lease=10)
    n, end = 0, time.monotonic() + SECONDS
    while time.monotonic() < end:
        async with client.lock(f"prof/async/{n}", timeout=10):
            pass
        n += 1
    return n


for label, run in (("sync", sync_cycles), ("asyncio", lambda: asyncio.run(async_cycles()))):
    prof = cProfile.Profile()
    prof.enable()
    count = run()
    prof.disable()
    print(f"== python {label}: {count / SECONDS:.0f} cycles/s under cProfile")
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)
