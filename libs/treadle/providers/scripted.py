"""The scripted provider: plays a script (docs/providers.md, "The scripted provider") deterministically, with the capability
profile the script asks for, so every lifecycle and degradation path can be driven from a test."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from treadle.sandbox.host import Sandbox

from treadle.core import provider_events as pe
from treadle.core import script as sc
from treadle.core.providers.capabilities import PROFILES
from treadle.core.requests.model import FileEdit, Question, QuestionOption, action_prompt

from .base import ProviderAdapter, Response, ResumeFailed, RuntimeLost, Turn, TurnSink, Unsupported
from .protocol import PlaceSession

# Without a profile in its script the scripted provider behaves like Claude Code: no active steering.
DEFAULT_CAPABILITIES = PROFILES["no_steering"]

# write_file steps up to this size are written on the event loop: for a small file the hop to a worker thread
# and back cost more CPU than the write (as for the checkpoint service's small packs).
INLINE_WRITE_CHARS = 16 << 10


class ScriptFailed(Exception):
    pass


class Conversation:
    """What a scripted provider thread remembers: the input of each of its turns, oldest first. Kept in a
    file per native ref under the host's state dir (next to the sessions' own dirs), so a provider thread
    resumed by a later session still has its past and a rollback (L10.5) outlives the session that did it.
    Without a state dir (adapter tests) it lives in memory only."""

    def __init__(self, root: Path | None, native_ref: str) -> None:
        name = hashlib.sha256(native_ref.encode()).hexdigest()[:32]  # refs are data, never path parts
        self._path = root / f"{name}.jsonl" if root is not None else None
        self.turns: list[dict[str, Any]] = []
        if self._path is not None and self._path.exists():
            self.turns = [json.loads(line) for line in self._path.read_text().splitlines() if line.strip()]

    def add(self, turn_ref: str, text: str) -> None:
        """Remember a turn: one small append, made on the caller's thread (the event loop: a hop to a worker
        thread and back cost more CPU than the append)."""
        entry = {"turn": turn_ref, "input": text}
        self.turns.append(entry)
        if self._path is None:
            return
        line = (json.dumps(entry) + "\n").encode()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(self._path, flags, 0o644)
        except FileNotFoundError:  # the first turn of this host's threads: their directory is made once
            self._path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._path, flags, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def drop_last(self, turns: int) -> None:
        self.turns = self.turns[: len(self.turns) - turns]
        if self._path is not None:
            tmp = self._path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(t) + "\n" for t in self.turns))
            tmp.replace(self._path)


def default_script(text: str) -> sc.Script:
    """With no script, the provider answers with a short deterministic reply about the message."""
    words = len(text.split())
    reply = f"Scripted reply to your {words}-word message: {text[:200]}"
    return sc.Script(steps=[sc.Text(text=reply, chunk=12)])


class ScriptedAdapter(ProviderAdapter):
    name = "scripted"

    writes_as_tenant = True  # takes the host's sandbox only for the tenant's uid (it starts no runtime process)

    def __init__(
        self, workspace: Path, request: PlaceSession, state_dir: Path | None = None, sandbox: Sandbox | None = None
    ) -> None:
        super().__init__(workspace)
        # files it writes into the workspace belong to the tenant's uid (treadle.sandbox.identity) when the host
        # sandboxes runtimes; without a sandbox (TREADLE_SANDBOX=off, adapter tests) to the host's user
        self._owner = sandbox.identities.ids(request.tenant) if sandbox is not None and sandbox.enabled else None
        self.capabilities = request.capabilities or DEFAULT_CAPABILITIES
        # <state>/provider-runtimes/<host>/<session> -> <state>/provider-runtimes/scripted-threads/<tenant>;
        # an ephemeral thread (a summary turn, L5.5) must leave nothing behind, so it remembers in memory only.
        self._threads_root = (
            Path(state_dir).parent.parent / "scripted-threads" / request.tenant
            if state_dir is not None and not request.ephemeral
            else None
        )
        self._conversation: Conversation | None = None
        self._pending: dict[str, asyncio.Future[Response]] = {}
        self._turns = 0
        self._forks = 0
        self._plays: dict[str, asyncio.Task[Any]] = {}  # attempt id -> its play, which an interrupt cancels
        # Attempts whose turn began but whose play is not made yet -> interrupted meanwhile: the play is
        # cancelled as soon as it exists (else an early interrupt was lost and the turn played on for ever).
        self._starting: dict[str, bool] = {}
        self._steers: dict[str, list[str]] = {}  # attempt id -> steers not yet played
        self._woken: dict[str, asyncio.Event] = {}
        # attempt id -> the earlier turns (``recall``): the conversation's list and how many of it came before
        self._remembered: dict[str, tuple[list[dict[str, Any]], int]] = {}

    async def open_thread(self, native_ref: str | None, fresh_ref: str) -> tuple[str, bool]:
        # A scripted conversation keeps no native state, so any thread it created resumes; a ref it never
        # minted (another runtime's, or a corrupted one) cannot be resumed (L9.4).
        if native_ref and not native_ref.startswith("scripted-"):
            raise ResumeFailed(f"the scripted provider has no thread {native_ref!r}")
        self._ref, self._fresh_ref = native_ref or fresh_ref, fresh_ref
        self._conversation = await asyncio.to_thread(Conversation, self._threads_root, self._ref)
        return (native_ref, True) if native_ref else (fresh_ref, False)

    async def fork(self, at_turn_ref: str | None) -> str:
        """A native fork only with the ``fork`` capability: a new ref that names its origin and point."""
        if not self.capabilities.fork:
            raise Unsupported("this profile cannot fork a provider thread")
        self._forks += 1
        return f"{self._fresh_ref}~{self._forks}~fork-of~{self._ref}@{at_turn_ref or 'end'}"

    async def rollback(self, turns: int) -> dict[str, Any] | None:
        """L10.5, only with the ``rollback`` capability: the provider thread forgets its last ``turns`` turns."""
        if not self.capabilities.rollback:
            raise Unsupported("this profile cannot roll a provider thread back")
        conversation = self._require_conversation()
        if not 1 <= turns <= len(conversation.turns):
            raise ValueError(f"the provider thread has {len(conversation.turns)} turns, cannot drop {turns}")
        await asyncio.to_thread(conversation.drop_last, turns)
        return await self.snapshot()

    async def snapshot(self) -> dict[str, Any]:
        if not self.capabilities.read_snapshot and not self.capabilities.rollback:
            raise Unsupported("this profile has no readable snapshot")
        return {"native_ref": self._ref, "turns": [dict(t) for t in self._require_conversation().turns]}

    def _require_conversation(self) -> Conversation:
        if self._conversation is None:
            raise RuntimeError("open_thread must come first")
        return self._conversation

    async def respond(self, request_id: str, response: Response) -> None:
        future = self._pending.get(request_id)
        if future is None or future.done():
            raise Unsupported(f"request {request_id} is not live")
        future.set_result(response)

    async def run_turn(self, turn: Turn, sink: TurnSink) -> None:
        script = sc.parse_script(turn.script) or default_script(turn.text)
        self._starting[turn.attempt_id] = False
        self._turns += 1
        turn_ref = f"scripted-turn-{self._turns}"
        # What a ``recall`` step answers: the turns before this one. The list only grows by appends (a rollback
        # makes a new one), so its length now marks them; copying them made every turn cost the thread's length.
        conversation = self._require_conversation()
        remembered = (conversation.turns, len(conversation.turns))
        conversation.add(turn_ref, turn.text)
        await sink.event(pe.TurnStarted(native_turn_ref=turn_ref))
        status, error = "completed", None
        self._steers[turn.attempt_id], self._woken[turn.attempt_id] = [], asyncio.Event()
        self._remembered[turn.attempt_id] = remembered
        play = self._plays[turn.attempt_id] = asyncio.create_task(
            self._play(script.steps, turn, sink, turn.root_node_id)
        )
        if self._starting.pop(turn.attempt_id, False):
            play.cancel()
        try:
            await asyncio.shield(play)
        except asyncio.CancelledError:
            if not play.cancelled():
                play.cancel()
                raise  # the host is going away, not an interrupt
            # Weak terminal status: the runtime cannot tell an interrupted turn from a finished one.
            status = "interrupted" if self.capabilities.terminal_status == "strong" else "completed"
        except ScriptFailed as exc:
            status, error = "failed", str(exc)
        finally:
            for name in (self._plays, self._steers, self._woken, self._remembered, self._starting):
                name.pop(turn.attempt_id, None)
        await sink.event(pe.TurnCompleted(status=status, error=error))

    async def interrupt(self, turn: Turn) -> None:
        if not self.capabilities.interrupt:
            raise Unsupported("this profile cannot interrupt a turn")
        play = self._plays.get(turn.attempt_id)
        if play is not None:
            play.cancel()
        elif turn.attempt_id in self._starting:
            self._starting[turn.attempt_id] = True

    async def steer(self, turn: Turn, text: str, message_id: str | None = None) -> None:
        """A native steer replaces what was left of the script: the turn answers the steer and ends."""
        if not self.capabilities.active_steering:
            raise Unsupported("this profile cannot steer an active turn")
        if turn.attempt_id not in self._steers:
            raise Unsupported("the turn has ended")
        self._steers[turn.attempt_id].append(text)
        self._woken[turn.attempt_id].set()

    async def _wait(self, turn: Turn, seconds: float | None) -> bool:
        """Sleep (forever when ``seconds`` is None) unless a steer arrives; True when steered."""
        woken = self._woken[turn.attempt_id]
        try:
            await asyncio.wait_for(woken.wait(), seconds)  # the script's pacing
        except TimeoutError:
            return False
        return True

    async def _play_steers(self, turn: Turn, sink: TurnSink, node_id: str) -> bool:
        steers = self._steers.get(turn.attempt_id)
        if not steers:
            return False
        text = "\n".join(steers)
        steers.clear()
        message_id = turn.ids.next("msg")
        reply = f"Steered: {text[:200]}"
        await sink.text(message_id, node_id, reply)
        await sink.text_done(message_id, node_id, reply)
        return True

    async def _play(self, steps: list[Any], turn: Turn, sink: TurnSink, node_id: str) -> bool:
        """Play ``steps``; True when a steer cut them short (the whole turn then ends)."""
        plan_id = turn.ids.next("plan")
        caps = self.capabilities
        declined = False
        for step in steps:
            if await self._play_steers(turn, sink, node_id):
                return True
            if declined:  # a declined approval gates the step after it, which does not run
                declined = False
                await self._unstructured(turn, sink, node_id, "Declined, so I did not do that.")
                continue
            if isinstance(step, sc.Text):
                message_id = turn.ids.next("msg")
                for i in range(0, len(step.text), step.chunk):
                    await sink.text(message_id, node_id, step.text[i : i + step.chunk])
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
                await sink.event(
                    pe.ToolStarted(
                        node_id=tool, parent_id=node_id, title=f"write {step.path}", input={"path": step.path}
                    )
                )
                if len(step.content) <= INLINE_WRITE_CHARS:
                    self._write(step.path, step.content)
                else:
                    await asyncio.to_thread(self._write, step.path, step.content)
                await sink.event(pe.ToolCompleted(node_id=tool, output=f"wrote {len(step.content)} characters"))
            elif isinstance(step, sc.Delay):
                await self._wait(turn, step.ms / 1000)
            elif isinstance(step, sc.Approval) and step.kind not in caps.approvals:
                await self._unstructured(turn, sink, node_id, f"(ran without asking: {step.prompt})")
            elif isinstance(step, sc.Question) and not caps.structured_questions:
                await self._unstructured(turn, sink, node_id, step.prompt)  # L11.4: only an assistant message
            elif isinstance(step, (sc.Approval, sc.Question)):
                answer = await self._ask(step, turn, sink, node_id)
                declined = isinstance(step, sc.Approval) and answer.decision in ("decline", "cancel")
            elif isinstance(step, sc.Todo):
                if caps.todo_list:
                    await sink.event(
                        pe.PlanUpdated(plan_id=plan_id, kind="todo_list", node_id=node_id, items=step.items)
                    )
            elif isinstance(step, sc.ProposedPlan):
                if caps.proposed_plan:
                    await sink.event(
                        pe.PlanUpdated(
                            plan_id=turn.ids.next("plan"), kind="proposed_plan", node_id=node_id, text=step.text
                        )
                    )
            elif isinstance(step, sc.Subagent):
                child = turn.ids.next("node")
                # L6.4: with ``fork_subagent`` a subagent plays in a provider thread of its own, named after its node.
                own = f"{self._ref}~sub~{child}" if caps.fork_subagent else None
                await sink.event(
                    pe.ToolStarted(
                        node_id=child, parent_id=node_id, kind="subagent", title=step.title, native_thread_ref=own
                    )
                )
                steered = await self._play(step.steps, turn, sink, child)
                await sink.event(pe.ToolCompleted(node_id=child))
                if steered:
                    return True
            elif isinstance(step, sc.Fail):
                if step.fatal:
                    raise ScriptFailed(step.message)
                await sink.event(pe.Warning(message=step.message))
            elif isinstance(step, sc.Crash):
                raise RuntimeLost("the scripted runtime crashed")
            elif isinstance(step, sc.Echo):
                await self._unstructured(turn, sink, node_id, step.prefix + turn.text)
            elif isinstance(step, sc.Recall):
                turns, before = self._remembered.get(turn.attempt_id, ([], 0))
                remembered = [t["input"] for t in turns[:before]]
                await self._unstructured(turn, sink, node_id, step.prefix + json.dumps(remembered))
            elif isinstance(step, sc.Hang):
                await self._wait(turn, None)  # only a steer, an interrupt or a crash ends this
        return await self._play_steers(turn, sink, node_id)

    async def _unstructured(self, turn: Turn, sink: TurnSink, node_id: str, text: str) -> None:
        message_id = turn.ids.next("msg")
        await sink.text(message_id, node_id, text)
        await sink.text_done(message_id, node_id, text)

    async def _ask(self, step: sc.Approval | sc.Question, turn: Turn, sink: TurnSink, parent_id: str) -> Response:
        request_id, node_id = turn.ids.next("req"), turn.ids.next("node")
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        parent = None if parent_id == turn.root_node_id else parent_id
        if isinstance(step, sc.Question):
            options = [
                QuestionOption(label=o)
                if isinstance(o, str)
                else QuestionOption(label=o.label, description=o.description)
                for o in step.options
            ]
            body = pe.RequestOpened(
                request_id=request_id,
                node_id=node_id,
                parent_id=parent,
                kind="user_input",
                prompt=step.prompt,
                questions=[Question(id="0", question=step.prompt, options=options)],
            )
        else:
            files = [FileEdit(path=f.path, change=f.change, diff=f.diff, move_to=f.move_to) for f in step.files]
            cwd = (step.cwd or str(self.workspace)) if step.command is not None else None
            acted = step.command is not None or bool(files)
            body = pe.RequestOpened(
                request_id=request_id,
                node_id=node_id,
                parent_id=parent,
                kind=step.kind,
                # with an action the prompt words it and the script's prompt is the model's description
                prompt=action_prompt(command=step.command, cwd=cwd, files=files) if acted else step.prompt,
                description=(step.prompt or None) if acted else None,
                command=step.command,
                cwd=cwd,
                files=files,
                detail=step.detail,
            )
        await sink.event(body)
        try:
            return await future
        finally:
            self._pending.pop(request_id, None)

    def _write(self, relative: str, content: str) -> None:
        """Write inside the workspace without ever following a link: each directory is opened relative to
        the one before with O_NOFOLLOW (the agent's own files may be links to anywhere, and this runs as the
        host's root), the file itself too, and a file with other hard links is not written through."""
        parts = [p for p in Path(relative).parts if p not in ("", ".")]
        if not parts or Path(relative).is_absolute() or ".." in parts:
            raise ScriptFailed(f"write_file outside the workspace: {relative}")
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        # The workspace is Treadle's own path (the checkpoint service makes it), opened as resolve() would find it.
        try:
            current = os.open(self.workspace, flags & ~os.O_NOFOLLOW)
        except FileNotFoundError:
            self.workspace.mkdir(parents=True, exist_ok=True)
            current = os.open(self.workspace, flags & ~os.O_NOFOLLOW)
        try:
            for part in parts[:-1]:
                try:
                    try:
                        following = os.open(part, flags, dir_fd=current)
                    except FileNotFoundError:  # made here (most runs write into directories that exist)
                        self._make_dir(part, current)
                        following = os.open(part, flags, dir_fd=current)
                except OSError as exc:  # ELOOP / ENOTDIR: a link or a file where a directory should be
                    raise ScriptFailed(f"write_file {relative}: {part} is not a directory of the workspace") from exc
                os.close(current)
                current = following
            try:
                fd = os.open(
                    parts[-1],
                    os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                    0o644,
                    dir_fd=current,
                )
            except OSError as exc:
                raise ScriptFailed(
                    f"write_file {relative}: not a plain file of the workspace ({exc.strerror})"
                ) from exc
            with os.fdopen(fd, "w") as f:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
                    raise ScriptFailed(f"write_file {relative}: not a plain file of the workspace")
                if self._owner is not None and (st.st_uid, st.st_gid) != (self._owner.uid, self._owner.gid):
                    os.fchown(fd, self._owner.uid, self._owner.gid)
                if st.st_size:  # a truncation, even of an empty file, makes ext4 write the data back at close
                    os.ftruncate(fd, 0)
                f.write(content)
        finally:
            os.close(current)

    def _make_dir(self, name: str, parent: int) -> None:
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
        except FileExistsError:  # made meanwhile (or a link: the caller's O_NOFOLLOW open refuses it)
            return
        if self._owner is not None:
            os.chown(name, self._owner.uid, self._owner.gid, dir_fd=parent, follow_symlinks=False)
