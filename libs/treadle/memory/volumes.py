"""The volume directory's twin: a fixed set of volumes, each with a checkpoint service and a host."""

from __future__ import annotations

from treadle.core.placement import Volume
from treadle.runtime.volumes import Snapshot


class MemoryVolumes:
    def __init__(self, *names: str) -> None:
        self.volumes = [Volume(name=n, checkpoints=True, hosts=1, capacity=8) for n in names or ("local",)]
        self.tenants: dict[str, dict[str, int]] = {}

    async def snapshot(self) -> Snapshot:
        return Snapshot(volumes=list(self.volumes), tenants={v: dict(t) for v, t in self.tenants.items()})

    def placed(self, volume: str, tenant: str) -> None:
        per = self.tenants.setdefault(volume, {})
        per[tenant] = per.get(tenant, 0) + 1
