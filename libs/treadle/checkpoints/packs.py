"""Writing checkpoint objects as one pack file per capture instead of one loose file per object.

A capture of a small change makes a few hundred objects (changed blobs, the trees above them, a
commit). As loose objects that is a few hundred file creations — measured ~60-110 µs of kernel CPU
each here, more than everything else a capture does. A pack is two files however many objects it
holds. Objects are stored whole (no deltas), so the packs this module wrote can later be merged by
copying their entries unchanged (:func:`merge`), which keeps the number of packs (and the time git
spends opening them) bounded.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

COMMIT, TREE, BLOB = 1, 2, 3
_TYPE_NAMES = {COMMIT: b"commit", TREE: b"tree", BLOB: b"blob"}
MERGE_AT = 16  # packs of ours; `git gc --auto` repacks everything at 50 (gc.autoPackLimit)
_SMALL = 8 << 20  # only packs below this are merged: merging never copies the big ones over and over
_LIST = "packs"  # in <gitdir>/treadle: the packs this module wrote, one name a line
_LINE = len("pack-") + 40 + 1  # every line of the list: its size counts them without reading it


def object_id(kind: int, data: bytes) -> bytes:
    return hashlib.sha1(b"%s %d\0" % (_TYPE_NAMES[kind], len(data)) + data).digest()


def _entry_header(kind: int, size: int) -> bytes:
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    out = bytearray()
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


@dataclass(frozen=True, slots=True)
class Pack:
    """A pack as written: ``body`` is a whole pack file (any git can `index-pack` it alone), ``idx`` its index."""

    name: str
    body: bytes
    idx: bytes


def write(
    objects_dir: Path, treadle_dir: Path, objects: dict[bytes, tuple[int, bytes]], owner: tuple[int, int] | None = None
) -> str | None:
    """Write ``objects`` (raw id -> (kind, data)) as one pack; returns its name (None when empty). ``owner``:
    who the new files belong to (the tenant whose git children use the git dir)."""
    written = write_pack(objects_dir, treadle_dir, objects, owner)
    return written.name if written is not None else None


def write_pack(
    objects_dir: Path, treadle_dir: Path, objects: dict[bytes, tuple[int, bytes]], owner: tuple[int, int] | None = None
) -> Pack | None:
    """:func:`write`, returning the pack's bytes as well (the archive stores them as they are: durable.py)."""
    if not objects:
        return None
    entries = {
        oid: _entry_header(kind, len(data)) + _deflate(data, kind != TREE) for oid, (kind, data) in objects.items()
    }
    return _write_pack(objects_dir, treadle_dir, entries, owner)


def _deflate(data: bytes, compress: bool) -> bytes:
    # Trees are mostly object ids, which do not compress: deflating them cost ~30 µs a tree, storing
    # them ~1.5. zlib's set-up for its default 32 KiB window costs ~40 µs a stream, more than compressing
    # a small blob; a window the size of the blob compresses it as well at a tenth of the cost.
    if not compress:
        level, wbits, mem = 0, 9, 1
    else:
        level = 1
        wbits, mem = (10, 2) if len(data) <= 1024 else (12, 4) if len(data) <= 4096 else (15, 8)
    c = zlib.compressobj(level, zlib.DEFLATED, wbits, mem)
    return c.compress(data) + c.flush()


