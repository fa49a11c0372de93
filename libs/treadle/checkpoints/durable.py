"""Checkpoints that outlive the node: every checkpoint commit is copied to the archive (``ports.CheckpointArchive``)
before its capture answers, so the workspace on disk is a cache of what the archive holds.

Per thread and workspace the archive holds, under ``<tenant>/<workspace key>/<thread>/``:
- ``packs/<commit>``: a git pack of the objects reachable from ``commit`` and from no checkpoint the archive
  held before: a capture that changed one file sends that file's blob, the trees above it and the commit.
  An incremental capture (incremental.py) already wrote exactly those as a pack of its own, cut against its
  parent: when the archive holds the parent, those bytes are sent as they are (no git process); otherwise
  ``pack-objects --revs <commit> ^<earlier>…`` cuts it. Named by the commit, so a retried capture writes the
  same name again and the archive never holds two copies.
- ``manifest``: every checkpoint ref of the thread with its commit, tree and the packs that together hold all
  of its objects, and the commit the workspace was last left at (``head``: a capture's, or a restore's).

The pack is written before the manifest names it, so whatever the manifest names is there. Retention
(:meth:`Durable.compact`) drops the pruned refs and, when it dropped any, writes one base pack holding
every kept checkpoint and deletes the packs before it. Git runs as every checkpoint git does (runner.py).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

import msgspec

from treadle.checkpoints.archive import ArchiveConflict, ArchiveDamaged, ArchiveUnavailable, Holding
from treadle.checkpoints.protocol import CheckpointError
from treadle.checkpoints.refs import thread_prefix
from treadle.checkpoints.repo import FreshPack, Repo
from treadle.checkpoints.runner import GitRunner, tail

if TYPE_CHECKING:
    from treadle.checkpoints.archive import CheckpointArchive

__all__ = ["Durable", "Entry", "Manifest", "Where"]

log = logging.getLogger(__name__)

_ATTEMPTS = 4  # conditional writes of one change before it fails (each lost to another writer of the manifest)


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """A checkpoint ref's commit."""

    commit: str
    tree: str


