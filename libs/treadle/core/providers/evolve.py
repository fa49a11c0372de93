"""How provider sessions and provider threads fold into a thread: attached, stopped, unusable (L4, L9)."""

from __future__ import annotations

from treadle.core import activity
from treadle.core.envelope import Envelope
from treadle.core.providers.capabilities import view
from treadle.core.providers.events import ProviderAttached, ProviderResumeFailed, ProviderStopped
from treadle.core.providers.model import ProviderSession, ProviderThread
from treadle.core.view import Folds, ThreadView


def _provider_attached(state: ThreadView, e: Envelope, d: ProviderAttached) -> None:
    for s in state.sessions:
        if s.status == "live":
            s.status = "stopped"
            s.reason = s.reason or "replaced"
    state.sessions.append(
        ProviderSession(
            id=d.session_id, provider=d.provider, host_id=d.host_id, boot_id=d.boot_id, capabilities=d.capabilities
        )
    )
    pth = None
    for p in state.provider_threads:
        if p.id == d.provider_thread_id:
            pth = p
    if pth is None:
        pth = ProviderThread(
            id=d.provider_thread_id,
            provider=d.provider,
            native_ref=d.native_ref,
            replaces=d.replaces,
            settings=d.settings,
        )
        state.provider_threads.append(pth)
    elif pth.settings is None:
        pth.settings = d.settings  # a thread attached before settings were recorded: learnt on its next attach
    pth.session_id = d.session_id
    pth.status = "active"
    state.capabilities = view(d.capabilities)


def _provider_stopped(state: ThreadView, e: Envelope, d: ProviderStopped) -> None:
    s = state.session(d.session_id)
    if s is not None and s.status == "live":
        s.status = "stopped"
        s.reason = d.reason
    activity.record(
        state,
        e,
        "runtime.warning",
        _current_run_id(state),
        None,
        f"provider session stopped: {d.reason}" + (f" ({d.detail})" if d.detail else ""),
    )


def _provider_resume_failed(state: ThreadView, e: Envelope, d: ProviderResumeFailed) -> None:
    for p in state.provider_threads:
        if p.id == d.provider_thread_id:
            p.status = "unusable"
            p.session_id = None
    activity.record(
        state,
        e,
        "provider_thread.unusable",
        _current_run_id(state),
        None,
        f"provider thread could not resume: {d.reason}",
    )


def _current_run_id(state: ThreadView) -> str:
    # L12.4: activity carries a run id; a provider fact belongs to the active run, else the latest one.
    return state.active_run_id or (state.runs[-1].id if state.runs else "")


FOLDS: Folds = {
    ProviderAttached: _provider_attached,
    ProviderStopped: _provider_stopped,
    ProviderResumeFailed: _provider_resume_failed,
}
