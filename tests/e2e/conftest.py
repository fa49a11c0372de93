"""One embedded deployment (its own nats-server, redis-server and seven worker processes) for the e2e tests."""

from __future__ import annotations

import itertools

import nats
import pytest

from tests.support.api import make_api
from tests.support.helpers import quiet, recent_worker_lines
from treadle.cli.stack import Stack
from treadle.eventlog.log import EventLog

_tenants = itertools.count(1)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    recent_worker_lines.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test's report carries what the stack's workers said while it ran (CI shows only the report)."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and recent_worker_lines:
        report.sections.append(("stack workers while the test ran (newest last)", "\n".join(recent_worker_lines)))


@pytest.fixture(scope="session")
async def stack(tmp_path_factory):
    async with Stack(tmp_path_factory.mktemp("stack"), on_output=quiet) as s:
        yield s


@pytest.fixture(scope="session")
async def stack_nc(stack):
    nc = await nats.connect(stack.nats_url)
    yield nc
    await nc.close()


@pytest.fixture
def log(stack_nc) -> EventLog:
    return EventLog(stack_nc)


@pytest.fixture
async def tenant() -> str:
    return f"tenant{next(_tenants)}"


@pytest.fixture
async def api(stack, stack_nc, tenant):
    client = await make_api(stack, stack_nc, tenant)
    yield client
    await client.close()
