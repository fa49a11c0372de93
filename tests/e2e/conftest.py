"""One embedded deployment (its own nats-server, redis-server and six worker processes) for the e2e tests."""

from __future__ import annotations

import itertools
import os

import nats
import pytest

import helpers
from api import Api
from treadle.cli.stack import Stack
from treadle.eventlog.log import EventLog
from treadle.ops.tokens import TokenStore

_tenants = itertools.count(1)


# In helpers, not here: modules that import this conftest by name get a second copy of it, and their stacks'
# lines must reach the one deque the report hook reads.
_recent = helpers.recent_worker_lines
_NOISE = ("treadle.runtime.leases", "uvicorn.access")


def _quiet(name: str, line: str) -> None:
    if not any(noise in line for noise in _NOISE):
        _recent.append(f"{name} | {line}")
    if os.environ.get("TREADLE_TEST_VERBOSE") or " ERROR " in line or "Traceback" in line:
        print(f"{name} | {line}")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _recent.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test's report carries what the stack's workers said while it ran (CI shows only the report)."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and _recent:
        report.sections.append(("stack workers while the test ran (newest last)", "\n".join(_recent)))


@pytest.fixture(scope="session")
async def stack(tmp_path_factory):
    async with Stack(tmp_path_factory.mktemp("stack"), on_output=_quiet) as s:
        yield s


@pytest.fixture(scope="session")
async def stack_nc(stack):
    nc = await nats.connect(stack.nats_url)
    yield nc
    await nc.close()


@pytest.fixture
def log(stack_nc) -> EventLog:
    return EventLog(stack_nc)


async def make_api(stack, stack_nc, tenant: str) -> Api:
    token = await TokenStore(stack_nc.jetstream()).create(tenant, "alice")
    return Api(stack.api_url, token, tenant)


@pytest.fixture
async def tenant() -> str:
    return f"tenant{next(_tenants)}"


@pytest.fixture
async def api(stack, stack_nc, tenant):
    client = await make_api(stack, stack_nc, tenant)
    yield client
    await client.close()
