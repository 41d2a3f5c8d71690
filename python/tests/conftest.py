from __future__ import annotations

from collections.abc import Iterator

import pytest

from .support import Api, FakeServer, RealServer


@pytest.fixture(scope="session")
def real_server() -> Iterator[RealServer]:
    """One `monolock serve` for the whole run; tests use unique lock names."""
    server = RealServer()
    yield server
    server.stop()


@pytest.fixture
def fresh_server() -> Iterator[RealServer]:
    """A server of the test's own, for tests that stop it."""
    server = RealServer()
    yield server
    server.stop()


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer()
    yield server
    server.close()


@pytest.fixture(params=["sync", "asyncio"])
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    """Each scenario runs once per API."""
    facade = Api(request.param)
    yield facade
    facade.close()
