"""``python -m conformance_driver --api sync|asyncio``."""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    parser = argparse.ArgumentParser(prog="conformance_driver", description=__doc__)
    parser.add_argument("--api", choices=["sync", "asyncio"], required=True)
    args = parser.parse_args()
    if args.api == "sync":
        from .sync_driver import main as run
    else:
        from .async_driver import main as run
    return run()


if __name__ == "__main__":
    sys.exit(main())
