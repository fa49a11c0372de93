"""The whole stack on the real Claude Code CLI, for the HTTP tests: a mock Messages API on 127.0.0.1 and one
Stack per test module. Modules import the fixtures by name."""

from __future__ import annotations

import os

import pytest

from tests.claude.mock_api import MockMessagesApi
from treadle.cli.stack import Stack


def quiet(name: str, line: str) -> None:
    """Worker output only when it matters (or TREADLE_TEST_VERBOSE is set)."""
    if os.environ.get("TREADLE_TEST_VERBOSE") or " ERROR " in line or "Traceback" in line:
        print(f"{name} | {line}")


def claude_env(api: MockMessagesApi) -> dict[str, str]:
    return {
        "TREADLE_CLAUDE_BASE_URL": api.url,
        "TREADLE_CLAUDE_API_KEY": "sk-ant-mock-000",
        "TREADLE_CLAUDE_MAX_RETRIES": "0",
    }


@pytest.fixture(scope="module")
async def mock_claude_api():
    async with MockMessagesApi() as server:
        yield server


@pytest.fixture(scope="module")
async def claude_stack(request, tmp_path_factory, mock_claude_api):
    directory = tmp_path_factory.mktemp(request.module.__name__.replace("_", "-"))
    async with Stack(directory, env=claude_env(mock_claude_api), on_output=quiet) as stack:
        yield stack
