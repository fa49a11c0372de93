"""Getting a run a live provider session (L1.2, L9.3, L9.4).

Placement itself is NATS queue-group placement: the request goes to ``treadle.place.<volume>``, whose queue
group holds exactly the hosts on that volume with spare capacity (a host leaves the group when full), so
NATS picks one host that can take the session, with no scheduler state to keep consistent. Here the
supervisor decides *what* to place: the thread's provider thread resumed from its durable native ref, or,
when that resume fails, a replacement provider thread seeded from the app thread's own history.
"""

from __future__ import annotations

import logging

from treadle.domain import events as ev
from treadle.domain import recovery
from treadle.domain import supervision as sv
from treadle.domain.commands import Ctx
from treadle.domain.entities import Run
from treadle.domain.turn_options import scripted_capabilities
from treadle.domain.thread import ThreadState
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostClient
from treadle.runtime.consumer import Retryable

log = logging.getLogger(__name__)


class Placement:
    def __init__(self, hosts: HostClient) -> None:
        self._hosts = hosts

    async def attach(self, state: ThreadState, run: Run, ctx: Ctx) -> list[ev.Payload]:
        """Place a session for ``run``; returns the facts to append (the attachment, and before it the
        failed resume when the provider thread had to be replaced)."""
        previous = state.provider_thread
        events: list[ev.Payload] = []
        replaces = None
        if previous is not None and previous.provider == run.provider:
            reply = await self._place(state, run, ctx, previous.id, previous.native_ref)
            if isinstance(reply, hp.SessionPlaced):
                return [sv.attached(reply)]
            if reply.code != "resume_failed":
                raise Retryable(f"placement failed: {reply.code} {reply.message}")
            log.warning("provider thread %s of %s could not resume (%s): replacing it", previous.id,
                        state.thread.id if state.thread else "?", reply.message)
            events, replaces = recovery.resume_failed(state, previous.id, reply.message), previous.id
        reply = await self._place(state, run, ctx, ctx.ids.next("pth"), None)
        if isinstance(reply, hp.HostFailure):
            raise Retryable(f"placement failed: {reply.code} {reply.message}")
        attached = sv.attached(reply)
        attached.replaces = replaces
        return events + [attached]

    async def _place(self, state: ThreadState, run: Run, ctx: Ctx, provider_thread_id: str,
                     native_ref: str | None) -> hp.SessionPlaced | hp.HostFailure:
        assert state.thread is not None
        return await self._hosts.place(hp.PlaceSession(
            tenant=state.thread.tenant, thread=state.thread.id, provider=run.provider, session_id=ctx.ids.next("ps"),
            provider_thread_id=provider_thread_id, native_ref=native_ref, workspace=state.thread.workspace,
            runtime_mode=state.thread.runtime_mode, model=run.model,
            capabilities=scripted_capabilities(run.provider, run.script)))


def turn_text(state: ThreadState, run: Run, text: str) -> str:
    """The turn's input; the first turn on a replacement provider thread carries the conversation before it."""
    if not recovery.needs_context(state):
        return text
    context = recovery.replacement_context(state, run)
    return f"{context}\n\n{text}" if context else text
