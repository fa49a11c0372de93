"""Workspace checkpoints as git hidden refs (docs/concepts.md "Checkpoints", requirements L10).

A capture never touches the user's branch, HEAD, index or stash: it stages into a Treadle-private
index (`<gitdir>/treadle/index`) or, for a watched worktree, into the private tree model of
incremental.py, writes a tree, commits it with a fixed identity and date and points
`refs/treadle/checkpoints/<thread>/<scope>/<ordinal>` at it.

The git dir is always the service's own, one per workspace (`<shadow_root>/<tenant>/workspaces/<name>-<hash>.git`,
see repo.checkpoint_gitdir), outside the workspace:
the workspace's `.git` (its config, hooks, info/attributes), which the agent writes, is never git's
git dir here, so nothing in it can make a service's git run a command. Its `info/attributes` makes every
attribute of the worktree that transforms content or runs a driver unspecified (runner.NEUTRAL_ATTRIBUTES).
When the service runs as root, every git child runs as the tenant's own uid (sandbox/identity.py), the
tenant's directories and git dirs belong to that uid, and the tenant root is mode 0700.

This module is the front: workspace paths, git dirs and the locks around every request. The work
is in capture.py (and staging.py under it), restore.py, refs.py; git processes in runner.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import stat
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from treadle.checkpoints import capture as captures
from treadle.checkpoints import eviction
from treadle.checkpoints import restore as ops
from treadle.checkpoints.durable import Durable, Where
from treadle.checkpoints.locks import exclusive
from treadle.checkpoints.protocol import (
    Capture,
    Captured,
    CheckpointError,
    DiffRequest,
    DiffResult,
    Prune,
    Pruned,
    Restore,
    Restored,
    WorkspaceReady,
)
from treadle.checkpoints.refs import checkpoint_ref
from treadle.checkpoints.repo import Repo, checkpoint_gitdir, common_dir, user_gitdir, workspace_key
from treadle.checkpoints.runner import NEUTRAL_ATTRIBUTES, GitRunner, Launch, give, make_dirs, own_tree, repo_env
from treadle.checkpoints.staging import Stager
from treadle.checkpoints.validation import check_capture, check_scope, check_token
from treadle.sandbox.identity import TenantIdentities

if TYPE_CHECKING:
    from treadle.checkpoints.archive import CheckpointArchive
    from treadle.checkpoints.hydrate import Hydrate, Hydrated

__all__ = ["CheckpointError", "Workspaces", "DEFAULT_MAX_FILE_BYTES"]

log = logging.getLogger(__name__)

_SHADOWS_KEPT = 4096
DEFAULT_MAX_FILE_BYTES = 50 * 1024 * 1024  # git hosts warn at 50 MB; a checkpoint is no place for build outputs


@dataclass(slots=True)
class _Workspace:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
    used: float = field(default_factory=time.monotonic)  # when a request last touched it (eviction's first look)
    repos: dict[Path, Repo] = field(default_factory=dict)
    stone: Path | None = None  # where its eviction record would be (eviction.tombstone), once asked


class Workspaces:
    """Prepares tenant workspaces under `root/<tenant>/…` and captures their checkpoints."""

    def __init__(
        self,
        root: Path,
        shadow_root: Path,
        *,
        git: str = "git",
        timeout: float = 120.0,
        max_processes: int = 32,
        max_cached: int = 1024,
        watch: bool = True,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        run_as_tenant: bool | None = None,
        archive: CheckpointArchive | None = None,
    ) -> None:
        """``run_as_tenant``: git children run as the tenant's uid (True: required, an error when impossible;
        None: when the service is root and the tenant's uid can reach both roots; False: as the service).
        ``archive``: where every checkpoint is copied before its capture answers (durable.py); None: kept on
        this node only."""
        if max_file_bytes < 0:
            raise ValueError("max_file_bytes must be >= 0 (0: no limit)")
        self._root = Path(root)
        self._shadow_root = Path(shadow_root).resolve()
        self._shadow_root.mkdir(parents=True, exist_ok=True)
        home = self._shadow_root / ".home"  # git's HOME: empty, and nobody's to write
        home.mkdir(mode=0o555, exist_ok=True)
        self._max_cached = max_cached
        self.git = GitRunner(git, timeout, max_processes, home=str(home))
        self.stager = Stager(self.git, watch=watch, max_file_bytes=max_file_bytes)
        self.identities = self._identities(run_as_tenant)
        self.durable = Durable(archive, self.git) if archive is not None else None
        self._launches: dict[str, Launch] = {}
        self._tenant_roots: dict[str, Path] = {}
        self._workspaces: OrderedDict[Path, _Workspace] = OrderedDict()
        self._shadows: dict[tuple[str, str, Path], Path] = {}  # (tenant, thread, resolved workspace) -> git dir
        # (tenant, workspace as asked) -> the path it is while no component is a symlink, and the components to
        # lstat (every request) to know that it still is: the string work done once, the file system's every time.
        self._paths: dict[tuple[str, str], tuple[Path, tuple[str, ...]]] = {}
        self._wheres: dict[tuple[str, str, Path], Where] = {}  # (tenant, thread, worktree) -> where in the archive

    def close(self) -> None:
        """Release the git worker threads (after the service has stopped sending requests)."""
        self.git.close()
        for ws in self._workspaces.values():
            for repo in ws.repos.values():
                repo.close()
        self.stager.close()

    async def prepare(self, tenant: str, thread: str, workspace: str) -> WorkspaceReady:
        check_token("tenant", tenant)
        check_token("thread", thread)
        path, tenant_root = self._resolve(tenant, workspace)
        async with self._locked(path) as ws:
            await eviction.revive(self, ws, tenant, path, tenant_root)
            if path.is_dir():
                repo = await self._open(ws, tenant, thread, path, tenant_root)
                return WorkspaceReady(path=str(path), git=repo.user_gitdir is not None, created=False)
            if path.exists():
                raise CheckpointError("bad_request", f"workspace {workspace!r} is not a directory")
            await self._create(path, self.launch(tenant))
            await self._open(ws, tenant, thread, path, tenant_root)  # its git dir, ready for the baseline
            return WorkspaceReady(path=str(path), git=True, created=True)

    async def capture(self, req: Capture) -> Captured:
        check_capture(req)
        ref = checkpoint_ref(req.thread, req.scope, req.ordinal)
        prev_ref = None
        if req.previous_ordinal is not None:
            prev_ref = checkpoint_ref(req.thread, req.previous_scope or req.scope, req.previous_ordinal)
        async with self._repo_for(req.tenant, req.thread, req.workspace) as repo:
            try:
                captured = await captures.capture(self.git, self.stager, repo, req, ref, prev_ref)
            except CheckpointError as exc:
                # A file the tenant's git cannot read (written by another uid, mode 0600): the workspace is the
                # tenant's, so it is handed to the tenant and the capture tried once more.
                if exc.code != "git_error" or "Permission denied" not in str(exc) or repo.owner is None:
                    raise
                await asyncio.to_thread(own_tree, repo.worktree, repo.owner)
                captured = await captures.capture(self.git, self.stager, repo, req, ref, prev_ref)
            try:
                if self.durable is not None:  # off the node before the capture answers (a retry sends what is missing)
                    where = self.where(req.tenant, req.thread, repo)
                    await self.durable.keep(
                        repo, where, captured.ref, captured.commit, captured.tree, own=not captured.unchanged,
                        checkpoint_id=req.checkpoint_id,
                    )  # fmt: skip
            finally:
                repo.fresh = None  # its bytes are not kept past the capture (a retry cuts a pack with git)
            return captured

    async def diff(self, req: DiffRequest) -> DiffResult:
        """Unified diff (cut at ``max_bytes``) and per-file stats between two checkpoint commits."""
        async with self._repo_for(req.tenant, req.thread, req.workspace) as repo:
            return await ops.diff(self, repo, req)

    async def restore(self, req: Restore) -> Restored:
        """L10.5/L10.6: the workspace's checkpointed files become those of ``req.commit``."""
        check_token("restore_id", req.restore_id)
        for r in req.retire:
            check_scope(r.scope)
            if r.ordinal < 0:
                raise CheckpointError("bad_request", "ordinals must be >= 0")
        async with self._repo_for(req.tenant, req.thread, req.workspace) as repo:
            where = self.where(req.tenant, req.thread, repo)
            if self.durable is not None:  # an archive that does not answer fails the restore before any file moves
                await self.durable.reachable(where)
            restored = await ops.restore(self, repo, req)
            if self.durable is not None:  # the undo point, the retired refs and where the workspace now is
                await self.durable.sync(repo, where, (restored.commit, restored.tree))
            return restored

    async def prune(self, req: Prune, thread: str = "retention") -> Pruned:
        """Retention for the git dir of one workspace (every thread checkpointed in it)."""
        if req.keep_latest < 1 or req.idle_seconds < 0:
            raise CheckpointError("bad_request", "keep_latest must be >= 1 and idle_seconds >= 0")
        async with self._repo_for(req.tenant, thread, req.workspace) as repo:
            pruned = await ops.prune(self, repo, req, req.now if req.now is not None else time.time())
            await self._compact(req.tenant, repo, pruned.deleted)
            return pruned

    async def sweep(self, idle_seconds: float, keep_latest: int, now: float | None = None) -> list[str]:
        """Retention over every git dir this process has served: prune idle threads' refs, keep the newest."""
        req = Prune(tenant="-", workspace="-", idle_seconds=idle_seconds, keep_latest=keep_latest, now=now)
        deleted: list[str] = []
        for path, ws in list(self._workspaces.items()):
            for repo in list(ws.repos.values()):
                try:
                    async with self._locked(path), exclusive(repo):
                        pruned = await ops.prune(self, repo, req, now if now is not None else time.time())
                        deleted += pruned.deleted
                        await self._compact(repo.gitdir.relative_to(self._shadow_root).parts[0], repo, pruned.deleted)
                except (CheckpointError, OSError) as exc:  # a workspace deleted since: nothing to keep
                    log.warning("retention of %s skipped: %s", repo.gitdir, exc)
        return deleted

    async def hydrate(self, req: Hydrate) -> Hydrated:
        """A thread's workspace on this volume made from the archive (hydrate.py)."""
        from treadle.checkpoints import hydrate

        return await hydrate.hydrate(self, req)

    async def revive(self, tenant: str, workspace: str) -> bool:
        """An evicted workspace rebuilt from the archive as it was left (eviction.py); False: it was not evicted."""
        check_token("tenant", tenant)
        path, tenant_root = self._resolve(tenant, workspace)
        async with self._locked(path) as ws:
            return await eviction.revive(self, ws, tenant, path, tenant_root)

    def idle_for(self, tenant: str, workspace: str) -> float | None:
        """Seconds since this process last served a request on the workspace (None: not since it started)."""
        ws = self._workspaces.get(self.tenant_root(tenant) / workspace)
        return None if ws is None else time.monotonic() - ws.used

    def where(self, tenant: str, thread: str, repo: Repo) -> Where:
        """Where the archive keeps ``thread``'s checkpoints of the workspace ``repo`` serves."""
        key = (tenant, thread, repo.worktree)
        where = self._wheres.get(key)
        if where is None:
            if len(self._wheres) >= _SHADOWS_KEPT:
                self._wheres.clear()
            relative = repo.worktree.relative_to(self.tenant_root(tenant)).as_posix()
            where = self._wheres[key] = Where(tenant, workspace_key(relative), thread)
        return where

    async def _compact(self, tenant: str, repo: Repo, deleted: list[str]) -> None:
        """Retention in the archive: each thread that lost refs here loses them (and the packs only they needed)
        there too."""
        if self.durable is None:
            return
        for thread in sorted({name.split("/")[3] for name in deleted}):
            await self.durable.compact(repo, self.where(tenant, thread, repo))

    @contextlib.asynccontextmanager
    async def _repo_for(self, tenant: str, thread: str, workspace: str) -> AsyncIterator[Repo]:
        check_token("tenant", tenant)
        check_token("thread", thread)
        path, tenant_root = self._resolve(tenant, workspace)
        async with self._locked(path) as ws:
            await eviction.revive(self, ws, tenant, path, tenant_root)  # evicted: as it was, before it is read
            if not path.is_dir():
                raise CheckpointError("workspace_missing", f"workspace {workspace!r} does not exist")
            repo = await self._open(ws, tenant, thread, path, tenant_root)
            async with exclusive(repo):
                yield repo

    # -- workspaces and git dirs ---------------------------------------------------------------

    def _resolve(self, tenant: str, workspace: str) -> tuple[Path, Path]:
        known = self._paths.get((tenant, workspace))
        if known is not None and _unlinked(known[1]):
            return known[0], self._tenant_roots[tenant]
        rel = PurePosixPath(workspace)
        if not workspace or "\0" in workspace or rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise CheckpointError("path_escape", f"invalid workspace path {workspace!r}")
        try:
            tenant_root = self._tenant_roots.get(tenant)
            if tenant_root is None:  # Treadle's own directory, not the agent's: resolved once
                tenant_root = self._tenant_roots[tenant] = self._tenant_root(tenant)
            # The agent's: resolved every time (symlinks may change), by lstat alone while there is none. Below
            # the resolved tenant root, with no "..", no symlink and every component there, the path is its own
            # resolved path, inside the root.
            components = tuple(f"{tenant_root}/{PurePosixPath(*rel.parts[: i + 1])}" for i in range(len(rel.parts)))
            if _unlinked(components):
                path = Path(components[-1])
                if len(self._paths) >= _SHADOWS_KEPT:
                    self._paths.clear()
                self._paths[(tenant, workspace)] = (path, components)
            else:
                path = (tenant_root / rel).resolve()
        except (OSError, RuntimeError) as e:  # RuntimeError: symlink loop
            raise CheckpointError("bad_request", f"cannot resolve workspace {workspace!r}: {e}") from None
        if path == tenant_root or not path.is_relative_to(tenant_root):
            raise CheckpointError("path_escape", f"workspace {workspace!r} escapes the tenant root")
        return path, tenant_root

    def launch(self, tenant: str) -> Launch:
        """How git children for ``tenant`` start: as its uid, or as the service."""
        launch = self._launches.get(tenant)
        if launch is None:
            ids = self.identities.ids(tenant) if self.identities is not None else None
            launch = self._launches[tenant] = self.git.launch(ids)
        return launch

    def _identities(self, wanted: bool | None) -> TenantIdentities | None:
        if wanted is False:
            return None
        if os.geteuid() != 0:
            if wanted:
                raise ValueError("run_as_tenant needs a service running as root")
            return None
        self._root.mkdir(parents=True, exist_ok=True)
        roots = (self._root.resolve(), self._shadow_root)
        # The tenant's uid must be able to reach its directories: every directory above the roots must be
        # searchable by others (the roots themselves are Treadle's, and made so).
        blocked = [str(d) for r in roots for d in r.parents if not os.stat(d).st_mode & stat.S_IXOTH]
        if blocked:
            if wanted:
                raise ValueError(f"tenant uids cannot reach the workspaces: {sorted(set(blocked))} not searchable")
            log.warning(
                "checkpoint git runs as the service user: %s not searchable by other users",
                ", ".join(sorted(set(blocked))),
            )
            return None
        for r in roots:
            os.chmod(r, os.stat(r).st_mode | stat.S_IXOTH | stat.S_IXGRP)
        return TenantIdentities(roots[0])

    def tenant_root(self, tenant: str) -> Path:
        """``<root>/<tenant>``, resolved (and, with tenant uids, made the tenant's, mode 0700)."""
        top = self._tenant_roots.get(tenant)
        if top is None:
            top = self._tenant_roots[tenant] = self._tenant_root(tenant)
        return top

    def _tenant_root(self, tenant: str) -> Path:
        top = self._root / tenant
        owner = self.launch(tenant).owner
        if owner is not None:  # the tenant's own directory: its uid, nobody else's eyes
            top.mkdir(parents=True, exist_ok=True)
            fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fchown(fd, *owner)
                os.fchmod(fd, 0o700)
            finally:
                os.close(fd)
        return top.resolve()

    async def _create(self, path: Path, launch: Launch) -> None:
        make_dirs(path.parent, launch.owner)
        path.mkdir()
        give(path, launch.owner)
        try:
            await self.git.plain("init", "-q", "-b", "main", str(path), launch=launch)
        except BaseException:
            # We just made it; left behind, the next prepare would take it for a user's non-git dir.
            shutil.rmtree(path, ignore_errors=True)
            raise

    async def _open(self, ws: _Workspace, tenant: str, thread: str, path: Path, tenant_root: Path) -> Repo:
        # Always the service's own git dir: the workspace's .git is the agent's to write, and git would obey it.
        key = (tenant, thread, path)
        shadow = self._shadows.get(key)
        if shadow is None:  # Treadle's own directory (a name derived from the resolved path): looked up once
            if len(self._shadows) >= _SHADOWS_KEPT:
                self._shadows.clear()
            shadow = self._shadows[key] = checkpoint_gitdir(
                self._shadow_root, tenant, thread, path.relative_to(tenant_root)
            )
        launch = self.launch(tenant)
        user = user_gitdir(path, tenant_root)  # only read, to seed the private index from the user's HEAD
        repo = ws.repos.get(shadow)
        if repo is None:
            if not shadow.is_dir():
                await self._init_shadow(shadow, launch, user)
            await asyncio.to_thread(_harden, shadow, launch.owner)
            repo = ws.repos[shadow] = self._repo(path, shadow, user, launch)
        repo.user_gitdir = user
        return repo

    def _repo(self, worktree: Path, gitdir: Path, user: Path | None, launch: Launch) -> Repo:
        env = repo_env(self.git.base_env, worktree, gitdir)
        names = ("config", "info/exclude", "info/attributes")
        config_files = tuple(os.fsencode(gitdir / n) for n in names)
        # The fingerprint's race check compares file times with a stamp in the git dir, which is
        # only meaningful when both live on one filesystem (one clock).
        same_fs = os.stat(gitdir).st_dev == os.stat(worktree).st_dev
        return Repo(worktree, gitdir, user, env, config_files, fingerprintable=same_fs, launch=launch)

    async def _init_shadow(self, shadow: Path, launch: Launch, user: Path | None = None) -> None:
        tenant_dir = self._shadow_root / shadow.relative_to(self._shadow_root).parts[0]
        if not tenant_dir.is_dir():
            tenant_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            give(tenant_dir, launch.owner)
        make_dirs(shadow.parent, launch.owner)
        tmp = shadow.with_name(f".{shadow.name}.{uuid.uuid4().hex}")
        await self.git.plain("init", "-q", "--bare", "--template=", "-b", "main", str(tmp), launch=launch)
        try:
            await asyncio.to_thread(_harden, tmp, launch.owner)
            if user is not None:
                await asyncio.to_thread(_adopt_legacy_refs, user, tmp, launch.owner)
            os.rename(tmp, shadow)  # atomic, so a crash never leaves a half-made shadow dir
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not shadow.is_dir():
                raise

    @contextlib.asynccontextmanager
    async def _locked(self, path: Path, *, touch: bool = True) -> AsyncIterator[_Workspace]:
        """The workspace's lock in this process; ``touch``: a request's use (False: eviction's own look)."""
        ws = self._workspaces.get(path)
        if ws is None:
            ws = self._workspaces[path] = _Workspace()
        self._workspaces.move_to_end(path)
        if touch:
            ws.used = time.monotonic()
        ws.users += 1
        self._evict()
        try:
            async with ws.lock:
                yield ws
        finally:
            ws.users -= 1

    def _evict(self) -> None:
        if len(self._workspaces) <= self._max_cached:
            return
        # Only idle entries go: a second lock for a workspace in use would let captures overlap.
        for key in [k for k, w in self._workspaces.items() if w.users == 0]:
            if len(self._workspaces) <= self._max_cached:
                break
            for repo in self._workspaces.pop(key).repos.values():
                repo.close()


