"""Views from the domain's folded state: the one place the read contract meets the domain.

``thread_view`` maps a whole ``ThreadState``; ``part`` and ``item`` map one top-level field or one element
of a long list, so the projection writer converts only what a batch of events changed. The mapping is by
field name (``msgspec.convert`` from attributes): a field of the state that no view declares stays out of
the API (``provider_seq``, attempts' ``provider_index``, the ``command_id`` of threads, messages and
requests).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args, get_type_hints

import msgspec

from treadle.domain import events as ev
from treadle.domain.thread import ThreadState, fold

from .thread import ThreadSummary, ThreadView

_PART_TYPES: dict[str, Any] = get_type_hints(ThreadView)
_ITEM_TYPES: dict[str, Any] = {name: get_args(t)[0] for name, t in _PART_TYPES.items()
                               if getattr(t, "__origin__", None) is list}
FIELDS: tuple[str, ...] = ThreadView.__struct_fields__


def thread_view(state: ThreadState) -> ThreadView:
    return msgspec.convert(state, ThreadView, from_attributes=True)


def part(state: ThreadState, name: str) -> Any:
    """The view of one top-level field of the thread document."""
    return msgspec.convert(getattr(state, name), _PART_TYPES[name], from_attributes=True)


def item(name: str, value: Any) -> Any:
    """The view of one element of list field ``name`` (a message, run, checkpoint, activity or handoff)."""
    return msgspec.convert(value, _ITEM_TYPES[name], from_attributes=True)


def summary(state: ThreadState) -> ThreadSummary:
    """The thread's list item (as ``thread.summary`` gives it from the views), without converting them all."""
    t = state.thread
    assert t is not None
    last = state.runs[-1] if state.runs else None
    return ThreadSummary(id=t.id, title=t.title, provider=t.provider, created_at=t.created_at.isoformat(),
                         seq=state.seq, runs=len(state.runs), active_run_id=state.active_run_id,
                         last_run_status=last.status if last else None)


def replay(events: Iterable[ev.Envelope]) -> ThreadView | None:
    """The views of a thread folded from its events (None: the log has no such thread)."""
    state = fold(events)
    return thread_view(state) if state.thread is not None else None
