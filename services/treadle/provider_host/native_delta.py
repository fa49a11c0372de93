"""Issue 35: what a turn changed in a provider thread's native files, against what this host last stored of
them (``Mark``): a file that is the same file (device and inode), not shorter, whose last stored bytes are still
where they were, was appended to, and only its new bytes are read and sealed into a segment (with the trailing
segments ``merge_from`` takes in, read back from the file); a file of the same size and mtime is not read at
all. One not known here that way (a restarted host, a restore, a file renamed over or touched) is checked
against the kept segments' digests and, when it still begins with them, treated the same; anything else
(shorter, rewritten) is stored whole again. The runtime owns these files: a rewrite in place before a file's
last 4 KB goes unseen while it is the same file, which only gives back bytes the runtime itself wrote (Codex
appends, and a revert writes a new rollout); what a restore gives is always the bytes one manifest names,
checked."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import msgspec

from treadle.providers.native_manifest import (
    INLINE_BYTES,
    INLINE_TOTAL,
    KeptFile,
    Manifest,
    Segment,
    encode,
    merge_from,
    new_index,
    seal,
    stored,
)
from treadle.providers.native_state import MAX_BYTES, NativeFiles, NativeStateRefused, open_regular, open_root

TAIL = 4096  # how many of a file's last stored bytes tell an append from a rewrite (their digest is kept)
_READ = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Mark:
    """One file as it was when stored: its identity, size, mtime, and the SHA-256 of its last stored bytes
    (up to ``TAIL``; a digest, so a home of many files costs this host little memory)."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    tail: bytes  # SHA-256 of the last min(size, TAIL) bytes


@dataclass(slots=True)
class Plan:
    """What to write: the new segments kept apart (index -> stored bytes), then ``manifest``; ``marks`` once it
    landed."""

    manifest: Manifest
    encoded: bytes = b""  # the manifest as written
    segments: dict[int, bytes] = field(default_factory=dict)
    marks: dict[str, Mark] = field(default_factory=dict)
    appended: int = 0  # unpacked bytes sealed (the turn's delta and what merged with it)

    def changes(self, previous: Manifest) -> bool:
        return bool(self.segments) or self.manifest.files != previous.files


def plan(native: NativeFiles, manifest: Manifest, marks: dict[str, Mark], max_bytes: int = MAX_BYTES) -> Plan | None:
    """The store that makes ``manifest`` (what the archive holds, ``marks`` its files as this host stored them)
    hold ``native``'s files now; None when none of them is a regular file. Over ``max_bytes`` in all, or a
    manifest too large to read back: ``NativeStateRefused``."""
    try:
        root_fd = open_root(native.root)
    except FileNotFoundError:
        return None
    listed = {kept.path: kept for kept in manifest.files}
    files: list[KeptFile] = []
    out = Plan(manifest)
    earlier = {s.index for kept in manifest.files for s in kept.segments}
    taken = earlier.union(manifest.drop)
    total, inline = 0, 0
    try:
        for relative in sorted(set(native.files)):
            fd = open_regular(root_fd, relative)
            if fd is None:
                continue
            try:
                kept, mark, budget = listed.get(relative), marks.get(relative), max_bytes - total
                st = os.fstat(fd)
                if st.st_size > budget:
                    raise NativeStateRefused(f"the native state under {native.root} is over {max_bytes} bytes")
                same = kept is not None and mark is not None and _same(mark, kept, st)
                if same and kept is not None and mark is not None and st.st_size == mark.size:
                    files.append(kept)  # unchanged: not read
                    out.marks[relative] = mark
                    total += mark.size
                    inline += _inline(kept.segments)
                    continue
                keep: tuple[Segment, ...] = ()
                start = 0
                before = _tail_if_there(fd, mark) if same and mark is not None else None
                if before is None and kept is not None and st.st_size >= kept.size:
                    before = _stored_prefix(fd, kept)  # not known here (restarted, restored, replaced): checked
                if before is not None and kept is not None:
                    sizes = [s.size for s in kept.segments]
                    cut = merge_from(sizes, st.st_size - kept.size)
                    keep, start = kept.segments[:cut], sum(sizes[:cut])
                data = _read(fd, start, budget - start)
                end = start + len(data)
                if end > budget:
                    raise NativeStateRefused(f"the native state under {native.root} is over {max_bytes} bytes")
                if kept is not None and keep and end < kept.size:  # shrank while read: whole, from the start
                    keep, start, data = (), 0, _read(fd, 0, budget)
                    end = len(data)
                    if end > budget:
                        raise NativeStateRefused(f"the native state under {native.root} is over {max_bytes} bytes")
                segments = keep
                inline += _inline(keep)
                if data:
                    segment, sealed = seal(new_index(taken), data)
                    if len(data) <= INLINE_BYTES:
                        segment = msgspec.structs.replace(segment, inline=sealed)
                        inline += len(data)
                    else:
                        out.segments[segment.index] = sealed
                    segments = (*keep, segment)
                    out.appended += len(data)
                files.append(KeptFile(relative, segments))
                after = os.fstat(fd)
                last = (before + data[kept.size - start :] if keep and before is not None and kept else data)[-TAIL:]
                out.marks[relative] = Mark(after.st_dev, after.st_ino, end, after.st_mtime_ns, _digest(last))
                total += end
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)
    if not files:
        return None
    out.manifest = Manifest(tuple(_spill(files, out, inline - INLINE_TOTAL, earlier)))
    named = set(stored(out.manifest))
    dropped = set(stored(manifest)).union(manifest.drop) - named
    out.manifest = msgspec.structs.replace(out.manifest, drop=tuple(sorted(dropped)))
    out.encoded = encode(out.manifest)
    return out


