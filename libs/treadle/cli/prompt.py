"""Answering a runtime request from the terminal while a run is shown (``send --wait``, ``watch``): an approval
takes a decision, a question an answer per question (one of its options by number, or text). Prompts go to
stderr, answers come from stdin (a terminal, or lines piped in); with input off, or stdin at its end, the CLI
stops with NEEDS_INPUT and says how to answer instead of hanging. The request is read through the API (its
whole shape: the action an approval would take, the questions), and only while it still waits for an answer."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from rich.markup import escape

from ..client import AsyncTreadle, Conflict
from .exits import NeedsInput
from .output import builtins
from .render import stderr

DECISIONS = {"a": "accept", "s": "accept_for_session", "d": "decline", "c": "cancel"}
TRIES = 3  # unreadable answers before giving up on a non-terminal stdin


def how_to_answer(request: dict[str, Any]) -> str:
    if request["kind"] == "user_input":
        hint = " ".join(f"--answer {q['id']}=TEXT" for q in request.get("questions") or []) or "--message TEXT"
    else:
        hint = "--decision accept|decline"
    return (
        f"run {request['run_id']} waits for an answer to {request['kind']} request {request['id']}"
        f" ({request.get('prompt', '')!r}): `treadle requests answer {request['id']} {hint}`"
    )


def parse_decision(line: str) -> str | None:
    text = line.strip().lower()
    if text in DECISIONS.values():
        return text
    return DECISIONS.get(text[:1]) if text else None


def parse_choice(question: dict[str, Any], line: str) -> str | None:
    """A question's answer: an option's label by its number, or the text as typed (None: nothing typed)."""
    text = line.strip()
    options = question.get("options") or []
    if text.isdigit() and 1 <= int(text) <= len(options):
        option = options[int(text) - 1]
        return str(option["label"] if isinstance(option, dict) else option)
    return text or None


def _approval(request: dict[str, Any]) -> str:
    lines = [f"[yellow]?[/] [bold]{escape(request['kind'])}[/] {escape(request['id'])}: {escape(request['prompt'])}"]
    if request.get("description"):
        lines.append(f"  [dim](the model says: {escape(request['description'])!s})[/]")
    lines.append("  " + escape("[a]ccept, accept for [s]ession, [d]ecline, [c]ancel › "))
    return "\n".join(lines)


def _question(request: dict[str, Any], question: dict[str, Any]) -> str:
    head = f"[yellow]?[/] [bold]question[/] {escape(request['id'])}: {escape(question['question'])}"
    listed = "".join(
        f"\n  {i}) {escape(o['label'] if isinstance(o, dict) else str(o))}"
        + (f" [dim]— {escape(o['description'])}[/]" if isinstance(o, dict) and o.get("description") else "")
        for i, o in enumerate(question.get("options") or [], 1)
    )
    return head + listed + "\n  your answer › "


async def _ask(request: dict[str, Any], text: str, parse: Any) -> Any:
    """One answer read from stdin after showing ``text``; asked again while it is not an answer."""
    for _ in range(TRIES if not sys.stdin.isatty() else 1_000):
        stderr.print(text, end="", soft_wrap=True)
        line = await asyncio.to_thread(sys.stdin.readline)
        if line == "":
            stderr.print()
            raise NeedsInput(how_to_answer(request) + " (stdin ended)")
        if (value := parse(line)) is not None:
            return value
        stderr.print("[yellow]not an answer to this request[/]")
    raise NeedsInput(how_to_answer(request) + " (no answer understood)")


async def answer(client: AsyncTreadle, request: dict[str, Any], *, allow_input: bool) -> dict[str, Any] | None:
    """Ask for and send the answer to ``request`` (a RuntimeRequest as JSON); the answer sent, or None when
    someone else answered it first. Raises NeedsInput when it may not or cannot ask."""
    if not allow_input:
        raise NeedsInput(how_to_answer(request))
    body: dict[str, Any]
    if request["kind"] != "user_input":
        body = {"decision": await _ask(request, _approval(request), parse_decision)}
    elif request.get("questions"):
        answers = {}
        for question in request["questions"]:
            answers[question["id"]] = await _ask(
                request, _question(request, question), lambda s, q=question: parse_choice(q, s)
            )
        body = {"answers": answers}
    else:
        one = {"question": request.get("prompt", ""), "options": []}
        body = {"message": await _ask(request, _question(request, one), lambda s: parse_choice(one, s))}
    try:
        ack = await client.respond(request["id"], **body)
    except Conflict as exc:  # answered elsewhere meanwhile, or its callback is gone
        stderr.print(f"[yellow]{escape(exc.message)}[/]")
        return None
    stderr.print(f"[green]✓[/] answered {escape(request['id'])}: {escape(str(next(iter(body.values()))))}")
    return {"request_id": request["id"], **body, "seq": ack.seq}


async def answer_pending(
    client: AsyncTreadle, thread: str, request_id: str, *, allow_input: bool
) -> dict[str, Any] | None:
    """Answer a request an event named, if it still waits for an answer (a stream replays old ones too)."""
    page = await client.list_requests(thread, status="pending")
    pending = [r async for r in page if r.id == request_id]
    if not pending:
        return None
    return await answer(client, builtins(pending[0]), allow_input=allow_input)
