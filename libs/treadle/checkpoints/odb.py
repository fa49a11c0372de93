"""Reading blobs without a git process: loose objects, and the packs Treadle wrote itself (packs.py).

Those packs hold whole objects only, so reading one is a seek and an inflate. Anything else (a user's
packs, with deltas) is not read here: the caller asks git instead.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

from treadle.checkpoints import packs

_CHUNK = 1 << 16


class ObjectReader:
    def __init__(self, objects_dir: Path, treadle_dir: Path) -> None:
        self._objects = objects_dir
        self._loose_dir = os.fsencode(objects_dir)
        self._treadle = treadle_dir
        self._where: dict[bytes, tuple[str, int]] = {}  # object id -> (pack name, offset), for our packs
        self._indexed: set[str] = set()

    def blob(self, oid: bytes) -> bytes | None:
        """The content of blob ``oid``, or None when it is not somewhere this reader looks."""
        if oid in self._where:
            return self._packed(oid)
        return self._loose(oid) or self._packed(oid)

    def _loose(self, oid: bytes) -> bytes | None:
        hexid = oid.hex().encode()
        try:
            fd = os.open(b"%s/%s/%s" % (self._loose_dir, hexid[:2], hexid[2:]), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            chunks = []
            while chunk := os.read(fd, _CHUNK):
                chunks.append(chunk)
        finally:
            os.close(fd)
        try:
            raw = zlib.decompress(b"".join(chunks))
        except zlib.error:
            return None
        header, _, data = raw.partition(b"\0")
        return data if header.startswith(b"blob ") else None

    def _packed(self, oid: bytes) -> bytes | None:
        if oid not in self._where:
            self._index()
        found = self._where.get(oid)
        if found is None:
            return None
        name, offset = found
        try:
            with open(self._objects / "pack" / f"{name}.pack", "rb") as f:
                f.seek(offset)
                buf = f.read(_CHUNK)
                kind, at = (buf[0] >> 4) & 7, 1
                while buf[at - 1] & 0x80:
                    at += 1
                if kind != packs.BLOB:
                    return None
                inflate = zlib.decompressobj()
                out = [inflate.decompress(buf[at:])]
                while not inflate.eof and (more := f.read(_CHUNK)):
                    out.append(inflate.decompress(more))
        except (FileNotFoundError, zlib.error, IndexError):  # merged or repacked away since
            self._where.pop(oid, None)
            return None
        return b"".join(out)

    def _index(self) -> None:
        names = packs.ours(self._objects, self._treadle)
        for name in names:
            if name in self._indexed:
                continue
            try:
                idx = (self._objects / "pack" / f"{name}.idx").read_bytes()
            except FileNotFoundError:
                continue
            count = struct.unpack_from(">I", idx, 8 + 255 * 4)[0]
            ids_at = 8 + 256 * 4
            off_at = ids_at + 24 * count
            for i in range(count):
                oid = idx[ids_at + 20 * i : ids_at + 20 * i + 20]
                self._where[oid] = (name, struct.unpack_from(">I", idx, off_at + 4 * i)[0])
            self._indexed.add(name)
        gone = self._indexed - set(names)
        if gone:
            self._indexed -= gone
            self._where = {o: w for o, w in self._where.items() if w[0] not in gone}