def _write_pack(
    objects_dir: Path, treadle_dir: Path, entries: dict[bytes, bytes], owner: tuple[int, int] | None = None
) -> Pack:
    pack_dir = f"{objects_dir}/pack"
    if not os.path.isdir(pack_dir):
        os.makedirs(pack_dir, exist_ok=True)
        if owner is not None:
            os.chown(pack_dir, *owner, follow_symlinks=False)
    body = bytearray(b"PACK" + struct.pack(">II", 2, len(entries)))
    offsets: dict[bytes, tuple[int, int]] = {}
    for oid, raw in entries.items():
        offsets[oid] = (len(body), zlib.crc32(raw))
        body += raw
    pack_sum = hashlib.sha1(body).digest()
    body += pack_sum
    name = f"pack-{pack_sum.hex()}"
    ids = sorted(offsets)
    fanout = [0] * 256
    for oid in ids:
        fanout[oid[0]] += 1
    total = 0
    for i in range(256):
        total += fanout[i]
        fanout[i] = total
    idx = bytearray(b"\xfftOc" + struct.pack(">I", 2) + struct.pack(">256I", *fanout))
    idx += b"".join(ids)
    idx += b"".join(struct.pack(">I", offsets[o][1]) for o in ids)
    large: list[int] = []
    for o in ids:  # offsets past 2 GiB go to the 8-byte table
        off = offsets[o][0]
        if off < 0x80000000:
            idx += struct.pack(">I", off)
        else:
            idx += struct.pack(">I", 0x80000000 | len(large))
            large.append(off)
    idx += b"".join(struct.pack(">Q", off) for off in large)
    idx += pack_sum
    idx += hashlib.sha1(idx).digest()
    return _store(pack_dir, treadle_dir, name, body, idx, owner)


def _store(
    pack_dir: str, treadle_dir: Path, name: str, body: bytearray, idx: bytearray, owner: tuple[int, int] | None
) -> Pack:
    # git finds packs by their .idx: the .pack must be complete before its .idx appears.
    _put(pack_dir, f"{name}.pack", body, owner)
    _put(pack_dir, f"{name}.idx", idx, owner)
    fd = os.open(f"{treadle_dir}/{_LIST}", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, f"{name}\n".encode())
    finally:
        os.close(fd)
    return Pack(name, bytes(body), bytes(idx))


def _concatenate(
    objects_dir: Path, treadle_dir: Path, bases: list[Path], owner: tuple[int, int] | None = None
) -> str | None:
    """Our packs as one, written without looking at one entry: every entry of ours is a whole object, so each pack's
    entries move as one block and only their offsets change; ids and CRCs are copied from the indexes. Merging a
    workspace's first pack (10,000 objects) took ~36 ms entry by entry. None (nothing written) when an object is in
    two of them, or the result would need the large-offset table: :func:`_read_entries` then merges them."""
    rows: list[tuple[bytes, bytes, int]] = []  # (id, crc32, offset in the new pack)
    blocks: list[memoryview] = []
    at = 12  # the new pack's header
    for base in bases:
        table, pack = base.with_suffix(".idx").read_bytes(), base.with_suffix(".pack").read_bytes()
        n = struct.unpack_from(">I", table, 8 + 255 * 4)[0]
        ids_at = 8 + 256 * 4
        crcs_at = ids_at + 20 * n
        offsets = struct.unpack_from(f">{n}I", table, crcs_at + 4 * n)
        shift = at - 12
        rows += [
            (table[ids_at + 20 * i : ids_at + 20 * i + 20], table[crcs_at + 4 * i : crcs_at + 4 * i + 4], off + shift)
            for i, off in enumerate(offsets)
        ]
        block = memoryview(pack)[12:-20]
        blocks.append(block)
        at += len(block)
    if at >= 0x80000000 or any(o & 0x80000000 for _, _, o in rows):
        return None
    rows.sort()
    ids = [r[0] for r in rows]
    if len(set(ids)) != len(ids):
        return None
    body = bytearray(b"PACK" + struct.pack(">II", 2, len(rows)))
    for block in blocks:
        body += block
    pack_sum = hashlib.sha1(body).digest()
    body += pack_sum
    firsts = bytes(oid[0] for oid in ids)
    fanout = [bisect.bisect_right(firsts, b) for b in range(256)]
    idx = bytearray(b"\xfftOc" + struct.pack(">I", 2) + struct.pack(">256I", *fanout))
    idx += b"".join(ids)
    idx += b"".join(r[1] for r in rows)
    idx += struct.pack(f">{len(rows)}I", *(r[2] for r in rows))
    idx += pack_sum
    idx += hashlib.sha1(idx).digest()
    return _store(f"{objects_dir}/pack", treadle_dir, f"pack-{pack_sum.hex()}", body, idx, owner).name


