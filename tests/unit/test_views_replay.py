"""Views folded from an event log recorded before the views existed (at 8b9b00d, on the embedded stack: three
threads with tools, a subagent, an approval, a question, todo lists, a proposed plan implemented, a queue, an
interrupt, a clean-context run, a fork and a rollback) equal the documents the API served for them then.

``fixtures/replay-events.jsonl`` is that stream (one ``{seq, subject, data}`` a line, keys sorted); ``fixtures/replay-views.json``
is every document the API answered at the end, less what the views leave out of the fold: ``provider_seq``, the
attempts' ``provider_index`` and the ``command_id`` of threads, messages and requests.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from tests.support.stored_fields import as_stored
from treadle.core.events import decode_event
from treadle.core.state import ThreadState, evolve
from treadle.projections import document
from treadle.views import of_state
from treadle.views.thread import ThreadView, handoff_view, lineage_node, queue_view, run_view, summary, thread_head

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _folded() -> dict[str, ThreadState]:
    states: dict[str, ThreadState] = {}
    for line in (FIXTURES / "replay-events.jsonl").read_text().splitlines():
        row = json.loads(line)
        e = decode_event(json.dumps(row["data"]).encode(), row["seq"])
        evolve(states.setdefault(e.thread, ThreadState()), e)
    return states


def _json(value) -> object:
    return json.loads(msgspec.json.encode(value))


FREE_FORM = {"script", "input", "detail", "response", "source_point", "base_point"}  # dicts, not views


def _ordered(value, free: bool = False):
    """The value with free-form dicts' keys sorted (the recording stored events with sorted keys), the
    views' own fields left in the order they are served."""
    if isinstance(value, dict):
        items = sorted(value.items()) if free else value.items()
        return {k: _ordered(v, free or k in FREE_FORM) for k, v in items}
    if isinstance(value, list):
        return [_ordered(v, free) for v in value]
    return value


def test_views_of_a_log_recorded_before_them_are_the_documents_the_api_served():
    expected = json.loads((FIXTURES / "replay-views.json").read_text())
    docs = expected["documents"]
    states = _folded()
    views: dict[str, ThreadView] = {t: of_state.thread_view(states[t]) for t in expected["threads"]}
    got: dict[str, object] = {}
    for thread, view in views.items():
        state = states[thread]
        assert document.assemble(as_stored(document.fields(state))) == document.encode(state)  # as Redis holds it
        got[f"/v1/threads/{thread}"] = json.loads(document.encode(state))
        for run in view.runs:
            got[f"/v1/runs/{run.id}"] = _json(run_view(view, run.id))
        for h in view.handoffs:
            got[f"/v1/handoffs/{h.id}"] = _json(handoff_view(view, h.id))
        got[f"/v1/threads/{thread}/queue"] = _json(queue_view(view))
        # Recorded before the lists were paged: the items of a page, in the shape of the time.
        got[f"/v1/threads/{thread}/requests"] = {"requests": _json(view.requests)}
        got[f"/v1/threads/{thread}/activity"] = {"activity": _json(view.activity)}
    root, fork, other = (views[t] for t in expected["threads"])
    tree = lineage_node(thread_head(root), [lineage_node(thread_head(fork), [])])
    for view, root_view, node in (
        (root, root, tree),
        (fork, root, tree),
        (other, other, lineage_node(thread_head(other), [])),
    ):
        assert root_view.thread and view.thread
        got[f"/v1/threads/{view.thread.id}/lineage"] = {
            "thread_id": view.thread.id,
            "root_thread_id": root_view.thread.id,
            "tree": _json(node),
        }
    newest_first = sorted(views.values(), key=lambda v: v.thread.created_at if v.thread else 0, reverse=True)
    got["/v1/threads"] = {"threads": [_json(summary(v)) for v in newest_first]}  # the items of its first page
    assert [json.loads(msgspec.json.encode(of_state.summary(states[t]))) for t in expected["threads"]] == [
        _json(summary(views[t])) for t in expected["threads"]
    ]
    assert sorted(got) == sorted(docs)
    for path in docs:
        assert json.dumps(_ordered(got[path])) == json.dumps(_ordered(docs[path])), path  # in the same order too
