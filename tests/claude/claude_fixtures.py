"""Fixtures for the Claude Code provider: a mock Messages API on 127.0.0.1, adapters on the real CLI, and a
sink that records what an adapter reports. Test modules import the fixtures by name,
so that only they get them."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from tests.claude.mock_api import MockMessagesApi
from tests.support.helpers import wait_for
from treadle.core import provider_events as pe
from treadle.core.ids import IdFactory
from treadle.providers.base import Turn
from treadle.providers.claude import ClaudeAdapter
from treadle.providers.claude.settings import ClaudeSettings
from treadle.providers.protocol import PlaceSession

_sessions = itertools.count(1)
_attempts = itertools.count(1)


class RecordingSink:
    """A TurnSink that keeps everything: durable bodies in order, and the raw live text."""

    def __init__(self) -> None:
        self.events: list[pe.Body] = []
        self.live: dict[str, list[str]] = {}
        self.seen: set[str] = set()  # requests a test already answered

    async def event(self, body: pe.Body) -> None:
        self.events.append(body)

    async def text(self, message_id: str, node_id: str, chunk: str) -> None:
        self.live.setdefault(message_id, []).append(chunk)

    async def text_done(self, message_id: str, node_id: str, text: str) -> None:
        self.events.append(pe.TextCompleted(message_id=message_id, node_id=node_id, text=text))

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    def texts(self, node_id: str | None = None) -> list[str]:
        return [e.text for e in self.of(pe.TextCompleted) if node_id is None or e.node_id == node_id]

    @property
    def completed(self) -> pe.TurnCompleted | None:
        done = self.of(pe.TurnCompleted)
        return done[-1] if done else None

    async def request(self, timeout: float = 30) -> pe.RequestOpened:
        """The next request nobody answered yet."""
        return await wait_for(
            lambda: next((r for r in self.of(pe.RequestOpened) if r.request_id not in self.seen), None),
            timeout=timeout,
            what="a runtime request",
        )


def new_turn(text: str) -> Turn:
    attempt = f"att_{next(_attempts):04d}"
    return Turn(
        run_id="run_test",
        attempt_id=attempt,
        root_node_id=f"node_root_{attempt}",
        text=text,
        script=None,
        ids=IdFactory(attempt, 1_700_000_000_000),
    )


class Harness:
    """Adapters of one test: one mock API, one Claude session store, each adapter its own session dir."""

    def __init__(self, root: Path, api: MockMessagesApi) -> None:
        self.root = root
        self.api = api
        self.workspace = root / "workspace"
        self.workspace.mkdir()
        self.adapters: list[ClaudeAdapter] = []

    def adapter(self, runtime_mode: str = "approval_required", workspace: Path | None = None) -> ClaudeAdapter:
        session = f"ps_{next(_sessions):04d}"
        request = PlaceSession(
            tenant="acme",
            thread="thr_test",
            provider="claude",
            session_id=session,
            provider_thread_id="pth_test",
            workspace="w",
            runtime_mode=runtime_mode,
        )
        settings = ClaudeSettings(base_url=self.api.url, api_key="sk-ant-mock-000", max_retries=0)
        state_dir = self.root / "state" / "provider-runtimes" / "host-1" / session
        adapter = ClaudeAdapter(workspace or self.workspace, request, state_dir, settings=settings)
        self.adapters.append(adapter)
        return adapter

    async def opened(self, native_ref: str | None = None, **kw) -> ClaudeAdapter:
        adapter = self.adapter(**kw)
        await adapter.open_thread(native_ref, "unused")
        return adapter

    async def play(self, adapter: ClaudeAdapter, text: str) -> tuple[Turn, RecordingSink]:
        turn, sink = new_turn(text), RecordingSink()
        await asyncio.wait_for(adapter.run_turn(turn, sink), timeout=60)
        return turn, sink

    def start(self, adapter: ClaudeAdapter, text: str) -> tuple[Turn, RecordingSink, asyncio.Task]:
        turn, sink = new_turn(text), RecordingSink()
        return turn, sink, asyncio.create_task(adapter.run_turn(turn, sink))

    async def close(self) -> None:
        for adapter in self.adapters:
            await adapter.close()


@pytest.fixture
async def api():
    async with MockMessagesApi() as server:
        yield server


@pytest.fixture
async def claude(tmp_path, api):
    harness = Harness(tmp_path, api)
    yield harness
    await harness.close()
    # Only the Messages API was ever called: no phone-home traffic reached the mock's base URL either.
    assert {(s.method, s.path.split("?")[0]) for s in api.seen} <= {("POST", "/v1/messages")}, api.seen
