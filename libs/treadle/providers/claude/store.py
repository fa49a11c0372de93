"""Where Claude Code keeps a tenant's conversations, and what Treadle reads from them.

Each provider session runs the CLI with a private ``CLAUDE_CONFIG_DIR``; its ``projects`` directory (the
conversation transcripts, ``<cwd-key>/<session id>.jsonl``) is a link to the tenant's shared store, so a
provider thread outlives the process and the session that wrote it (L9.2, L9.3). Forks are recorded here
and materialised by the first turn of the fork (Claude Code writes a forked session only once it is used).
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import msgspec


class PendingFork(msgspec.Struct, kw_only=True):
    source: str  # the session forked from
    at: str | None = None  # resume the source only up to this transcript entry (None: all of it)


class LastEnded(msgspec.Struct, kw_only=True):
    """The prompt of the last turn that reported its end to Treadle. A later turn in the transcript was cut
    off by a crash of the host; Treadle plays its message again as a new attempt, so a resume leaves the
    cut-off turn out instead of showing the model the same message twice."""

    prompt: str


class PendingRewind(msgspec.Struct, kw_only=True):
    """A rollback not yet followed by a turn: until one is written, the transcript's newest entry is still
    on the dropped branch, so every resume must say where the conversation now ends."""

    at: str


_TRANSCRIPT = re.compile(r"projects/(?P<key>[A-Za-z0-9._-]{1,200})/(?P<session>[0-9a-f-]{36})\.jsonl")


class SessionStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.projects = root / "projects"
        self._forks = root / "forks"

    def ensure(self) -> None:
        self.projects.mkdir(parents=True, exist_ok=True)
        self._forks.mkdir(parents=True, exist_ok=True)

    def link_into(self, config_dir: Path) -> None:
        """Make ``config_dir/projects`` the shared store (the rest of the config dir stays private)."""
        config_dir.mkdir(parents=True, exist_ok=True)
        link = config_dir / "projects"
        if link.is_symlink() and link.resolve() == self.projects.resolve():
            return
        if link.is_symlink() or link.exists():
            raise RuntimeError(f"{link} exists and is not a link to the session store {self.projects}")
        os.symlink(self.projects.resolve(), link, target_is_directory=True)

    def transcript(self, session_id: str) -> Path | None:
        return next(iter(self.projects.glob(f"*/{session_id}.jsonl")), None)

    def resume_files(self, session_id: str, known: str | None = None) -> list[str]:
        """Issue 35: what a resume of ``session_id`` reads here (relative to the store's root): its transcript
        and Treadle's records of where the conversation now ends. Empty when nothing was written yet.
        ``known``: the transcript as an earlier call named it, taken while it is still a regular file there
        (one session's CLI keeps one workspace, so one project), instead of searching every project."""
        if known is not None and _regular(self.root / known):
            kept = [known]
        else:
            transcript = self.transcript(session_id)
            if transcript is None or transcript.is_symlink():
                return []
            kept = [f"projects/{transcript.parent.name}/{transcript.name}"]
        records = [f"forks/{session_id}.{suffix}" for suffix in ("ended.json", "rewind.json")]
        return kept + [r for r in records if (self.root / r).is_file()]

    @staticmethod
    def resume_file_of(name: str, session_id: str) -> bool:
        """Whether ``name`` (from a kept state) is one of ``resume_files(session_id)``'s kinds."""
        if name in (f"forks/{session_id}.ended.json", f"forks/{session_id}.rewind.json"):
            return True
        found = _TRANSCRIPT.fullmatch(name)
        return found is not None and found["session"] == session_id and found["key"] not in (".", "..")

    def record_fork(self, session_id: str, fork: PendingFork) -> None:
        self._write(self._forks / f"{session_id}.json", msgspec.json.encode(fork))

    def pending_fork(self, session_id: str) -> PendingFork | None:
        path = self._forks / f"{session_id}.json"
        return msgspec.json.decode(path.read_bytes(), type=PendingFork) if path.exists() else None

    def forget(self, session_id: str) -> None:
        """Everything kept of ``session_id`` (a throwaway conversation): its transcript and its records."""
        for path in self.projects.glob(f"*/{session_id}.jsonl"):
            path.unlink(missing_ok=True)
        for suffix in ("json", "ended.json", "rewind.json"):
            (self._forks / f"{session_id}.{suffix}").unlink(missing_ok=True)

    def forget_fork(self, session_id: str) -> None:
        (self._forks / f"{session_id}.json").unlink(missing_ok=True)

    def record_ended(self, session_id: str, prompt: str) -> None:
        self._write(self._forks / f"{session_id}.ended.json", msgspec.json.encode(LastEnded(prompt=prompt)))

    def resume_point(self, session_id: str) -> str | None:
        """Where a resume of ``session_id`` must stop: a pending rollback's point, else the end of the last
        turn that ended when turns after it were cut off; None for the whole conversation."""
        rewind = self.pending_rewind(session_id)
        if rewind is not None:
            return rewind.at
        path = self._forks / f"{session_id}.ended.json"
        if not path.exists():
            return None
        ended = msgspec.json.decode(path.read_bytes(), type=LastEnded).prompt
        turns = self.turns(session_id)
        for i, (prompt, last) in enumerate(turns):
            if prompt == ended:
                return last if i < len(turns) - 1 else None
        return None

    def record_rewind(self, session_id: str, rewind: PendingRewind) -> None:
        self._write(self._forks / f"{session_id}.rewind.json", msgspec.json.encode(rewind))

    def pending_rewind(self, session_id: str) -> PendingRewind | None:
        path = self._forks / f"{session_id}.rewind.json"
        return msgspec.json.decode(path.read_bytes(), type=PendingRewind) if path.exists() else None

    def forget_rewind(self, session_id: str) -> None:
        (self._forks / f"{session_id}.rewind.json").unlink(missing_ok=True)

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)

    def turns(self, session_id: str, leaf: str | None = None) -> list[tuple[str, str]]:
        """The turns of a conversation as (prompt uuid, uuid of the turn's last entry), oldest first.

        The transcript is a tree (a rollback or a truncated resume starts a new branch); the conversation
        is the chain of ``parentUuid`` links from its newest entry (or from ``leaf``) back to the first.
        A turn starts at a prompt Treadle sent (``promptSource: sdk``) and runs until the next one; what the
        harness adds in between (tool results, interruption notes, task notifications) belongs to it."""
        path = self.transcript(session_id)
        if path is None:
            return []
        rewind = self.pending_rewind(session_id)
        leaf = leaf or (rewind.at if rewind else None)
        entries: dict[str, dict[str, Any]] = {}
        newest = None
        with path.open() as lines:
            for line in lines:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a torn last line of a crashed writer
                uuid = entry.get("uuid")
                if uuid and not entry.get("isSidechain"):
                    entries[uuid] = entry
                    newest = uuid
        chain: list[dict[str, Any]] = []
        at = leaf or newest
        while at in entries and len(chain) <= len(entries):
            chain.append(entries[at])
            at = entries[at].get("parentUuid")
        turns: list[list[str]] = []
        for entry in reversed(chain):
            if entry.get("type") == "user" and entry.get("promptSource") == "sdk":
                turns.append([entry["uuid"], entry["uuid"]])
            elif turns:
                turns[-1][1] = entry["uuid"]
        return [(prompt, last) for prompt, last in turns]


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
