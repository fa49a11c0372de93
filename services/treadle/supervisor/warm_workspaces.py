"""Which threads' workspaces are known to be on their volume at a checkpoint, so a warm turn skips the hydrate.

A hydrate of a workspace that is on disk changes nothing: it revives an evicted workspace, or checks that the git
dir holds the run's base commit. Both are settled without asking when this process saw that commit captured in
the workspace while the session that plays the next turn was already live: a capture revives an evicted
workspace under the workspace's lock, and eviction never takes one whose thread has a live session (it reads the
thread's events under that same lock, core/eviction.py), and sessions never come back under their id. Anything
else (another session, volume or commit, a restart of this process) hydrates as before.
"""

from __future__ import annotations

from collections import OrderedDict


class WarmWorkspaces:
    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[tuple[str, str], tuple[str, str, str, str]] = OrderedDict()

    def captured(self, tenant: str, thread: str, *, volume: str, workspace: str, commit: str, session_id: str) -> None:
        """``commit`` was captured in the thread's workspace on ``volume`` after a turn of the live ``session_id``."""
        key = (tenant, thread)
        self._seen[key] = (volume, workspace, commit, session_id)
        self._seen.move_to_end(key)
        while len(self._seen) > self._capacity:
            self._seen.popitem(last=False)

    def holds(self, tenant: str, thread: str, *, volume: str, workspace: str, commit: str, session_id: str) -> bool:
        """The workspace is on disk at ``commit`` and has been since a capture under the still live session."""
        return self._seen.get((tenant, thread)) == (volume, workspace, commit, session_id)

    def forget(self, tenant: str, thread: str) -> None:
        self._seen.pop((tenant, thread), None)
