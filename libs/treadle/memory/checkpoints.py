"""Workspace checkpoints in memory (``ports.CheckpointStore``): workspaces are dicts of text files the test
writes, checkpoints are content-addressed snapshots of them. It keeps what callers rely on: ordinals per
scope as refs (a repeated capture returns the checkpoint made first; an unchanged one is the previous
commit, without a ref of its own), per-file stats against the previous checkpoint, restores with an undo
point kept per restore id and retired refs moved under ``stale/``, diffs between commits of the workspace,
forks made from a commit, and the same failure codes (``bad_request``, ``path_escape``,
``workspace_missing``, ``unknown_commit``). Not modelled: ignore rules, modes, symlinks, binary files,
submodules, size limits and renames other than exact moves."""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from treadle.checkpoints.hydrate import Hydrate, Hydrated
from treadle.checkpoints.materialize import Materialize, Materialized
from treadle.checkpoints.protocol import (
    MAX_FILES,
    Capture,
    Captured,
    CheckpointError,
    DiffRequest,
    DiffResult,
    FileStat,
    Restore,
    Restored,
    WorkspaceReady,
)
from treadle.checkpoints.refs import checkpoint_ref, thread_prefix
from treadle.checkpoints.restore import EMPTY_TREE, cut
from treadle.checkpoints.validation import check_capture, check_commit, check_scope, check_token

Files = dict[str, str]


@dataclass(frozen=True)
class _Tip:
    commit: str
    tree: str
    written: bool = True  # False: an unchanged capture, held by ``holder``
    holder: str | None = None


@dataclass
class _Workspace:
    files: Files = field(default_factory=dict)
    commits: dict[str, tuple[str, Files]] = field(default_factory=dict)  # commit -> (tree, files)
    refs: dict[str, _Tip] = field(default_factory=dict)
    made_from: str | None = None  # a fork's workspace: the commit it was materialised from
    head: str | None = None  # the commit the workspace was last left at (a capture's or a restore's)


def _hash(*parts: str) -> str:
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()


def _tree(files: Files) -> str:
    return _hash("tree", *(f"{p}\0{t}" for p, t in sorted(files.items()))) if files else EMPTY_TREE


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def stats(old: Files, new: Files) -> list[FileStat]:
    """Per-file changes from ``old`` to ``new``, sorted by path; an exact move is a rename."""
    gone = {p: t for p, t in old.items() if p not in new}
    out: list[FileStat] = []
    for path in sorted(set(old) | set(new)):
        if path in old and path in new:
            if old[path] != new[path]:
                diff = list(difflib.ndiff(_lines(old[path]), _lines(new[path])))
                out.append(
                    FileStat(
                        path=path,
                        change="modified",
                        added=sum(d.startswith("+ ") for d in diff),
                        removed=sum(d.startswith("- ") for d in diff),
                    )
                )
        elif path in new:
            source = next((p for p, t in gone.items() if t == new[path]), None)
            if source is not None:
                del gone[source]
                out.append(FileStat(path=path, change="renamed", added=0, removed=0, old_path=source))
            else:
                out.append(FileStat(path=path, change="added", added=len(_lines(new[path])), removed=0))
    out += [FileStat(path=p, change="deleted", added=0, removed=len(_lines(t))) for p, t in gone.items()]
    return sorted(out, key=lambda f: f.path)


def _patch(old: Files, new: Files) -> str:
    chunks = []
    for path in sorted(set(old) | set(new)):
        if old.get(path) != new.get(path):
            chunks.append(f"diff --git a/{path} b/{path}\n")
            chunks += difflib.unified_diff(
                _lines(old.get(path, "")),
                _lines(new.get(path, "")),
                f"a/{path}" if path in old else "/dev/null",
                f"b/{path}" if path in new else "/dev/null",
            )
    return "".join(chunks)


