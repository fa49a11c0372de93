"""The context of a decision: everything non-deterministic it may use (time, ids, the actor), and what the
deployment tells it as data (where a new thread lives, which providers there are)."""

from __future__ import annotations

from datetime import datetime

import msgspec

from treadle.core.commands import Command
from treadle.core.ids import IdFactory
from treadle.core.providers.catalogue import Catalogue


class Ctx(msgspec.Struct, kw_only=True):
    """Everything non-deterministic a decision may use: time and ids come from here only."""

    now: datetime
    ids: IdFactory
    actor: str
    # The volume a thread this decision creates lives on: placement (core/placement.py) is made by the worker
    # before deciding, from what the volumes announce, so the decision itself stays pure. None: "local".
    home: str | None = None
    # The providers a decision may name, declared by the providers package (treadle.providers.registry).
    providers: Catalogue = msgspec.field(default_factory=Catalogue)

    @classmethod
    def for_command(cls, command: Command, providers: Catalogue | None = None) -> Ctx:
        ms = int(command.issued_at.timestamp() * 1000)
        return cls(
            now=command.issued_at,
            ids=IdFactory(command.id, ms),
            actor=f"user:{command.user}",
            providers=providers or Catalogue(),
        )


def thread_id_for(command_id: str, issued_at: datetime) -> str:
    """The id of the thread a create command makes: derived, so a retried create names the same thread."""
    return IdFactory(f"{command_id}|thread", int(issued_at.timestamp() * 1000)).next("thr")


def reaction_ctx(seed: str, now: datetime, actor: str, providers: Catalogue | None = None) -> Ctx:
    """The context of a worker's reaction to an event: ids seeded by what triggered it."""
    return Ctx(
        now=now, ids=IdFactory(seed, int(now.timestamp() * 1000)), actor=actor, providers=providers or Catalogue()
    )
