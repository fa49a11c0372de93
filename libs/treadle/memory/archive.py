"""The checkpoint archive in memory (``ports.CheckpointArchive``): named blobs in a dict, with the counts a test
asserts on (what was sent), and an outage switch (``available``) that fails every call as the broker's
``ArchiveUnavailable`` does."""

from __future__ import annotations

import hashlib

from treadle.checkpoints.archive import ArchiveConflict, ArchiveUnavailable, Holding


class MemoryArchive:
    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.available = True
        self.puts = 0
        self.put_bytes = 0

    async def put(self, name: str, data: bytes, *, new: bool = False, holding: Holding | None = None) -> None:
        self._up("put", name)
        if holding is not None and await self.digest(name) != holding.digest:
            raise ArchiveConflict(f"checkpoint archive (memory): {name} changed")
        self.blobs[name] = bytes(data)
        self.puts += 1
        self.put_bytes += len(data)

    async def get(self, name: str) -> bytes | None:
        self._up("get", name)
        return self.blobs.get(name)

    async def delete(self, name: str) -> None:
        self._up("delete", name)
        self.blobs.pop(name, None)

    async def digest(self, name: str) -> str | None:
        self._up("digest", name)
        data = self.blobs.get(name)
        return hashlib.sha256(data).hexdigest() if data is not None else None

    def _up(self, verb: str, name: str) -> None:
        if not self.available:
            raise ArchiveUnavailable(f"checkpoint archive (memory): {verb} {name} failed: unavailable")
