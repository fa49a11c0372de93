"""Answering a runtime request from the terminal while a run is shown (``send --wait``, ``watch``): an approval
takes a decision, a question a text (or one of its options). Prompts go to stderr, answers come from stdin (a
terminal, or lines piped in); with input off, or stdin at its end, the CLI stops with NEEDS_INPUT and says how
to answer instead of hanging."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from rich.markup import escape

from ..client import AsyncTreadle, Conflict
from .exits import NeedsInput
from .render import stderr

DECISIONS = {"a": "accept", "s": "accept_for_session", "d": "decline", "c": "cancel"}
TRIES = 3  # unreadable answers before giving up on a non-terminal stdin


def how_to_answer(request: dict) -> str:
    hint = "--message TEXT" if request["kind"] == "user_input" else "--decision accept|decline"
    return (
        f"run {request['run_id']} waits for an answer to {request['kind']} request {request['id']}"
        f" ({request.get('prompt', '')!r}): `treadle requests answer {request['id']} {hint}`"
    )


def parse_answer(request: dict, line: str) -> dict[str, Any] | None:
    """The respond body a line of input stands for (None: not an answer to this request)."""
    text = line.strip()
    if not text:
        return None
    if request["kind"] != "user_input":
        decision = DECISIONS.get(text[0].lower()) if text.lower() not in DECISIONS.values() else text.lower()
        return {"decision": decision} if decision else None
    options = (request.get("detail") or {}).get("options") or []
    if text.isdigit() and 1 <= int(text) <= len(options):
        text = str(options[int(text) - 1])
    return {"message": text}


def _question(request: dict) -> str:
    head = (
        f"[yellow]?[/] [bold]{escape(request['kind'])}[/] {escape(request['id'])}: {escape(request.get('prompt', ''))}"
    )
    if request["kind"] != "user_input":
        return head + "\n  " + escape("[a]ccept, accept for [s]ession, [d]ecline, [c]ancel › ")
    options = (request.get("detail") or {}).get("options") or []
    listed = "".join(f"\n  {i}) {escape(str(o))}" for i, o in enumerate(options, 1))
    return head + listed + "\n  your answer › "


async def answer(client: AsyncTreadle, request: dict, *, allow_input: bool) -> dict | None:
    """Ask for and send the answer to ``request``; the acknowledgement, or None when someone else answered it
    first. Raises NeedsInput when it may not or cannot ask."""
    if not allow_input:
        raise NeedsInput(how_to_answer(request))
    for _ in range(TRIES if not sys.stdin.isatty() else 1_000):
        stderr.print(_question(request), end="", soft_wrap=True)
        line = await asyncio.to_thread(sys.stdin.readline)
        if line == "":
            stderr.print()
            raise NeedsInput(how_to_answer(request) + " (stdin ended)")
        body = parse_answer(request, line)
        if body is None:
            stderr.print("[yellow]not an answer to this request[/]")
            continue
        try:
            ack = await client.respond(request["id"], **body)
        except Conflict as exc:  # answered elsewhere meanwhile, or its callback is gone
            stderr.print(f"[yellow]{escape(exc.message)}[/]")
            return None
        stderr.print(f"[green]✓[/] answered {escape(request['id'])}: {escape(str(next(iter(body.values()))))}")
        return {"request_id": request["id"], **body, "seq": ack.seq}
    raise NeedsInput(how_to_answer(request) + " (no answer understood)")