class Stored(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Where a commit's objects are: its pack holds those that none of ``after`` (commits stored before it)
    reaches; theirs hold the rest."""

    pack: str
    after: list[str] = []


class Manifest(msgspec.Struct, kw_only=True):
    refs: dict[str, Entry] = {}
    stored: dict[str, Stored] = {}  # commit -> its pack, in the order stored (the newest last)
    head: str | None = None  # the commit the workspace was last left at (None: never captured)
    head_tree: str | None = None
    ids: dict[str, str] = {}  # checkpoint id (ckpt_…) -> commit, for the checkpoints whose id was given
    # Commits whose parents the archive may lack (retention repacked them without their history): a git dir
    # made from the archive lists them in its `shallow` file, so no git walks past them.
    shallow: list[str] = []

    def packs(self, commits: list[str] | None = None) -> list[str]:
        """The packs holding every object ``commits`` (default: every ref's and the head) reach, oldest first."""
        todo = list(commits if commits is not None else [*(e.commit for e in self.refs.values()), self.head or ""])
        seen: set[str] = set()
        while todo:
            commit = todo.pop()
            if commit in seen or commit not in self.stored:
                continue
            seen.add(commit)
            todo += self.stored[commit].after
        return list(dict.fromkeys(s.pack for c, s in self.stored.items() if c in seen))


_decode = msgspec.json.Decoder(Manifest)
_encode = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Where:
    """A thread's checkpoints of one workspace in the archive."""

    tenant: str
    key: str  # repo.workspace_key of the workspace's path below the tenant root
    thread: str

    @property
    def manifest(self) -> str:
        return f"{self.tenant}/{self.key}/{self.thread}/manifest"

    def pack(self, name: str) -> str:
        return f"{self.tenant}/{self.key}/{self.thread}/packs/{name}"


class Durable:
    """Copies a git dir's checkpoints to the archive. Callers hold the git dir's lock (git.Workspaces), so the
    manifest of a thread has one writer per node; a node that took the thread over may write it too, so every
    write of it is conditional on the archive still holding the version it was made from."""

    def __init__(self, archive: CheckpointArchive, git: GitRunner) -> None:
        self.archive = archive
        self._git = git
        # The manifest as this process last wrote or read it, with its SHA-256: what a write made from it
        # expects the archive to hold (another process may have written since: then it is read again).
        self._known: dict[Where, tuple[str, Manifest]] = {}
        # Manifests whose bytes the archive lost (``ArchiveDamaged``): the next change rebuilds them from the git dir.
        self._lost: set[Where] = set()

    async def keep(
        self,
        repo: Repo,
        where: Where,
        ref: str,
        commit: str,
        tree: str,
        *,
        own: bool = True,
        checkpoint_id: str | None = None,
    ) -> None:
        """A capture's checkpoint (``ref`` holds ``commit``) in the archive before the capture answers; a
        commit the archive already holds costs no request (the unchanged capture, ``own`` False: most).
        An unchanged capture writes no ref: its commit is recorded under its holder only if the archive lacks it.

        The manifest is changed from this process's copy and written only if the archive still holds that copy
        (a conditional write, no read before it); when another process wrote it since, it is read again and the
        change made anew."""
        fresh = repo.fresh if own and repo.fresh is not None and repo.fresh.commit == commit else None
        sent: FreshPack | None = None  # the capture's own pack, once it is stored under ``commit``'s name
        async with _unavailable_is_typed():
            for _ in range(_ATTEMPTS):
                holding, manifest = await self._current(where)
                if where in self._lost:  # every checkpoint ref of the git dir, not only this one
                    await self._follow(repo, where, manifest, await self._refs(repo, where), None)
                if (
                    manifest.head == commit
                    and (_holds(manifest, ref, commit) or not own)
                    and (checkpoint_id is None or manifest.ids.get(checkpoint_id) == commit)
                ):
                    self._put_back(where, holding, manifest)
                    return
                if sent is not None and commit in manifest.stored and manifest.stored[commit].pack == commit:
                    del manifest.stored[commit]  # another writer's entry: its pack is the one just replaced
                if (
                    fresh is not None
                    and sent is None
                    and fresh.parent in manifest.stored
                    and commit not in manifest.stored
                ):
                    # The pack as the capture wrote it (no git process); the manifest names it only once it is stored.
                    await self.archive.put(where.pack(commit), fresh.data, new=True)
                    sent = fresh
                if not _holds(manifest, ref, commit) and (own or commit not in manifest.stored):
                    manifest.refs[ref] = Entry(commit=commit, tree=tree)
                await self._store(repo, where, manifest, commit, sent=sent)
                manifest.head, manifest.head_tree = commit, tree
                if checkpoint_id is not None:
                    manifest.ids[checkpoint_id] = commit
                if await self._save(where, manifest, holding):
                    return
        raise CheckpointError("store_unavailable", f"the manifest of {where.thread} kept changing; try again")

    async def sync(self, repo: Repo, where: Where, head: tuple[str, str] | None = None) -> None:
        """Make the manifest name exactly the thread's checkpoint refs of the git dir (after a restore moved
        or added some, or retention deleted some); ``head``: (commit, tree) the workspace is now at."""
        refs = await self._refs(repo, where)
        async with _unavailable_is_typed():
            for _ in range(_ATTEMPTS):
                holding, manifest = await self._current(where)
                if not await self._follow(repo, where, manifest, refs, head):
                    self._put_back(where, holding, manifest)
                    return
                if await self._save(where, manifest, holding):
                    return
        raise CheckpointError("store_unavailable", f"the manifest of {where.thread} kept changing; try again")

    async def _refs(self, repo: Repo, where: Where) -> dict[str, tuple[str, str]]:
        """The thread's checkpoint refs in the git dir: name -> (commit, tree)."""
        out = await self._git.check(
            repo, "for-each-ref", "--format=%(refname)%00%(objectname)%00%(tree)", thread_prefix(where.thread) + "/"
        )
        return {name: (commit, tree) for name, commit, tree in (line.split("\0") for line in out.decode().splitlines())}

    async def _follow(
        self,
        repo: Repo,
        where: Where,
        manifest: Manifest,
        refs: dict[str, tuple[str, str]],
        head: tuple[str, str] | None,
    ) -> bool:
        """``manifest`` changed to name exactly ``refs`` (and ``head``); False: it already did."""
        changed = False
        for name in [n for n in manifest.refs if n not in refs]:
            del manifest.refs[name]
            changed = True
        for name, (commit, tree) in refs.items():
            if not _holds(manifest, name, commit):
                await self._store(repo, where, manifest, commit)
                manifest.refs[name] = Entry(commit=commit, tree=tree)
                changed = True
        if head is not None and manifest.head != head[0]:
            await self._store(repo, where, manifest, head[0])
            manifest.head, manifest.head_tree = head
            changed = True
        return changed

    async def compact(self, repo: Repo, where: Where) -> list[str]:
        """Retention: the manifest follows the refs retention left, and the packs only pruned checkpoints
        needed go. Every kept checkpoint is repacked into one base (named by what it holds), written before
        the manifest points at it; then the packs nothing names any more are deleted. Returns their names."""
        before = await self.load_typed(where)
        if before is None:
            return []
        await self.sync(repo, where)
        async with _unavailable_is_typed():
            holding, manifest = await self._current(where)
            if set(manifest.refs) == set(before.refs) and manifest.head == before.head:
                self._put_back(where, holding, manifest)
                return []
            commits = sorted({e.commit for e in manifest.refs.values()} | ({manifest.head} if manifest.head else set()))
            before_packs = {s.pack for s in manifest.stored.values()}
            manifest.stored = {}
            if commits:
                base = "base-" + hashlib.sha256(" ".join(commits).encode()).hexdigest()[:40]
                await self.archive.put(where.pack(base), await self._snapshot(repo, commits))
                manifest.stored = {c: Stored(pack=base) for c in commits}
                manifest.shallow = commits
            gone = sorted(before_packs - {s.pack for s in manifest.stored.values()})
            manifest.ids = {i: c for i, c in manifest.ids.items() if c in manifest.stored}
            if not await self._save(where, manifest, holding):  # nothing deleted: the next sweep compacts again
                raise CheckpointError("store_unavailable", f"the manifest of {where.thread} changed during retention")
            for name in gone:
                await self.archive.delete(where.pack(name))
        return gone

    async def reachable(self, where: Where) -> None:
        """A typed ``store_unavailable`` now, rather than after a change the archive must follow."""
        async with _unavailable_is_typed():
            await self.archive.digest(where.manifest)

    async def load(self, where: Where) -> Manifest | None:
        data = await self.archive.get(where.manifest)
        if data is None:
            self._known.pop(where, None)
            return None
        manifest = _decode.decode(data)
        self._known[where] = (hashlib.sha256(data).hexdigest(), manifest)
        return _copy(manifest)

    async def _current(self, where: Where) -> tuple[Holding, Manifest]:
        """The manifest to change, with what the archive must still hold for the change to be written
        (``_save``). This process's copy itself, taken out of the cache (no copy made of it, however long the
        thread): a successful ``_save`` (or ``_put_back``, unchanged) returns it; a change that fails half-way
        leaves no copy, and the next change reads the manifest again."""
        known = self._known.pop(where, None)
        if known is None:
            try:
                await self.load(where)
            except ArchiveDamaged as exc:  # replaced by a manifest made anew, written over what the meta names
                log.warning("the archive lost the manifest of %s: rebuilt from the git dir", where.thread)
                self._lost.add(where)
                return Holding(exc.digest), Manifest()
            known = self._known.pop(where, None)
        if known is None:
            return Holding(None), Manifest()
        return Holding(known[0]), known[1]

    def _put_back(self, where: Where, holding: Holding, manifest: Manifest) -> None:
        """A manifest from ``_current`` that was not changed, back in the cache."""
        if holding.digest is not None:
            self._known[where] = (holding.digest, manifest)

    async def load_typed(self, where: Where) -> Manifest | None:
        async with _unavailable_is_typed():
            manifest = await self.load(where)
        return manifest

    async def fetch(self, where: Where, pack: str) -> bytes:
        async with _unavailable_is_typed():
            data = await self.archive.get(where.pack(pack))
        if data is None:
            raise CheckpointError("internal", f"the archive lost pack {pack} of {where.thread}")
        return data

    def forget(self, where: Where) -> None:
        self._known.pop(where, None)

    async def _save(self, where: Where, manifest: Manifest, holding: Holding) -> bool:
        """Write ``manifest`` (from ``_current``: the caller changes it no more) if the archive still holds
        ``holding``; False: another process wrote it since (the caller's next ``_current`` reads it again)."""
        data = _encode.encode(manifest)
        self._known.pop(where, None)  # unknown until the write is known to have landed
        try:
            await self.archive.put(where.manifest, data, holding=holding)
        except ArchiveConflict:
            return False
        self._known[where] = (hashlib.sha256(data).hexdigest(), manifest)
        self._lost.discard(where)
        return True

    async def _store(
        self, repo: Repo, where: Where, manifest: Manifest, commit: str, *, sent: FreshPack | None = None
    ) -> None:
        """``commit``'s objects in the archive: a pack of those no commit stored before reaches (cut against the
        newest few; their packs hold the rest), written before the manifest names it. ``sent``: the capture's
        own pack, already stored under ``commit``'s name."""
        if commit in manifest.stored:
            return
        fresh = sent or (repo.fresh if repo.fresh is not None and repo.fresh.commit == commit else None)
        if fresh is not None and fresh.parent in manifest.stored:
            # The incremental capture's pack holds every object of ``commit`` its parent lacks, and the archive
            # holds the parent's: no git process, the bytes as they are on disk.
            if sent is None:
                await self.archive.put(where.pack(commit), fresh.data, new=True)
            manifest.stored[commit] = Stored(pack=commit, after=[fresh.parent])
            return
        # Cut against where the workspace was (the new commit's parent, as a rule) and the newest commit stored:
        # one or two names a manifest entry, whatever the thread's length. An object only an older checkpoint
        # reaches (a file put back as it was long ago) is sent again: rarer and cheaper than a long list here.
        after = list(
            dict.fromkeys(c for c in (manifest.head, next(reversed(manifest.stored), None)) if c in manifest.stored)
        )
        await self.archive.put(where.pack(commit), await self._pack(repo, [commit], after), new=True)
        manifest.stored[commit] = Stored(pack=commit, after=after)

    async def _snapshot(self, repo: Repo, commits: list[str]) -> bytes:
        """One pack of ``commits`` and their trees and blobs, without their history (what retention keeps)."""
        listed = await self._git.check(repo, "rev-list", "--objects", "--no-walk", *commits)
        rc, out, err = await self._git.run(repo, "pack-objects", "--stdout", "-q", input=listed)
        if rc != 0:
            raise CheckpointError("git_error", f"git pack-objects failed: {tail(err)}")
        return out

    async def _pack(self, repo: Repo, tips: list[str], bases: list[str]) -> bytes:
        """One pack of the objects reachable from ``tips`` and not from ``bases`` (full objects or deltas
        within the pack, never against an object outside it: any git can index it alone)."""
        revs = "".join(f"{t}\n" for t in tips)
        # No delta search against the bases: a changed file's previous version is outside this pack, so the
        # search finds nothing and costs most of the git time of a capture's copy (measured 0.10 vs 0.03 s).
        window = ("--window=0",) if bases else ()
        rc, out, err = await self._git.run(
            repo, "pack-objects", "--revs", "--stdout", "-q", *window,
            input=(revs + "".join(f"^{b}\n" for b in bases)).encode(),
        )  # fmt: skip
        if rc != 0 and bases:  # a base this git dir lacks (pruned and collected): send everything instead
            rc, out, err = await self._git.run(repo, "pack-objects", "--revs", "--stdout", "-q", input=revs.encode())
        if rc != 0:
            raise CheckpointError("git_error", f"git pack-objects failed: {tail(err)}")
        return out


def _copy(manifest: Manifest) -> Manifest:
    """A manifest to change without changing the cached one (a write that fails leaves the cache as it was)."""
    return _decode.decode(_encode.encode(manifest))


def _holds(manifest: Manifest, ref: str, commit: str) -> bool:
    entry = manifest.refs.get(ref)
    return entry is not None and entry.commit == commit


class _unavailable_is_typed:
    """An archive that does not answer fails the request with a typed error: never a silently non-durable
    checkpoint. The caller's retry finds the ref made and sends what the archive still lacks."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if isinstance(exc, ArchiveUnavailable):
            raise CheckpointError("store_unavailable", str(exc)) from None
        return False
