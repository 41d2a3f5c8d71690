"""The fencing recipes of docs/fencing.md against real PostgreSQL and Redis
(scripts/services.sh) with tokens of a real monolock server: an old token's
write must be refused after a newer token's."""

from __future__ import annotations

import concurrent.futures
import inspect
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import psycopg
import pytest
import redis

import monolock

from .fencing_support import (
    EXAMPLES,
    FENCE_LUA,
    PSQL_RECIPE,
    Postgres,
    Service,
    Stale,
    kick_holder,
    read_text_when_done,
    set_fenced,
    write_fenced,
)
from .support import REPO, RealServer, require_tool, server_binary

WAIT = 30.0
U64 = 2**64 - 1

# Writes of holders that paused and woke up late, in the order they reach
# the resource: (lock, token, accepted). Only a token at least the largest
# seen for its lock may write.
INTERLEAVING = [
    ("jobs/a", 5, True),
    ("jobs/a", 7, True),  # a newer holder
    ("jobs/a", 6, False),  # the one before it, late
    ("jobs/a", 5, False),  # the first, later still
    ("jobs/a", 7, True),  # the newest writes again
    ("jobs/b", 1, True),  # each lock name has a fence of its own
    ("jobs/a", 8, True),
    # Beyond bigint, and one apart where a double sees no difference.
    ("jobs/big", U64 - 1, True),
    ("jobs/big", U64, True),
    ("jobs/big", U64 - 1, False),
]


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    service = Service("postgres")
    yield Postgres(service)
    service.stop()


@pytest.fixture(scope="module")
def redis_port() -> Iterator[int]:
    service = Service("redis")
    yield service.port
    service.stop()


@pytest.fixture
def resource(postgres: Postgres) -> Iterator[psycopg.Connection[Any]]:
    """A database of the test's own, with fence.sql and a table to guard."""
    with psycopg.connect(postgres.url(postgres.new_database()), autocommit=True) as conn:
        conn.execute("CREATE TABLE resource (lock text PRIMARY KEY, value text NOT NULL)")
        yield conn


@pytest.fixture
def rdb(redis_port: int) -> Iterator[redis.Redis]:
    r = redis.Redis(host="127.0.0.1", port=redis_port, decode_responses=True)
    r.flushdb()
    yield r
    r.close()


Write = Callable[[str, int, str], None]


def check_interleaving(write: Write, read: Callable[[str], str | None]) -> None:
    want: dict[str, str] = {}
    for i, (lock, token, accepted) in enumerate(INTERLEAVING):
        value = f"write {i} with token {token}"
        if accepted:
            write(lock, token, value)
            want[lock] = value
        else:
            with pytest.raises(Stale):
                write(lock, token, value)
        assert read(lock) == want.get(lock), f"step {i}: what {lock}'s resource holds"


def stale_holder(server: RealServer, name: str, write: Callable[[int, str], None]) -> None:
    """What fencing is for, with tokens of a real server: holder 1 takes the
    lock and has a write under way when it loses the lock (an operator's
    kick here; a pause or a partition as well). Holder 2 is granted the
    lock with a larger token and writes. Then holder 1's write, which no
    lost-lock signal can call back, arrives with the old token and must be
    refused."""
    client = monolock.Client(server.address, lease=5)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        holder1 = client.acquire(name, timeout=WAIT)
        try:
            waiting = pool.submit(client.acquire, name, timeout=WAIT)
            assert kick_holder(server.admin_address, name) == holder1.token
            assert holder1.lost.wait(WAIT), "holder 1 not told of its loss"
            assert holder1.is_lost
            holder2 = waiting.result(timeout=WAIT)
            try:
                assert holder2.token > holder1.token
                write(holder2.token, "from holder 2")
                with pytest.raises(Stale):
                    write(holder1.token, "from holder 1")
            finally:
                holder2.release()
        finally:
            holder1.release()


# -- PostgreSQL ----------------------------------------------------------------


def pg_write(conn: psycopg.Connection[Any]) -> Write:
    def write(lock: str, token: int, value: str) -> None:
        def upsert(c: psycopg.Connection[Any]) -> None:
            c.execute(
                "INSERT INTO resource (lock, value) VALUES (%s, %s)"
                " ON CONFLICT (lock) DO UPDATE SET value = EXCLUDED.value",
                (lock, value),
            )

        write_fenced(conn, lock, token, upsert)

    return write


