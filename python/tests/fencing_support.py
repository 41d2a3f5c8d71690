"""Helpers of test_fencing.py: the fencing recipes of docs/fencing.md in
Python, over the files of examples/fencing, and the PostgreSQL and Redis
servers that scripts/services.sh starts (the launcher the Go tests use too)."""

from __future__ import annotations

import json
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Callable

import psycopg
import pytest
import redis
from psycopg import sql

from .support import REPO

EXAMPLES = REPO / "examples" / "fencing"
SERVICES = REPO / "scripts" / "services.sh"
FENCE_SQL = (EXAMPLES / "fence.sql").read_text(encoding="utf-8")
FENCE_LUA = (EXAMPLES / "fence.lua").read_text(encoding="utf-8")

# The command of the shell recipe, run by monolock run as sh -c '...' in
# EXAMPLES (the Go tests run the same; docs/fencing.md shows it).
PSQL_RECIPE = (
    "psql -X -q -v ON_ERROR_STOP=1 --single-transaction"
    ' -v name="$MONOLOCK_NAME" -v token="$MONOLOCK_TOKEN"'
    ' -v body="$REPORT_BODY" -f write-report.sql'
)


# -- the recipes ----------------------------------------------------------------


class Stale(Exception):
    """The resource has seen a larger token for the lock: a newer holder
    has written, and this write was refused."""


STALE_SQLSTATE = "ML001"  # what monolock_fence raises for a stale token


def write_fenced(
    conn: psycopg.Connection[Any],
    name: str,
    token: int,
    write: Callable[[psycopg.Connection[Any]], None],
) -> None:
    """Run write(conn) in a transaction that monolock_fence guards: it
    commits only if token is at least the largest seen for name; otherwise
    it is rolled back and Stale is raised. conn is in autocommit mode, so
    that conn.transaction() is a transaction of its own."""
    try:
        with conn.transaction():
            conn.execute("CALL monolock_fence(%s, %s)", (name, token))
            write(conn)
    except psycopg.Error as e:
        if e.sqlstate == STALE_SQLSTATE:
            raise Stale(str(e)) from e
        raise


def set_fenced(r: redis.Redis, fence_key: str, key: str, token: int, value: str) -> None:
    """Set key to value if token is at least the largest token recorded in
    fence_key, and record it there, in one step (fence.lua); otherwise
    write nothing and raise Stale."""
    fence = r.register_script(FENCE_LUA)  # EVALSHA, EVAL the first time
    if fence(keys=[fence_key, key], args=[str(token), value]) == 0:
        raise Stale(f"token {token} is smaller than the one in {fence_key}")


# -- the servers ----------------------------------------------------------------


class Service:
    """A PostgreSQL or Redis of scripts/services.sh, on a free loopback port,
    with its files in a directory of its own."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._dir = tempfile.TemporaryDirectory(prefix=f"monolock-py-{kind}-")
        done = subprocess.run(
            ["bash", str(SERVICES), "start", kind, self._dir.name],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            self._dir.cleanup()
            # A missing tool fails here, naming its package: never a skip.
            pytest.fail(f"services.sh start {kind} failed:\n{done.stderr}")
        self.port = int(done.stdout.strip())

    def stop(self) -> None:
        """Stop the server and remove its files."""
        subprocess.run(
            ["bash", str(SERVICES), "stop", self._dir.name],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=True,
            timeout=60,
        )
        self._dir.cleanup()


class Postgres:
    """Databases of their own, each with fence.sql, in one PostgreSQL."""

    def __init__(self, service: Service) -> None:
        self.port = service.port
        self._created = 0

    def url(self, database: str) -> str:
        """The connection URL of database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """Create a database with fence.sql installed; return its name."""
        self._created += 1
        name = f"fencing_{self._created}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        with psycopg.connect(self.url(name), autocommit=True) as conn:
            conn.execute(FENCE_SQL.encode())
        return name


# -- the monolock server's admin API --------------------------------------------


def kick_holder(admin_address: str, name: str) -> int:
    """End the session that holds the lock name, as `monolock kick` does,
    and return its token."""
    with urllib.request.urlopen(f"http://{admin_address}/v1/locks", timeout=10) as resp:
        locks = json.load(resp)["locks"]
    for lock in locks:
        holder = lock.get("holder")
        if lock["name"] != name or holder is None:
            continue
        kick = urllib.request.Request(
            f"http://{admin_address}/v1/sessions/{holder['session']}/kick",
            data=b"",
            method="POST",
            # Not a form's content type, which the admin API refuses.
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(kick, timeout=10) as resp:
            assert resp.status == 200
        return int(holder["token"])
    raise AssertionError(f"nobody holds {name}: {locks}")


def read_text_when_done(path: Path) -> str | None:
    """The text of path once it ends with a newline, else None."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return text if text.endswith("\n") else None