def _spill(files: list[KeptFile], out: Plan, over: int, earlier: set[int]) -> list[KeptFile]:
    """``files`` with this store's inline segments made objects of their own until the manifest keeps at most
    ``INLINE_TOTAL`` in itself (``over``: by how much it would); the ones it already kept were within it."""
    if over <= 0:
        return files
    spilled: list[KeptFile] = []
    for file in files:
        segments = list(file.segments)
        for at, segment in enumerate(segments):
            if over > 0 and segment.inline is not None and segment.index not in earlier:
                out.segments[segment.index] = segment.inline
                segments[at] = msgspec.structs.replace(segment, inline=None)
                over -= segment.size
        spilled.append(KeptFile(file.path, tuple(segments)))
    return spilled


def _inline(segments: tuple[Segment, ...]) -> int:
    return sum(s.size for s in segments if s.inline is not None)


def _same(mark: Mark, kept: KeptFile, st: os.stat_result) -> bool:
    """The file this host stored, as the manifest still lists it, and not shorter; when not grown, untouched."""
    if (st.st_dev, st.st_ino) != (mark.device, mark.inode) or kept.size != mark.size or st.st_size < mark.size:
        return False
    return st.st_size > mark.size or st.st_mtime_ns == mark.mtime_ns


def _tail_if_there(fd: int, mark: Mark) -> bytes | None:
    """The file's last bytes as stored when they are still where they were, else None."""
    length = min(mark.size, TAIL)
    last = os.pread(fd, length, mark.size - length)
    return last if _digest(last) == mark.tail else None


def _stored_prefix(fd: int, kept: KeptFile) -> bytes | None:
    """When the file begins with exactly the bytes ``kept``'s segments hold (each range's SHA-256 checked), its
    last ``TAIL`` of them; else None. Reads that much of the file, but packs and sends none of it."""
    at = 0
    last = b""
    for segment in kept.segments:
        data = os.pread(fd, segment.size, at)
        if hashlib.sha256(data).hexdigest() != segment.sha256:
            return None
        last, at = (last + data)[-TAIL:], at + segment.size
    return last


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _read(fd: int, offset: int, limit: int) -> bytes:
    """From ``offset`` to the end of the file, at most ``limit`` + 1 bytes (one more tells it is over)."""
    parts: list[bytes] = []
    got = 0
    while got <= limit:
        chunk = os.pread(fd, min(_READ, limit + 1 - got), offset + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