def _put(where: str, name: str, data: bytes | bytearray, owner: tuple[int, int] | None = None) -> None:
    # Plain os calls: a capture writes two of these, and each file is most of what writing a pack costs.
    path = f"{where}/{name}"
    if os.path.exists(path):  # the same objects written before: same name, same bytes
        return
    tmp = f"{where}/tmp_{name}_{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a killed writer's (read-only by now, perhaps)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, 0o444)  # whatever the umask
    finally:
        os.close(fd)
    os.rename(tmp, path)


def ours(objects_dir: Path, treadle_dir: Path) -> list[str]:
    """The packs this module wrote that still exist (a user's `git gc` may have repacked them)."""
    try:
        names = (treadle_dir / _LIST).read_text().split()
    except FileNotFoundError:
        return []
    seen: dict[str, None] = {}
    for n in names:
        if (objects_dir / "pack" / f"{n}.idx").exists():
            seen[n] = None
    return list(seen)


def due(treadle_dir: Path) -> bool:
    """Are there :data:`MERGE_AT` packs of ours, or about (a stat: the cheap check, every capture)?"""
    try:
        return os.stat(f"{treadle_dir}/{_LIST}").st_size >= MERGE_AT * _LINE
    except FileNotFoundError:
        return False


def merge(objects_dir: Path, treadle_dir: Path, owner: tuple[int, int] | None = None) -> str | None:
    """Merge our small packs into one when there are :data:`MERGE_AT` of them (call under the git dir lock)."""
    if not due(treadle_dir):
        return None
    names = ours(objects_dir, treadle_dir)
    sizes = {n: (objects_dir / "pack" / f"{n}.pack").stat().st_size for n in names}
    small = [n for n in names if sizes[n] < _SMALL]
    if len(small) < MERGE_AT or len(small := _tail(small, sizes)) < 2:
        _rewrite_list(treadle_dir, names)  # forget packs a user's `git gc` took, so the cheap check holds again
        return None
    merged = _concatenate(objects_dir, treadle_dir, [objects_dir / "pack" / n for n in small], owner)
    if merged is None:
        entries: dict[bytes, bytes] = {}
        for n in small:
            entries.update(_read_entries(objects_dir / "pack" / n))
        merged = _write_pack(objects_dir, treadle_dir, entries, owner).name
    _rewrite_list(treadle_dir, [n for n in names if n not in small] + [merged])
    for n in small:
        if n != merged:  # git re-reads the pack directory when an object it expected is gone
            for ext in (".idx", ".pack"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(objects_dir / "pack" / f"{n}{ext}")
    return merged


def _tail(names: list[str], sizes: dict[str, int]) -> list[str]:
    """The packs to merge: all but the largest ones that each hold at least twice what all smaller ones hold
    together (they stay as they are). Merging all of them every time copied a thread's growing pack again
    every MERGE_AT captures; this way a byte is copied a few times (log of the pack sizes) over its life."""
    order = sorted(names, key=sizes.__getitem__, reverse=True)
    rest = sum(sizes[n] for n in order)
    for i, n in enumerate(order):
        rest -= sizes[n]
        if sizes[n] < 2 * rest:
            return order[i:]
    return []


def _rewrite_list(treadle_dir: Path, names: list[str]) -> None:
    tmp = treadle_dir / f"{_LIST}.tmp"
    tmp.write_text("".join(n + "\n" for n in names))
    os.rename(tmp, treadle_dir / _LIST)


def _read_entries(base: Path) -> dict[bytes, bytes]:
    """The raw entries of one of *our* packs (whole objects, no deltas), by object id."""
    idx = base.with_suffix(".idx").read_bytes()
    pack = base.with_suffix(".pack").read_bytes()
    count = struct.unpack_from(">I", idx, 8 + 255 * 4)[0]
    ids_at = 8 + 256 * 4
    off_at = ids_at + 24 * count
    ids = [idx[ids_at + 20 * i : ids_at + 20 * i + 20] for i in range(count)]
    offsets = sorted((struct.unpack_from(">I", idx, off_at + 4 * i)[0], ids[i]) for i in range(count))
    end = len(pack) - 20
    out = {}
    for i, (off, oid) in enumerate(offsets):
        stop = offsets[i + 1][0] if i + 1 < len(offsets) else end
        out[oid] = pack[off:stop]
    return out
