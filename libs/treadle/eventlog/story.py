"""The story of runs in the logs: one INFO line per fact an operator follows (a run queued, held and why,
started, recovered, ended and how; a provider session started or stopped and why; an approval asked or
answered), written where every such fact is appended (``ThreadStore.append``), by whichever worker decided it.

``line`` is pure: an event in, the sentence and the named fields of its line out (None for the many events that
are no transition: deltas, nodes, messages). ``tell`` writes them, each bound to the event's tenant, thread, run
and attempt, so ``grep run=run_…`` (or a JSON query on ``run``) reads a run's whole story across the workers."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from treadle.core.envelope import Envelope

log = logging.getLogger("treadle.runs")
# The ``extra=`` key of a line's named fields, which runtime/logs.py's formatters write (ids among them go
# where bound ids go): this layer is below the worker kit's logging, so it names the key and the kit reads it.
FIELDS_KEY = "treadle_fields"

Fields = dict[str, str | int | None]


def _text(value: Any, limit: int = 300) -> str | None:
    """A reason as one bounded line: an error text may be long or span lines."""
    if value is None:
        return None
    flat = " ".join(str(value).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def line(e: Envelope) -> tuple[str, Fields] | None:
    """The sentence and fields of ``e``'s line, or None when ``e`` is no transition worth a line."""
    d, kind = e.data, e.type

    def get(name: str) -> Any:  # every payload is a different struct
        return getattr(d, name, None)

    if kind == "run.queued":
        return "run queued", {"ordinal": get("ordinal"), "provider": get("provider"), "mode": get("mode")}
    if kind == "run.held":
        return f"run held: {get('reason')}", {"reason": get("reason")}
    if kind == "run.started":
        return "run started", {"session": get("session_id")}
    if kind == "message.delta" and (started := get("started")) is not None:  # carried by the turn's first text
        return "run started", {"session": started.session_id}
    if kind == "attempt.started":
        reason = get("reason")
        verb = "run restarted for a steer" if reason == "steering_restart" else "run recovered with a new attempt"
        return f"{verb} ({reason})", {"reason": reason}
    if kind == "attempt.ended":
        reason = _text(get("reason"))
        return f"attempt ended {get('status')}" + (f": {reason}" if reason else ""), {"reason": reason}
    if kind in ("run.completed", "run.failed", "run.interrupted", "run.cancelled"):
        reason = _text(get("error"))
        started = get("started")  # the run's start, carried by its end (a turn over at once)
        ended: Fields = {"reason": reason} | ({"session": started.session_id} if started is not None else {})
        return f"run {kind.split('.')[1]}" + (f": {reason}" if reason else ""), ended
    if kind == "interrupt.requested":
        return f"interrupt requested ({get('reason')})", {"reason": get("reason"), "by": get("by")}
    if kind == "provider.attached":
        resumed = "resumed" if get("resumed") else "new"
        fields: Fields = {"session": get("session_id"), "provider": get("provider"), "host": get("host_id")}
        return f"session started ({resumed} provider thread)", fields
    if kind == "provider.stopped":
        reason = _text(get("detail")) or get("reason")
        return f"session stopped: {get('reason')}", {"session": get("session_id"), "reason": reason}
    if kind == "provider.resume_failed":
        return "session could not resume", {"reason": _text(get("reason"))}
    if kind == "request.opened":
        return f"approval asked ({get('kind')})", {"request_id": get("request_id"), "kind": get("kind")}
    if kind == "request.resolved":
        response = get("response") or {}
        decision = response.get("decision") if isinstance(response, dict) else None
        answer = decision or get("status")
        return f"approval answered ({answer})", {"request_id": get("request_id"), "decision": answer}
    return None


def tell(events: Iterable[Envelope]) -> None:
    """Log each transition among ``events`` (appended just now), bound to the ids it is about."""
    if not log.isEnabledFor(logging.INFO):
        return
    for e in events:
        if (said := line(e)) is None:
            continue
        sentence, fields = said
        ids = {"tenant": e.tenant, "thread": e.thread, "run": getattr(e.data, "run_id", None)}
        ids["attempt"] = getattr(e.data, "attempt_id", None)
        named = {**ids, "event": e.type, "seq": e.seq, **fields}
        log.info(sentence, extra={FIELDS_KEY: {k: v for k, v in named.items() if v is not None}})
