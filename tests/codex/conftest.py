"""Fixtures for the Codex provider tests: the mock Responses API, CODEX_HOME roots outside /tmp, and
adapters driving the real ``codex`` binary (installed by ``make setup``) against the mock."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.codex.codex_mock import MockResponses
from tests.codex.codex_support import TENANT, Driver, codex_env, codex_settings, place
from tests.support.provider_http import api_client, tenant_token
from treadle.cli.stack import Stack
from treadle.providers.codex import CodexAdapter, CodexSettings


@pytest.fixture(scope="session")
async def mock() -> AsyncIterator[MockResponses]:
    server = await MockResponses().start()
    yield server
    await server.stop()


@pytest.fixture(scope="session")
def homes_root() -> Path:
    """CODEX_HOME must not be under /tmp (codex refuses to install its helpers there), and a checkout may well
    be: the homes go under the user's cache directory instead."""
    root = Path.home() / ".cache" / "treadle-test" / "codex-homes" / uuid.uuid4().hex[:12]
    root.mkdir(parents=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def settings(mock: MockResponses, homes_root: Path) -> CodexSettings:
    return codex_settings(mock, homes_root)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
async def open_driver(workspace: Path, settings: CodexSettings, tmp_path: Path):
    """``await open_driver(runtime_mode=..., native_ref=...)`` opens a thread on a fresh app-server."""
    opened: list[CodexAdapter] = []

    async def make(*, runtime_mode: str = "approval_required", native_ref: str | None = None) -> Driver:
        request = place(workspace, runtime_mode=runtime_mode, native_ref=native_ref)
        adapter = CodexAdapter(workspace, request, tmp_path / "runtime" / request.session_id, settings)
        opened.append(adapter)
        await adapter.open_thread(native_ref, "unused")
        return Driver(adapter)

    yield make
    for adapter in opened:
        await adapter.close()


# --- a stack of real workers whose provider hosts run codex against the mock (one per module) ---


def _quiet(name: str, line: str) -> None:
    if os.environ.get("TREADLE_TEST_VERBOSE") or " ERROR " in line or "Traceback" in line:
        print(f"{name} | {line}")


@pytest.fixture(scope="module")
async def codex_stack(tmp_path_factory, mock, homes_root):
    async with Stack(tmp_path_factory.mktemp("codex-stack"), env=codex_env(mock, homes_root), on_output=_quiet) as s:
        yield s


@pytest.fixture(scope="module")
async def token(codex_stack) -> str:
    return await tenant_token(codex_stack, TENANT)


@pytest.fixture(scope="module")
async def client(codex_stack, token):
    async with api_client(codex_stack, token) as c:
        yield c
