"""Events of provider sessions and provider threads."""

from __future__ import annotations

from treadle.core.envelope import Payload, event
from treadle.core.providers.model import ProviderCapabilities, ProviderThreadSettings


@event("provider.attached", local=True, other_runs=False, provider_threads=True)
class ProviderAttached(Payload, kw_only=True):
    """A provider session is live for this app thread, with its provider thread (created or resumed)."""

    session_id: str
    provider: str
    host_id: str
    boot_id: str
    provider_thread_id: str
    native_ref: str
    resumed: bool = False
    capabilities: ProviderCapabilities
    replaces: str | None = None  # L9.4: a replacement for this provider thread, which could not resume
    settings: ProviderThreadSettings | None = None  # L5.4: what the run that placed it asked for


@event("provider.resume_failed", local=False, other_runs=True, provider_threads=True)
class ProviderResumeFailed(Payload, kw_only=True):
    """L9.4: the provider thread could not be resumed; it is kept in the graph, marked unusable."""

    provider_thread_id: str
    reason: str


@event("provider.stopped", local=True, other_runs=False, provider_threads=True)
class ProviderStopped(Payload, kw_only=True):
    """L9.3: the live runtime is gone; the provider thread and its native ref are kept."""

    session_id: str
    reason: str
    detail: str | None = None  # how a runtime that died under a turn ended ("codex app-server was killed by SIGKILL")
