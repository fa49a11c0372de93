"""Issue 35: a provider thread's native state kept as immutable segments plus a manifest written last, so a
turn that appended to a rollout stores only what it appended. The manifest, under the thread's object name,
lists each file as the segments (``<name>/<index>``, gzipped) whose bytes make it, each with its size and
SHA-256; a reader fetches exactly those and checks every one, so it gets byte-identical files or refuses (a
crash between a segment's write and the manifest's leaves the earlier manifest and the segments it names).
A segment's index is drawn at random: a write never replaces a segment that any manifest names, even one
a host it does not know of wrote since (its conditional manifest write then fails, and nothing is mixed). Small segments (a turn's few KB, and
what they merge into up to ``INLINE_BYTES``) travel inside the manifest itself, so a typical turn is one
write and no delete. An object under the name that is not a
manifest is the single gzipped tar an earlier release kept (``native_state.members`` reads it)."""

from __future__ import annotations

import gzip
import hashlib
import secrets
import zlib
from typing import Annotated

import msgspec

from .native_state import MAX_BYTES, MAX_MEMBERS, NativeStateRefused, check_name

MAGIC = b"treadle-native-state/2\n"  # never the start of a gzip stream (\x1f\x8b)
MAX_SEGMENTS = 32  # per file; merging keeps far fewer (see ``merge_from``)
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
COMPRESS_LEVEL = 3
INLINE_BYTES = 16 * 1024  # unpacked: a segment this small is kept in the manifest
INLINE_TOTAL = 256 * 1024  # unpacked, over the manifest's inline segments
_INDEX_LIMIT = 2**53

Index = Annotated[int, msgspec.Meta(ge=0, lt=_INDEX_LIMIT)]


class Segment(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    index: Index
    size: Annotated[int, msgspec.Meta(ge=1, le=MAX_BYTES)]  # unpacked
    sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]  # of the unpacked bytes
    inline: bytes | None = None  # its stored bytes, when kept in the manifest (else under ``segment_name``)


class KeptFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    path: str
    segments: tuple[Segment, ...]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)


class Manifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    files: tuple[KeptFile, ...] = ()
    drop: tuple[Index, ...] = ()  # segments no longer named, deleted once this manifest landed


def segment_name(name: str, index: int) -> str:
    return f"{name}/{index}"


def is_manifest(data: bytes) -> bool:
    return data.startswith(MAGIC)


def encode(manifest: Manifest) -> bytes:
    """Refused (``NativeStateRefused``) past what ``decode`` reads back."""
    data = MAGIC + msgspec.json.encode(manifest)
    if len(data) > MAX_MANIFEST_BYTES:
        raise NativeStateRefused(f"the native state's manifest is over {MAX_MANIFEST_BYTES} bytes")
    return data


def decode(data: bytes, max_bytes: int = MAX_BYTES) -> Manifest:
    """A manifest read back, every field checked: plain relative unique names, known indices used once, at
    most ``max_bytes`` in all."""
    if not is_manifest(data) or len(data) > MAX_MANIFEST_BYTES:
        raise NativeStateRefused("not a native state manifest")
    try:
        manifest = msgspec.json.decode(data[len(MAGIC) :], type=Manifest)
    except msgspec.MsgspecError as exc:
        raise NativeStateRefused(f"not a native state manifest: {exc}") from None
    if len(manifest.files) > MAX_MEMBERS:
        raise NativeStateRefused(f"more than {MAX_MEMBERS} files")
    paths: set[str] = set()
    indices: set[int] = set()
    for kept in manifest.files:
        check_name(kept.path)
        if kept.path in paths or len(kept.segments) > MAX_SEGMENTS:
            raise NativeStateRefused(f"{kept.path!r} is listed twice or in more than {MAX_SEGMENTS} segments")
        paths.add(kept.path)
        for segment in kept.segments:
            if segment.index in indices:
                raise NativeStateRefused(f"segment {segment.index} is named twice")
            indices.add(segment.index)
    if sum(kept.size for kept in manifest.files) > max_bytes:
        raise NativeStateRefused(f"the native state is over {max_bytes} bytes")
    if sum(s.size for kept in manifest.files for s in kept.segments if s.inline is not None) > INLINE_TOTAL:
        raise NativeStateRefused(f"the manifest keeps more than {INLINE_TOTAL} bytes in itself")
    if len(manifest.drop) > MAX_MEMBERS * MAX_SEGMENTS or indices.intersection(manifest.drop):
        raise NativeStateRefused("the manifest drops segments it names")
    return manifest


def new_index(taken: set[int]) -> int:
    """An index for a new segment, none of ``taken`` (which it joins)."""
    while (index := secrets.randbelow(_INDEX_LIMIT)) in taken:
        pass
    taken.add(index)
    return index


def seal(index: int, raw: bytes) -> tuple[Segment, bytes]:
    """``raw`` as segment ``index``: its entry in a manifest and the bytes stored."""
    digest = hashlib.sha256(raw).hexdigest()
    return Segment(index, len(raw), digest), gzip.compress(raw, compresslevel=COMPRESS_LEVEL, mtime=0)


def stored(manifest: Manifest) -> list[int]:
    """The indices of the segments ``manifest`` names that are objects of their own (not inline)."""
    return [s.index for kept in manifest.files for s in kept.segments if s.inline is None]


def unseal(segment: Segment, data: bytes) -> bytes:
    """The bytes of ``segment`` from what the archive holds under its name, or refused: never more than its
    size is inflated, and they must be exactly the bytes the manifest names."""
    if len(data) > segment.size + segment.size // 64 + 1024:  # deflate's worst case is far below this
        raise NativeStateRefused(f"segment {segment.index} is larger than its contents can pack to")
    inflate = zlib.decompressobj(wbits=31)
    try:
        raw = inflate.decompress(data, segment.size + 1)
    except zlib.error as exc:
        raise NativeStateRefused(f"segment {segment.index} is not a packed segment: {exc}") from None
    if len(raw) != segment.size or inflate.unconsumed_tail or hashlib.sha256(raw).hexdigest() != segment.sha256:
        raise NativeStateRefused(f"segment {segment.index} is not the one its manifest names")
    return raw


def assemble(manifest: Manifest, segments: dict[int, bytes]) -> dict[str, bytes]:
    """The files of ``manifest`` (decoded by ``decode``) from its inline segments and the others as stored
    (index -> bytes)."""
    files: dict[str, bytes] = {}
    for kept in manifest.files:
        parts: list[bytes] = []
        for segment in kept.segments:
            data = segment.inline if segment.inline is not None else segments.get(segment.index)
            if data is None:
                raise NativeStateRefused(f"segment {segment.index} of {kept.path!r} is missing")
            parts.append(unseal(segment, data))
        files[kept.path] = b"".join(parts)
    return files


def merge_from(sizes: list[int], appended: int) -> int:
    """Where the segment written for ``appended`` new bytes begins, among a file's segments of ``sizes``: it
    takes in each trailing segment no larger than itself, so sizes strictly decrease and, for appends of about
    one size, the segments count in binary (log2(turns) of them; a byte is rewritten about log2(turns) times,
    not once per turn). Deltas made to shrink would keep more: past ``MAX_SEGMENTS`` the last ones merge."""
    start, size = len(sizes), appended
    while start > 0 and (sizes[start - 1] <= size or start >= MAX_SEGMENTS):
        start -= 1
        size += sizes[start]
    return start
