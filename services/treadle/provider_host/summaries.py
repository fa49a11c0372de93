"""Provider-backed handoff summaries (L5.5), played on a provider host: one turn on a throwaway provider thread
whose workspace is an empty scratch directory, so the summarising provider sees only the prompt. Runtime
requests (approvals, questions) are declined: a summary has nothing to run."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from treadle.core import provider_events as pe
from treadle.core.ids import IdFactory
from treadle.providers import protocol as hp
from treadle.providers.base import ProviderAdapter, Response, Turn
from treadle.providers.registry import create_adapter
from treadle.sandbox.host import Sandbox


class _Collect:
    """A turn sink that keeps the turn's top-level replies and how it ended, and declines every request."""

    def __init__(self, adapter: ProviderAdapter, root_node_id: str) -> None:
        self._adapter = adapter
        self._root = root_node_id
        self.replies: dict[str, str] = {}  # message id -> completed text, in order
        self.completed: pe.TurnCompleted | None = None
        self._answers: set[asyncio.Task[Any]] = set()

    async def event(self, body: pe.AnyBody) -> None:
        if isinstance(body, pe.TextCompleted) and body.node_id == self._root:
            self.replies[body.message_id] = body.text
        elif isinstance(body, pe.RequestOpened):  # answered after the adapter has registered its callback
            task = asyncio.create_task(self._adapter.respond(body.request_id, Response(decision="decline")))
            self._answers.add(task)
            task.add_done_callback(self._answers.discard)
        elif isinstance(body, pe.TurnCompleted):
            self.completed = body

    async def text(self, message_id: str, node_id: str, chunk: str) -> None:
        return None

    async def text_done(self, message_id: str, node_id: str, text: str) -> None:
        await self.event(pe.TextCompleted(message_id=message_id, node_id=node_id, text=text))


async def summarise(
    request: hp.Summarise, scratch_root: Path, sandbox: Sandbox | None = None
) -> hp.Summary | hp.HostFailure:
    name = f"summary-{uuid.uuid4().hex[:16]}"
    workspace, runtime = scratch_root / name / "workspace", scratch_root / name / "runtime"
    workspace.mkdir(parents=True)
    place = hp.PlaceSession(
        tenant=request.tenant,
        thread=name,
        provider=request.provider,
        session_id=name,
        provider_thread_id=name,
        workspace=name,
        model=request.model,
        ephemeral=True,
    )
    try:
        adapter = create_adapter(place, workspace, runtime, sandbox)
        sink = _Collect(adapter, "root")
        try:
            await adapter.open_thread(None, f"scripted-{name}")
            turn = Turn(
                run_id=name,
                attempt_id=name,
                root_node_id="root",
                text=request.text,
                script=request.script,
                ids=IdFactory(name, int(datetime.now(UTC).timestamp() * 1000)),
            )
            await asyncio.wait_for(adapter.run_turn(turn, sink), request.timeout)
        except TimeoutError:
            return hp.HostFailure(code="timeout", message=f"no summary within {request.timeout:g} s")
        finally:
            await adapter.close()
    finally:
        await asyncio.to_thread(shutil.rmtree, scratch_root / name, True)
    ended = sink.completed
    if ended is None or ended.status != "completed":
        why = (ended.error or ended.status) if ended is not None else "the turn did not end"
        return hp.HostFailure(code="provider_error", message=f"the summary turn ended without a summary: {why}")
    return hp.Summary(text="\n\n".join(sink.replies.values()))