class MemoryCheckpoints:
    def __init__(self, root: str = "/memory") -> None:
        self._root = root
        self.workspaces: dict[tuple[str, str], _Workspace] = {}
        self.archived: dict[tuple[str, str], _Workspace] = {}  # every workspace's checkpoints, off the "disk"
        self.volumes: list[str] = []  # the volume each request was addressed to (one volume here)
        self.hydrates: list[Hydrate] = []  # every hydrate asked, in order

    # --- the test's side ---------------------------------------------------------------------------

    def files(self, tenant: str, workspace: str) -> Files:
        """The workspace's files, for the test (or the agent) to read and write; it must exist."""
        return self._workspace(tenant, workspace).files

    def on_disk(self, tenant: str, workspace: str) -> bool:
        """The workspace is on the volume (the hosts' disk): what a host checks before an unhydrated turn."""
        return (tenant, self._path(workspace)) in self.workspaces

    def lose(self, tenant: str, workspace: str) -> None:
        """The volume lost the workspace (a disk, an eviction): only its archived checkpoints are left."""
        self.workspaces.pop((tenant, self._path(workspace)))

    # --- the port ----------------------------------------------------------------------------------

    async def prepare(self, tenant: str, thread: str, workspace: str, *, volume: str) -> WorkspaceReady:
        self.volumes.append(volume)
        check_token("tenant", tenant)
        check_token("thread", thread)
        key = (tenant, self._path(workspace))
        created = key not in self.workspaces
        self.archived.setdefault(key, self.workspaces.setdefault(key, _Workspace()))
        return WorkspaceReady(path=self._where(*key), git=True, created=created)

    async def capture(self, req: Capture, *, volume: str) -> Captured:
        self.volumes.append(volume)
        check_capture(req)
        ws = self._workspace(req.tenant, req.workspace)
        ref = checkpoint_ref(req.thread, req.scope, req.ordinal)
        prev_ref = (
            checkpoint_ref(req.thread, req.previous_scope or req.scope, req.previous_ordinal)
            if req.previous_ordinal is not None
            else None
        )
        prev = ws.refs.get(prev_ref) if prev_ref else None
        if (
            prev is None
            and prev_ref
            and req.previous_commit
            and req.previous_tree
            and req.previous_commit in ws.commits
        ):
            prev = _Tip(req.previous_commit, req.previous_tree, written=False, holder=req.previous_ref or prev_ref)
        tip = ws.refs.get(ref)
        if tip is None:
            files, tree = dict(ws.files), _tree(ws.files)
            if prev is not None and tree == prev.tree:
                tip = _Tip(prev.commit, tree, written=False, holder=prev.holder or prev_ref)
            else:
                commit = _hash(
                    "commit",
                    tree,
                    prev.commit if prev else "",
                    req.thread,
                    req.scope,
                    str(req.ordinal),
                    str(len(ws.commits)),
                )
                ws.commits[commit] = (tree, files)
                tip = _Tip(commit, tree)
            ws.refs[ref] = tip
        ws.head = tip.commit
        changed = stats(ws.commits[prev.commit][1], ws.commits[tip.commit][1]) if prev and prev.tree != tip.tree else []
        return Captured(
            ref=tip.holder or ref,
            commit=tip.commit,
            tree=tip.tree,
            ordinal=req.ordinal,
            scope=req.scope,
            status=req.status,
            unchanged=prev is not None and prev.tree == tip.tree,
            files=changed[:MAX_FILES],
            previous_commit=prev.commit if prev else None,
            files_total=len(changed),
        )

    async def diff(self, req: DiffRequest, *, volume: str) -> DiffResult:
        self.volumes.append(volume)
        check_token("tenant", req.tenant)
        check_token("thread", req.thread)
        check_commit(req.from_commit, "from_commit")
        check_commit(req.to_commit, "to_commit")
        ws = self._workspace(req.tenant, req.workspace)
        old = self._files_of(ws, req.from_commit) if req.from_commit else {}
        new = self._files_of(ws, req.to_commit)
        changed = stats(old, new)
        patch = _patch(old, new).encode()
        text, truncated = cut(patch, req.max_bytes)
        return DiffResult(
            files=changed[: req.max_files],
            files_total=len(changed),
            patch=text,
            truncated=truncated,
            patch_bytes=len(patch),
        )

    async def restore(self, req: Restore, *, volume: str) -> Restored:
        self.volumes.append(volume)
        check_token("restore_id", req.restore_id)
        for r in req.retire:
            check_scope(r.scope)
            if r.ordinal < 0:
                raise CheckpointError("bad_request", "ordinals must be >= 0")
        check_commit(req.commit, "commit")
        ws = self._workspace(req.tenant, req.workspace)
        target = self._files_of(ws, req.commit)
        undo_ref = f"{thread_prefix(req.thread)}/undo/{req.restore_id}"
        before = ws.refs.get(undo_ref)
        if before is None:  # a retried restore keeps the state from before its first try
            tree = _tree(ws.files)
            commit = _hash("commit", tree, "", req.thread, "undo", req.restore_id)
            ws.commits[commit] = (tree, dict(ws.files))
            before = ws.refs[undo_ref] = _Tip(commit, tree)
        changed = stats(ws.commits[before.commit][1], target)
        ws.files.clear()
        ws.files.update(target)
        ws.head = req.commit
        retired = []
        for r in req.retire:
            name = checkpoint_ref(req.thread, r.scope, r.ordinal)
            tip = ws.refs.pop(name, None)
            if tip is not None and tip.written:
                stale = f"{thread_prefix(req.thread)}/stale/{req.restore_id}/{r.scope}/{r.ordinal}"
                ws.refs[stale] = tip
                retired.append(stale)
        return Restored(
            commit=req.commit,
            tree=ws.commits[req.commit][0],
            undo_ref=undo_ref,
            undo_commit=before.commit,
            files=changed[:MAX_FILES],
            files_total=len(changed),
            retired=retired,
        )

    async def materialize(self, request: Materialize, *, volume: str) -> Materialized:
        self.volumes.append(volume)
        for name, value in (
            ("tenant", request.tenant),
            ("thread", request.thread),
            ("source thread", request.source_thread),
        ):
            check_token(name, value)
        check_commit(request.commit, "commit")
        key = (request.tenant, self._path(request.workspace))
        source = self.workspaces.get((request.tenant, self._path(request.source_workspace)))
        if key in self.workspaces:
            if self.workspaces[key].made_from == request.commit:
                return Materialized(path=self._where(*key), commit=request.commit, created=False)
            raise CheckpointError("bad_request", f"workspace {request.workspace!r} already exists")
        if source is None:
            raise CheckpointError(
                "workspace_missing", f"the source workspace {request.source_workspace!r} has no checkpoints"
            )
        if request.commit not in source.commits:
            raise CheckpointError("git_error", f"git read-tree failed: {request.commit} is not a commit of the source")
        self.workspaces[key] = _Workspace(files=dict(source.commits[request.commit][1]), made_from=request.commit)
        return Materialized(path=self._where(*key), commit=request.commit, created=True)

    async def hydrate(self, request: Hydrate, *, volume: str) -> Hydrated:
        self.volumes.append(volume)
        self.hydrates.append(request)
        check_token("tenant", request.tenant)
        check_token("thread", request.thread)
        check_commit(request.commit, "commit")
        key = (request.tenant, self._path(request.workspace))
        here, kept = self.workspaces.get(key), self.archived.get(key)
        source = here or kept
        commit = request.commit or (source.head if source else None)
        if source is None or commit is None:
            raise CheckpointError("workspace_missing", f"no checkpoint of {request.workspace!r} is archived")
        if commit not in source.commits:
            raise CheckpointError("unknown_commit" if here is None else "bad_request", f"{commit} is not held")
        tree, files = source.commits[commit]
        if here is None:
            here = self.workspaces[key] = _Workspace(files=dict(files), commits=source.commits, refs=source.refs)
            here.head = commit
            self.archived[key] = here
        return Hydrated(
            checkpoint_id=request.checkpoint_id,
            files=len(files) if here is not source else 0,
            commit=commit,
            tree=tree,
            path=self._where(*key),
            created=here is not source,
        )

    # --- helpers -----------------------------------------------------------------------------------

    @staticmethod
    def _path(workspace: str) -> str:
        rel = PurePosixPath(workspace)
        if not workspace or "\0" in workspace or rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise CheckpointError("path_escape", f"invalid workspace path {workspace!r}")
        return str(rel)

    def _where(self, tenant: str, workspace: str) -> str:
        return f"{self._root}/{tenant}/{workspace}"

    def _workspace(self, tenant: str, workspace: str) -> _Workspace:
        check_token("tenant", tenant)
        ws = self.workspaces.get((tenant, self._path(workspace)))
        if ws is None:
            raise CheckpointError("workspace_missing", f"workspace {workspace!r} does not exist")
        return ws

    @staticmethod
    def _files_of(ws: _Workspace, commit: str) -> Files:
        if commit not in ws.commits:
            raise CheckpointError("unknown_commit", f"{commit} is not a commit of this workspace")
        return ws.commits[commit][1]