def pg_read(conn: psycopg.Connection[Any]) -> Callable[[str], str | None]:
    def read(lock: str) -> str | None:
        row = conn.execute("SELECT value FROM resource WHERE lock = %s", (lock,)).fetchone()
        return None if row is None else str(row[0])

    return read


def test_postgres_interleaved_tokens(resource: psycopg.Connection[Any]) -> None:
    check_interleaving(pg_write(resource), pg_read(resource))
    row = resource.execute(
        "SELECT token::text FROM monolock_fence WHERE name = 'jobs/big'"
    ).fetchone()
    assert row == (str(U64),)


def test_postgres_stale_holder_of_a_real_server(
    real_server: RealServer, resource: psycopg.Connection[Any]
) -> None:
    stale_holder(
        real_server, "fencing/py-pg", lambda t, v: pg_write(resource)("fencing/py-pg", t, v)
    )
    assert pg_read(resource)("fencing/py-pg") == "from holder 2"


def test_postgres_stale_token_rolls_back_the_transaction(resource: psycopg.Connection[Any]) -> None:
    """A write made before the check is rolled back with the transaction."""
    pg_write(resource)("jobs/tx", 10, "token 10")
    with pytest.raises(Stale, match="stale fencing token 9 for lock jobs/tx: 10 was seen"):

        def update_then_fence(c: psycopg.Connection[Any]) -> None:
            c.execute("UPDATE resource SET value = 'token 9' WHERE lock = 'jobs/tx'")
            c.execute("CALL monolock_fence('jobs/tx', 9)")

        write_fenced(resource, "jobs/tx", 10, update_then_fence)
    assert pg_read(resource)("jobs/tx") == "token 10"


# -- Redis ---------------------------------------------------------------------


def redis_keys(lock: str) -> tuple[str, str]:
    """The fence's key and the resource's, with one hash tag as a Redis
    Cluster would need."""
    return f"fence:{{{lock}}}", f"resource:{{{lock}}}"


def redis_write(r: redis.Redis) -> Write:
    def write(lock: str, token: int, value: str) -> None:
        set_fenced(r, *redis_keys(lock), token, value)

    return write


def redis_read(r: redis.Redis) -> Callable[[str], str | None]:
    def read(lock: str) -> str | None:
        value = r.get(redis_keys(lock)[1])
        return None if value is None else str(value)

    return read


def test_redis_interleaved_tokens(rdb: redis.Redis) -> None:
    check_interleaving(redis_write(rdb), redis_read(rdb))
    assert rdb.get(redis_keys("jobs/big")[0]) == str(U64)


def test_redis_stale_holder_of_a_real_server(real_server: RealServer, rdb: redis.Redis) -> None:
    stale_holder(
        real_server, "fencing/py-redis", lambda t, v: redis_write(rdb)("fencing/py-redis", t, v)
    )
    assert redis_read(rdb)("fencing/py-redis") == "from holder 2"


@pytest.mark.parametrize("token", ["", "007", "1e3", "-1", str(U64 + 1), "1" * 21])
def test_redis_refuses_malformed_tokens(rdb: redis.Redis, token: str) -> None:
    fence, key = redis_keys("jobs/bad")
    with pytest.raises(redis.ResponseError, match="fencing token is not a decimal uint64"):
        rdb.register_script(FENCE_LUA)(keys=[fence, key], args=[token, "x"])
    assert rdb.exists(fence, key) == 0


# -- the shell recipe: psql under monolock run -----------------------------------


