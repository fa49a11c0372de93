"""One unprivileged uid/gid per tenant, allocated once and recorded on the workspace volume.

The record (``<root>/.treadle-ids.json``) lives beside the tenants' workspaces, so every host and service
that mounts the volume sees the same numbers, and files a tenant's agent wrote keep an owner that means
the same thing everywhere. Allocation takes an exclusive ``flock`` on ``<root>/.treadle-ids.lock`` and
rewrites the record atomically, so two processes allocating at once never hand out one uid twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treadle.core.ids import is_token

RECORD = ".treadle-ids.json"
LOCK = ".treadle-ids.lock"


class IdentityError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class TenantIds:
    uid: int
    gid: int

    def spawn_kwargs(self) -> dict[str, Any]:
        """``subprocess``/``asyncio`` keyword arguments that start a child as this tenant: setresgid,
        setgroups([]) and setresuid in the child, which also drops every capability root had."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


class TenantIdentities:
    """``ids(tenant)`` gives the tenant's numbers, allocating the next free ones on first use.

    ``base``/``count`` bound the range (well above the machine's own users and below the 32-bit limit
    that user namespaces map)."""

    def __init__(self, root: Path, base: int = 200_000, count: int = 1_000_000) -> None:
        if base < 1000 or count < 1:
            raise IdentityError(f"uid range {base}+{count} would reach the machine's own users")
        self.root, self.base, self.count = Path(root), base, count
        self._known: dict[str, TenantIds] = {}

    def ids(self, tenant: str) -> TenantIds:
        known = self._known.get(tenant)
        if known is not None:
            return known
        if not is_token(tenant):
            raise IdentityError(f"invalid tenant name {tenant!r}")
        record = self._read()
        if tenant not in record:
            with self._locked():
                record = self._read()  # another process may have allocated it meanwhile
                if tenant not in record:
                    record[tenant] = self._next_free(record)
                    self._write(record)
        uid = record[tenant]
        self._known[tenant] = ids = TenantIds(uid, uid)
        return ids

    def _next_free(self, record: dict[str, int]) -> int:
        taken = set(record.values())
        for uid in range(self.base, self.base + self.count):
            if uid not in taken:
                return uid
        raise IdentityError(f"no free uid left in {self.base}+{self.count}")

    def _read(self) -> dict[str, int]:
        try:
            raw = json.loads((self.root / RECORD).read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise IdentityError(f"unreadable tenant id record {self.root / RECORD}: {e}") from None
        if not isinstance(raw, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in raw.values()):
            raise IdentityError(f"malformed tenant id record {self.root / RECORD}")
        return raw

    def _write(self, record: dict[str, int]) -> None:
        tmp = self.root / f".{RECORD}.{os.getpid()}"
        tmp.write_text(json.dumps(record, sort_keys=True))
        os.chmod(tmp, 0o644)  # readable by the services, writable by their owner only
        os.replace(tmp, self.root / RECORD)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
