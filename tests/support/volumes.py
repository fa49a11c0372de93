"""A port whose volume-addressed requests all go to one volume, for suites written against one volume."""

from __future__ import annotations

import functools
from typing import Any

ADDRESSED = frozenset(
    {"prepare", "capture", "diff", "restore", "prune", "materialize", "hydrate", "place", "summarise"}
)


class OnVolume:
    """``port`` (a checkpoint store or a host directory) with ``volume=`` given on every request that takes one."""

    def __init__(self, port: Any, volume: str) -> None:
        self._port, self._volume = port, volume

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._port, name)
        return functools.partial(attr, volume=self._volume) if name in ADDRESSED else attr
