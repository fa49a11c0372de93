"""The adapter contract. Orchestration sees only this and the capabilities an adapter declares."""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Protocol

from ..domain import provider_events as pe
from ..domain.entities import ProviderCapabilities
from ..domain.ids import IdFactory


class Unsupported(Exception):
    """The adapter lacks the capability; orchestration applies the degradation policy instead."""


class TurnSink(Protocol):
    """Where an adapter reports a turn: normalised events (durable) and raw text (live)."""

    async def event(self, body: pe.Body) -> None: ...
    async def text(self, message_id: str, node_id: str, chunk: str) -> None: ...
    async def text_done(self, message_id: str, node_id: str, text: str) -> None: ...


class Turn:
    """One provider turn as an adapter sees it."""

    def __init__(self, *, run_id: str, attempt_id: str, root_node_id: str, text: str, script: dict | None,
                 ids: IdFactory) -> None:
        self.run_id = run_id
        self.attempt_id = attempt_id
        self.root_node_id = root_node_id
        self.text = text
        self.script = script
        self.ids = ids


class ProviderAdapter(abc.ABC):
    name: str
    capabilities: ProviderCapabilities

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace

    @abc.abstractmethod
    async def open_thread(self, native_ref: str | None, fresh_ref: str) -> tuple[str, bool]:
        """Resume ``native_ref`` (L9.2, required) or create a provider thread. Returns (native ref, resumed)."""

    @abc.abstractmethod
    async def run_turn(self, turn: Turn, sink: TurnSink) -> None:
        """Play one turn to its end, reporting through ``sink``; ends with ``TurnCompleted``."""

    async def respond(self, request_id: str, response: dict) -> None:
        raise Unsupported("this provider has no live requests")

    async def close(self) -> None:
        return None
