"""Fixtures of the ACP provider tests: the mocks of the two agents' model APIs (Claude's Messages API, Codex's
Responses API) on 127.0.0.1, agent homes outside /tmp, and one stack per module whose provider hosts run the
real ACP agents (installed by ``make setup``) in the runtime sandbox."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.acp.acp_support import TENANT, acp_env
from tests.claude.mock_api import MockMessagesApi
from tests.codex.codex_mock import MockResponses
from tests.codex.codex_support import codex_env
from tests.support.provider_http import api_client, tenant_token
from treadle.cli.stack import Stack


@pytest.fixture(scope="module")
async def claude_api() -> AsyncIterator[MockMessagesApi]:
    async with MockMessagesApi() as server:
        yield server


@pytest.fixture(scope="module")
async def codex_api() -> AsyncIterator[MockResponses]:
    server = await MockResponses().start()
    yield server
    await server.stop()


@pytest.fixture(scope="module")
def homes_root() -> Path:
    """Codex refuses a home under /tmp, where a checkout may be: agent homes go under the user's cache."""
    root = Path.home() / ".cache" / "treadle-test" / "acp-homes" / uuid.uuid4().hex[:12]
    root.mkdir(parents=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _quiet(name: str, line: str) -> None:
    if os.environ.get("TREADLE_TEST_VERBOSE") or " ERROR " in line or "Traceback" in line:
        print(f"{name} | {line}")


@pytest.fixture(scope="module")
async def acp_stack(tmp_path_factory, claude_api, codex_api, homes_root):
    # the native Codex provider too, on the same Responses mock: a thread switches Codex -> ACP agent -> Codex
    env = {**acp_env(claude_api, codex_api, homes_root), **codex_env(codex_api, homes_root / "codex")}
    # An ACP session opens its agent at placement (the agent names the session): claude-agent-acp's session/new
    # starts Claude Code, which on a loaded 2-core machine outlasts the supervisor's 5 s request timeout, and a
    # timed-out placement is retried as another session (each one a live agent until the reaper ends it)
    env["TREADLE_SUPERVISOR_HOST_TIMEOUT"] = "30"
    async with Stack(tmp_path_factory.mktemp("acp-stack"), env=env, on_output=_quiet) as s:
        yield s
    # Only the model APIs were ever called: no phone-home traffic reached either mock. (Claude Code 2.1.83
    # warms its connection with a HEAD of the base URL it was given: that is the model API itself.)
    assert {(s.method, s.path.split("?")[0]) for s in claude_api.seen} <= {("POST", "/v1/messages"), ("HEAD", "/")}
    assert codex_api.connects == []


@pytest.fixture(scope="module")
async def token(acp_stack) -> str:
    return await tenant_token(acp_stack, TENANT)


@pytest.fixture(scope="module")
async def client(acp_stack, token):
    async with api_client(acp_stack, token) as c:
        yield c