@pytest.fixture
def report_db(postgres: Postgres) -> Iterator[tuple[dict[str, str], psycopg.Connection[Any]]]:
    """The environment in which the recipe writes to a database of the
    test's own (psql finds it through the PG* variables, the declared psql
    first on PATH), and a connection to read it."""
    name = postgres.new_database()
    psql = require_tool("psql")
    env = {
        **os.environ,
        "PATH": os.path.dirname(psql) + os.pathsep + os.environ.get("PATH", ""),
        "PGHOST": "127.0.0.1",
        "PGPORT": str(postgres.port),
        "PGUSER": "postgres",
        "PGDATABASE": name,
        "PGCONNECT_TIMEOUT": "10",
    }
    with psycopg.connect(postgres.url(name), autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE report (id int PRIMARY KEY, body text NOT NULL,"
            " token numeric(20, 0) NOT NULL)"
        )
        yield env, conn


def report(conn: psycopg.Connection[Any]) -> tuple[str, int] | None:
    row = conn.execute("SELECT body, token FROM report WHERE id = 1").fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def test_psql_recipe_interleaved_tokens(
    report_db: tuple[dict[str, str], psycopg.Connection[Any]],
) -> None:
    env, conn = report_db
    for token, accepted in [(5, True), (7, True), (6, False), (7, True), (8, True), (5, False)]:
        before = report(conn)
        body = f"from token {token}"
        done = subprocess.run(
            ["sh", "-c", PSQL_RECIPE],
            cwd=EXAMPLES,
            env={
                **env,
                "MONOLOCK_NAME": "jobs/report",
                "MONOLOCK_TOKEN": str(token),
                "REPORT_BODY": body,
            },
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        if accepted:
            assert done.returncode == 0, done.stderr
            assert report(conn) == (body, token)
        else:
            assert done.returncode == 3, f"token {token} not refused: {done.stderr}"
            assert before is not None
            assert (
                f"stale fencing token {token} for lock jobs/report: {before[1]} was seen"
                in done.stderr
            )
            assert report(conn) == before


def test_psql_recipe_under_monolock_run(
    real_server: RealServer,
    report_db: tuple[dict[str, str], psycopg.Connection[Any]],
    tmp_path: Path,
) -> None:
    """Run 1 holds the lock and has its write under way when an operator
    kicks it. The server grants the lock to run 2 at once, which writes,
    while run 1's command is still within its --grace (it ignores the
    SIGTERM, as a write in flight cannot be called back). Then run 1's write
    goes out with the old token: psql is refused, nothing changes, and
    monolock run exits 79 for the lost lock."""
    env, conn = report_db
    bin = server_binary()
    name = "fencing/py-psql"
    held, gate = tmp_path / "held", tmp_path / "gate"
    # A grace of a minute needs a lease of 5 minutes or more (monolock run).
    pause = (
        'trap \'\' TERM; echo "$MONOLOCK_TOKEN" >"$HELD"; i=0;'
        ' while [ ! -e "$GATE" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; '
    )
    run = [bin, "run", "--server", real_server.address]
    stderr1 = tmp_path / "run1.stderr"
    with open(stderr1, "wb") as err1:
        run1 = subprocess.Popen(
            [*run, "--lease", "10m", "--grace", "1m", name, "--", "sh", "-c", pause + PSQL_RECIPE],
            cwd=EXAMPLES,
            env={**env, "REPORT_BODY": "from run 1", "HELD": str(held), "GATE": str(gate)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err1,
        )
    try:
        deadline = time.monotonic() + WAIT
        while (text := read_text_when_done(held)) is None:
            assert run1.poll() is None, f"run 1 exited early: {stderr1.read_text()}"
            assert time.monotonic() < deadline, "run 1 did not get the lock"
            time.sleep(0.02)
        token1 = int(text)

        run2 = subprocess.Popen(
            [*run, name, "--", "sh", "-c", PSQL_RECIPE],
            cwd=EXAMPLES,
            env={**env, "REPORT_BODY": "from run 2"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert kick_holder(real_server.admin_address, name) == token1
        _, stderr2 = run2.communicate(timeout=WAIT)
        assert run2.returncode == 0, stderr2
        after2 = report(conn)
        assert after2 is not None
        body, token2 = after2
        assert body == "from run 2"
        assert token2 > token1

        gate.touch()
        assert run1.wait(timeout=WAIT) == 79, stderr1.read_text()
        assert (
            f"stale fencing token {token1} for lock {name}: {token2} was seen"
            in stderr1.read_text()
        )
        assert report(conn) == ("from run 2", token2)
    finally:
        if run1.poll() is None:
            run1.kill()
            run1.wait()


# -- the doc shows what runs ---------------------------------------------------------


def test_doc_shows_the_python_recipes() -> None:
    doc = (REPO / "docs" / "fencing.md").read_text(encoding="utf-8")
    for fn in (write_fenced, set_fenced):
        assert inspect.getsource(fn) in doc, f"docs/fencing.md shows {fn.__name__}"
    assert f"sh -c '{PSQL_RECIPE}'" in doc
