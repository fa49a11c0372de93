"""The provider-backed handoff summariser (L5.5, setting ``TREADLE_SUPERVISOR_SUMMARISER=provider:<name>``).

The pure hook (start_context.resolve_start_context) decides every handoff with the deterministic summariser.
When a provider is configured, each handoff's text is then asked of that provider, from the same runs built at
a large budget (the material), within the target's budget; whenever the provider fails, times out, answers
nothing or overruns, the deterministic text stands and the handoff records why (``fallback``). Either way the
handoff says which summariser wrote it and its version, and it is stored before any provider sees it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import msgspec

from treadle.core import events as ev
from treadle.core.lineage import summarise as sm
from treadle.ports import HostDirectory
from treadle.providers import protocol as hp
from treadle.providers.hosts import HostUnavailable
from treadle.runtime.settings import SupervisorSettings

log = logging.getLogger(__name__)


class SummariserSettingError(ValueError):
    pass


class ProviderSummariser:
    def __init__(
        self,
        hosts: HostDirectory,
        provider: str,
        *,
        model: str | None = None,
        script: dict[str, Any] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self._hosts = hosts
        self.provider = provider
        self.name = sm.provider_name(provider)
        self._model, self._script, self._timeout = model, script, timeout

    @classmethod
    def configured(cls, hosts: HostDirectory, own: SupervisorSettings) -> ProviderSummariser | None:
        """The summariser the settings ask for; None: the local one alone. A bad setting stops the worker."""
        if own.summariser == sm.LOCAL:
            return None
        kind, _, provider = own.summariser.partition(":")
        if kind != "provider" or not provider:
            raise SummariserSettingError(f"summariser must be 'local' or 'provider:<name>', not {own.summariser!r}")
        try:
            script = json.loads(own.summariser_script) if own.summariser_script else None
        except json.JSONDecodeError as exc:
            raise SummariserSettingError(f"summariser_script is not JSON: {exc}") from None
        return cls(hosts, provider, model=own.summariser_model, script=script, timeout=own.summariser_timeout)

    async def apply(
        self, tenant: str, volume: str, events: list[ev.Payload], material: Mapping[str, str], budget: int
    ) -> list[ev.Payload]:
        """``events`` with each handoff's text written by the provider where it can be: by a host of ``volume``, the
        thread's home."""
        handoffs = sum(isinstance(e, ev.HandoffCreated) for e in events)
        share = max(1, budget // max(1, handoffs))  # the pure hook splits the budget the same way
        return [
            await self._one(tenant, volume, e, material.get(e.handoff_id, e.text), share)
            if isinstance(e, ev.HandoffCreated)
            else e
            for e in events
        ]

    async def _one(
        self, tenant: str, volume: str, handoff: ev.HandoffCreated, material: str, budget: int
    ) -> ev.HandoffCreated:
        heading, _ = sm.split_heading(handoff.text)
        _, body = sm.split_heading(material)
        room = budget - len(heading) - 2
        if room <= 0:
            return self._fallback(handoff, f"the target's budget of {budget} characters leaves no room for a summary")
        request = hp.Summarise(
            tenant=tenant,
            provider=self.provider,
            text=sm.provider_prompt(body, room),
            model=self._model,
            script=self._script,
            timeout=self._timeout,
        )
        try:
            reply = await self._hosts.summarise(request, volume=volume)
        except HostUnavailable as exc:
            return self._fallback(handoff, str(exc))
        if isinstance(reply, hp.HostFailure):
            return self._fallback(handoff, f"{reply.code}: {reply.message}")
        text, why = sm.accept_summary(reply.text, room)
        if text is None:
            return self._fallback(handoff, why or "unusable summary")
        return msgspec.structs.replace(
            handoff, text=f"{heading}\n\n{text}", truncated=False, summariser=self.name, version=sm.PROVIDER_VERSION
        )

    def _fallback(self, handoff: ev.HandoffCreated, why: str) -> ev.HandoffCreated:
        log.info(
            "handoff %s: %s could not summarise (%s); the local summary is used", handoff.handoff_id, self.name, why
        )
        return msgspec.structs.replace(
            handoff, summariser=sm.LOCAL, version=sm.LOCAL_VERSION, fallback=f"{self.name}: {why}"[:500]
        )
