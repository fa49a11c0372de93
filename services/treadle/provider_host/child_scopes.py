"""Child checkpoint scopes at the moment they matter (L10.3).

A subagent writes into the workspace right after it starts, long before the supervisor folds its start, so
its baseline must be taken here, before the start is published and while the turn waits. The end is
captured the same way before the completion is published. The supervisor later asks for the same
(scope, ordinal), which the checkpoint service answers from the existing ref, and records it. A capture
that fails here is only logged: the supervisor's request then makes (or reports the failure of) it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from treadle.checkpoints.client import CheckpointClient
from treadle.checkpoints.protocol import Capture
from treadle.core import provider_events as pe
from treadle.core.checkpoints import child_scopes

if TYPE_CHECKING:
    from .publisher import TurnPublisher

log = logging.getLogger(__name__)


class ChildScopeSink:
    """A turn sink that captures a subagent's scope around its start and end, then passes the event on."""

    def __init__(
        self,
        sink: TurnPublisher,
        checkpoints: CheckpointClient,
        *,
        tenant: str,
        thread: str,
        workspace: str,
        volume: str,
    ) -> None:
        self._sink = sink
        self._checkpoints = checkpoints
        self._volume = volume
        self._tenant, self._thread, self._workspace = tenant, thread, workspace
        self._scopes: dict[str, str] = {}  # open subagent node -> its scope

    async def event(self, body: pe.AnyBody) -> None:
        if isinstance(body, pe.ToolStarted) and body.kind in child_scopes.CHECKPOINTABLE:
            scope = child_scopes.scope_for_new(self._scopes, body.node_id, body.parent_id)
            self._scopes[body.node_id] = scope
            await self._capture(
                Capture(
                    tenant=self._tenant,
                    thread=self._thread,
                    workspace=self._workspace,
                    scope=scope,
                    ordinal=child_scopes.BASELINE,
                    status="baseline",
                )
            )
        elif isinstance(body, pe.ToolCompleted) and body.node_id in self._scopes:
            scope = self._scopes[body.node_id]
            await self._capture(
                Capture(
                    tenant=self._tenant,
                    thread=self._thread,
                    workspace=self._workspace,
                    scope=scope,
                    ordinal=child_scopes.END,
                    status=body.status,
                    previous_ordinal=child_scopes.BASELINE,
                )
            )
        await self._sink.event(body)

    async def text(self, message_id: str, node_id: str, chunk: str) -> None:
        await self._sink.text(message_id, node_id, chunk)

    async def text_done(self, message_id: str, node_id: str, text: str) -> None:
        await self._sink.text_done(message_id, node_id, text)

    async def drain(self) -> None:
        await self._sink.drain()

    def close(self) -> None:
        self._sink.close()

    async def _capture(self, request: Capture) -> None:
        try:
            await self._checkpoints.capture(request, volume=self._volume)
        except Exception as exc:  # the supervisor's own request for this checkpoint decides what is recorded
            log.warning("child checkpoint %s/%s not taken at the source: %r", request.scope, request.ordinal, exc)
