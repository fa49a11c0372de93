"""Retention policy for checkpoint refs: which refs of idle threads may go (pure, no I/O).

Refs live under ``refs/treadle/checkpoints/<thread>/``: ``root/<ordinal>`` (a run's checkpoint),
``root/<node>/…/<ordinal>`` (child scopes, L10.3), ``undo/<restore>`` (the state before a rollback) and
``stale/<restore>/…`` (checkpoints a rollback retired). A thread is idle when its newest ref is older
than ``idle_seconds``; an idle thread keeps its ``keep_latest`` newest root checkpoints and every ref
created since the oldest of those, and loses the rest. Active threads are never touched.
"""

from __future__ import annotations

from dataclasses import dataclass

_PREFIX = "refs/treadle/checkpoints/"


@dataclass(frozen=True, slots=True)
class RefInfo:
    name: str
    commit: str
    mtime: float  # when the ref was written (0 when unknown, e.g. packed by `git gc`)


def refs_to_prune(refs: list[RefInfo], *, now: float, idle_seconds: float, keep_latest: int) -> list[RefInfo]:
    if keep_latest < 1:
        raise ValueError("keep_latest must be >= 1: the latest checkpoint is never pruned")
    by_thread: dict[str, list[RefInfo]] = {}
    for ref in refs:
        if ref.name.startswith(_PREFIX):
            by_thread.setdefault(ref.name[len(_PREFIX) :].split("/", 1)[0], []).append(ref)
    doomed: list[RefInfo] = []
    for thread, items in by_thread.items():
        if now - max(r.mtime for r in items) < idle_seconds:
            continue
        ordinals = [(ordinal, r) for r in items if (ordinal := _root_ordinal(r, thread)) is not None]
        roots = [r for _, r in sorted(ordinals, key=lambda pair: pair[0])]
        kept = roots[-keep_latest:]
        since = min((r.mtime for r in kept), default=float("inf"))
        keep = {r.name for r in kept}
        doomed.extend(r for r in items if r.name not in keep and (r in roots or r.mtime < since))
    return sorted(doomed, key=lambda r: r.name)


def _root_ordinal(ref: RefInfo, thread: str) -> int | None:
    rest = ref.name[len(_PREFIX) + len(thread) + 1 :]
    scope, _, leaf = rest.rpartition("/")
    return int(leaf) if scope == "root" and leaf.isdigit() else None