_LEGACY_REF = re.compile(r"refs/treadle/checkpoints/[A-Za-z0-9._/-]{1,400}")
_HEX40 = re.compile(r"[0-9a-f]{40}")


def _adopt_legacy_refs(user: Path, gitdir: Path, owner: tuple[int, int] | None) -> int:
    """Checkpoints taken before this git dir existed lived in the workspace's own `.git` (hidden refs there):
    their refs are copied here, read as data, and the user's object store becomes an alternate of this git dir
    so that their commits stay readable. Only when there are such refs; returns how many were adopted."""
    base = common_dir(user) or user
    found: dict[str, str] = {}
    packed = base / "packed-refs"
    if packed.is_file() and not packed.is_symlink():
        for line in packed.read_text(errors="replace").splitlines():
            oid, _, name = line.partition(" ")
            if _LEGACY_REF.fullmatch(name) and _HEX40.fullmatch(oid):
                found[name] = oid
    top = base / "refs" / "treadle" / "checkpoints"
    if top.is_dir() and not top.is_symlink():
        for d, _dirs, files in os.walk(top):  # os.walk never enters a symlinked directory
            for name in files:
                path = Path(d) / name
                ref = path.relative_to(base).as_posix()
                if path.is_symlink() or not _LEGACY_REF.fullmatch(ref) or ".." in ref or ref.endswith(".lock"):
                    continue
                oid = path.read_text(errors="replace").strip()
                if _HEX40.fullmatch(oid):
                    found[ref] = oid
    if not found:
        return 0
    alternates = gitdir / "objects" / "info" / "alternates"
    make_dirs(alternates.parent, owner)
    alternates.write_text(str((base / "objects").resolve()) + "\n")
    give(alternates, owner)
    for ref, oid in found.items():
        path = gitdir / ref
        make_dirs(path.parent, owner)
        path.write_text(oid + "\n")
        give(path, owner)
    log.info("adopted %d checkpoint refs of %s", len(found), base)
    return len(found)


def _harden(gitdir: Path, owner: tuple[int, int] | None) -> None:
    """The attributes that neutralise the worktree's, Treadle's directory, and (for a git dir made before
    tenants had uids) everything in it handed to the tenant."""
    if owner is not None and os.stat(gitdir).st_uid != owner[0]:
        own_tree(gitdir, owner)
    make_dirs(gitdir / "info", owner)
    attributes = gitdir / "info" / "attributes"
    try:
        current = attributes.read_bytes()
    except FileNotFoundError:
        current = None
    if current != NEUTRAL_ATTRIBUTES:
        tmp = attributes.with_name(f".attributes.{uuid.uuid4().hex}")
        tmp.write_bytes(NEUTRAL_ATTRIBUTES)
        os.chmod(tmp, 0o444)  # the service's: git reads it, nothing else writes it
        os.rename(tmp, attributes)
    make_dirs(gitdir / "treadle", owner)


def _unlinked(components: tuple[str, ...]) -> bool:
    """Every one of ``components`` (a path's, below the resolved tenant root, outermost first) exists and none is a
    symlink: one lstat each. False: resolve it (a symlink, or something missing)."""
    for path in components:
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return False
        except OSError:
            return False
    return True
