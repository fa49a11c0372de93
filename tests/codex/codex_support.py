"""Helpers of the Codex provider tests: settings pointing codex at the mock, a recording sink, a driver."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import uuid
from pathlib import Path

from tests.codex.codex_mock import MockResponses
from tests.support.helpers import wait_for
from treadle.client import TreadleClient
from treadle.core import provider_events as pe
from treadle.core.ids import IdFactory
from treadle.providers.base import Turn
from treadle.providers.codex import CodexAdapter, CodexSettings
from treadle.providers.protocol import PlaceSession

_turns = itertools.count(1)
TENANT = "codexco"  # whose user alice the codex stack's API clients act as (conftest.py)
MCP_NAMESPACE = "mcp__treadle"  # what tool_search answers for the server named "treadle" (mcp_access.SERVER)


def mcp_output_text(output: dict) -> str:
    """What Codex handed the model for an MCP tool call (``Wall time: …\\nOutput:\\n{…}``)."""
    return output["output"] if isinstance(output["output"], str) else json.dumps(output["output"])


def mcp_result(output: dict) -> dict:
    """A tool's JSON result from Codex's function_call_output."""
    text = mcp_output_text(output)
    found = re.search(r"Output:\n(\{.*\})\s*$", text, re.S)
    assert found, text
    return json.loads(found[1])


def codex_settings(mock: MockResponses, homes_root: Path) -> CodexSettings:
    return CodexSettings(
        base_url=mock.base_url,
        api_key_env="MOCK_MODEL_KEY",
        api_key="sk-mock",
        home_root=homes_root,
        proxy=f"http://127.0.0.1:{mock.port}",
        request_timeout=20,
    )


def codex_env(mock: MockResponses, homes_root: Path) -> dict[str, str]:
    """The same settings as environment variables, for worker processes."""
    return {
        "TREADLE_CODEX_BASE_URL": mock.base_url,
        "TREADLE_CODEX_API_KEY_ENV": "MOCK_MODEL_KEY",
        "TREADLE_CODEX_API_KEY": "sk-mock",
        "TREADLE_CODEX_HOME_ROOT": str(homes_root),
        "TREADLE_CODEX_PROXY": f"http://127.0.0.1:{mock.port}",
    }


class Recorder:
    """A TurnSink that keeps everything a turn reported."""

    def __init__(self) -> None:
        self.events: list[pe.Body] = []
        self.said: list[pe.Body | str] = []  # events and the ids of messages as their text began, in order
        self.chunks: dict[str, list[str]] = {}
        self.texts: dict[str, str] = {}
        self.ended = asyncio.Event()

    async def event(self, body: pe.Body) -> None:
        self.events.append(body)
        self.said.append(body)
        if isinstance(body, pe.TurnCompleted):
            self.ended.set()

    async def text(self, message_id: str, node_id: str, chunk: str) -> None:
        if message_id not in self.chunks:
            self.said.append(message_id)
        self.chunks.setdefault(message_id, []).append(chunk)

    async def text_done(self, message_id: str, node_id: str, text: str) -> None:
        self.texts[message_id] = text

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    @property
    def completed(self) -> pe.TurnCompleted:
        return self.of(pe.TurnCompleted)[-1]

    @property
    def reply(self) -> str:
        return "".join(self.texts.values())


class Driver:
    """An adapter plus the turns played on it."""

    def __init__(self, adapter: CodexAdapter) -> None:
        self.adapter = adapter

    def turn(self, text: str, script: dict | None = None) -> Turn:
        n = next(_turns)
        return Turn(
            run_id=f"run_{n}",
            attempt_id=f"att_{n}",
            root_node_id=f"node_root{n}",
            text=text,
            script=script,
            ids=IdFactory(f"att_{n}", 1_700_000_000_000 + n),
        )

    def start(self, text: str, script: dict | None = None) -> tuple[Turn, Recorder, asyncio.Task]:
        turn, sink = self.turn(text, script), Recorder()
        return turn, sink, asyncio.create_task(self.adapter.run_turn(turn, sink))

    async def play(self, text: str, script: dict | None = None, timeout: float = 60) -> Recorder:
        _, sink, task = self.start(text, script)
        async with asyncio.timeout(timeout):
            await task
        return sink


def place(
    workspace: Path, *, runtime_mode: str = "approval_required", native_ref: str | None = None, tenant: str = "acme"
) -> PlaceSession:
    return PlaceSession(
        tenant=tenant,
        thread="thr_1",
        provider="codex",
        session_id=f"ps_{uuid.uuid4().hex[:8]}",
        provider_thread_id="pth_1",
        native_ref=native_ref,
        workspace=str(workspace),
        runtime_mode=runtime_mode,
    )


async def roll_back(client: TreadleClient, thread: str, to: int) -> dict:
    """The answer waits for the provider too (a Codex process may be started to resume the thread): a 503
    from an impatient gateway is asked again with the same idempotency key, which names the same rollback."""
    key = uuid.uuid4().hex

    async def answered():
        r = await client.request(
            "POST", f"/v1/threads/{thread}/rollback", json={"to_run_ordinal": to}, headers={"Idempotency-Key": key}
        )
        if r.status_code == 503:
            return None
        assert r.status_code == 200, r.text
        return r.json()

    rollback = await wait_for(answered, timeout=90, interval=0.2, what=f"rollback of {thread} answered")
    assert rollback["status"] == "completed", rollback
    return rollback
