"""The scripted provider: plays a script (README "Scripted provider") deterministically, with the capability
profile the script asks for, so every lifecycle and degradation path can be driven from a test."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..domain import provider_events as pe
from ..domain import script as sc
from ..domain.entities import ProviderCapabilities
from .base import ProviderAdapter, Response, Turn, TurnSink, Unsupported
from .protocol import PlaceSession

DEFAULT_CAPABILITIES = ProviderCapabilities(
    create_empty_thread=True,
    read_snapshot=False,
    rollback=False,
    fork=False,
    interrupt=True,
    active_steering=False,
    approvals=["command", "file_change", "file_read", "patch"],
    structured_questions=True,
    plan_updates=True,
    todo_list=True,
    proposed_plan=True,
    subagents=True,
)


class ScriptFailed(Exception):
    pass


def default_script(text: str) -> sc.Script:
    """With no script, the provider answers with a short deterministic reply about the message."""
    words = len(text.split())
    reply = f"Scripted reply to your {words}-word message: {text[:200]}"
    return sc.Script(steps=[sc.Text(text=reply, chunk=12)])


class ScriptedAdapter(ProviderAdapter):
    name = "scripted"

    def __init__(self, workspace: Path, request: PlaceSession, state_dir: Path | None = None) -> None:
        super().__init__(workspace)
        self.capabilities = request.capabilities or DEFAULT_CAPABILITIES
        self._pending: dict[str, asyncio.Future] = {}
        self._turns = 0

    async def open_thread(self, native_ref: str | None, fresh_ref: str) -> tuple[str, bool]:
        # A scripted conversation keeps no native state, so resuming any ref always succeeds.
        return (native_ref, True) if native_ref else (fresh_ref, False)

    async def respond(self, request_id: str, response: Response) -> None:
        future = self._pending.get(request_id)
        if future is None or future.done():
            raise Unsupported(f"request {request_id} is not live")
        future.set_result(response)

    async def run_turn(self, turn: Turn, sink: TurnSink) -> None:
        script = sc.parse_script(turn.script) or default_script(turn.text)
        self._turns += 1
        await sink.event(pe.TurnStarted(native_turn_ref=f"scripted-turn-{self._turns}"))
        status, error = "completed", None
        try:
            await self._play(script.steps, turn, sink, turn.root_node_id)
        except ScriptFailed as exc:
            status, error = "failed", str(exc)
        await sink.event(pe.TurnCompleted(status=status, error=error))

    async def _play(self, steps: list, turn: Turn, sink: TurnSink, node_id: str) -> None:
        plan_id = turn.ids.next("plan")
        for step in steps:
            if isinstance(step, sc.Text):
                message_id = turn.ids.next("msg")
                for i in range(0, len(step.text), step.chunk):
                    await sink.text(message_id, node_id, step.text[i:i + step.chunk])
                    if step.delay_ms:
                        await asyncio.sleep(step.delay_ms / 1000)  # the script's pacing
                await sink.text_done(message_id, node_id, step.text)
            elif isinstance(step, sc.Tool):
                tool = turn.ids.next("node")
                await sink.event(pe.ToolStarted(node_id=tool, parent_id=node_id, title=step.name, input=step.input))
                if step.delay_ms:
                    await asyncio.sleep(step.delay_ms / 1000)
                await sink.event(pe.ToolCompleted(node_id=tool, status=step.status, output=step.output))
            elif isinstance(step, sc.WriteFile):
                tool = turn.ids.next("node")
                await sink.event(pe.ToolStarted(node_id=tool, parent_id=node_id, title=f"write {step.path}",
                                                input={"path": step.path}))
                await asyncio.to_thread(self._write, step.path, step.content)
                await sink.event(pe.ToolCompleted(node_id=tool, output=f"wrote {len(step.content)} characters"))
            elif isinstance(step, sc.Delay):
                await asyncio.sleep(step.ms / 1000)
            elif isinstance(step, (sc.Approval, sc.Question)):
                await self._ask(step, turn, sink)
            elif isinstance(step, sc.Todo):
                await sink.event(pe.PlanUpdated(plan_id=plan_id, kind="todo_list", node_id=node_id, items=step.items))
            elif isinstance(step, sc.ProposedPlan):
                await sink.event(pe.PlanUpdated(plan_id=turn.ids.next("plan"), kind="proposed_plan", node_id=node_id,
                                                text=step.text))
            elif isinstance(step, sc.Subagent):
                child = turn.ids.next("node")
                await sink.event(pe.ToolStarted(node_id=child, parent_id=node_id, kind="subagent", title=step.title))
                await self._play(step.steps, turn, sink, child)
                await sink.event(pe.ToolCompleted(node_id=child))
            elif isinstance(step, sc.Fail):
                if step.fatal:
                    raise ScriptFailed(step.message)
                await sink.event(pe.Warning(message=step.message))
            elif isinstance(step, sc.Hang):
                await asyncio.Future()  # only an interrupt or a crash ends this turn

    async def _ask(self, step: sc.Approval | sc.Question, turn: Turn, sink: TurnSink) -> None:
        request_id, node_id = turn.ids.next("req"), turn.ids.next("node")
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        if isinstance(step, sc.Question):
            body = pe.RequestOpened(request_id=request_id, node_id=node_id, kind="user_input", prompt=step.prompt,
                                    detail={"options": step.options})
        else:
            body = pe.RequestOpened(request_id=request_id, node_id=node_id, kind=step.kind, prompt=step.prompt,
                                    detail=step.detail)
        await sink.event(body)
        try:
            await future
        finally:
            self._pending.pop(request_id, None)

    def _write(self, relative: str, content: str) -> None:
        path = (self.workspace / relative).resolve()
        if not path.is_relative_to(self.workspace.resolve()):
            raise ScriptFailed(f"write_file outside the workspace: {relative}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
