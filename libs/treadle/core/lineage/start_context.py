"""The starting context of a run (requirements L4.2, L5, L6.2, L7.1): the one provider-neutral hook every run
passes before its provider sees it, and where its provider session must be placed.

Nothing here knows a provider by name: native fork needs the capabilities the source provider published and
the target's; everything else is portable text built by the local summariser (summarise.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from treadle.core.ctx import Ctx
from treadle.core.envelope import Payload
from treadle.core.lineage.events import ContextResolved, HandoffCreated, TransferFailed
from treadle.core.lineage.model import ContextTransfer
from treadle.core.lineage.summarise import MATERIAL_CHARS, span, summarise
from treadle.core.providers import settings as provider_settings
from treadle.core.providers.capabilities import fork_fidelity
from treadle.core.providers.model import ProviderCapabilities, ProviderThread, ProviderThreadSettings
from treadle.core.run.events import RunFailed
from treadle.core.run.model import Run
from treadle.core.view import ThreadView

# L5.4: a provider thread that has been handed this many deltas is "confused by repeated handoffs": the next
# return to it starts a fresh provider thread with a full summary instead.
MAX_DELTA_HANDOFFS = 3
REPORTED = ("completed", "interrupted", "failed")  # runs whose outcome a summary reports (L7.2)


# --- the starting context of a run (L5.2-L5.4, L6.2, L7.1) -----------------------------------------------


def needs_context(state: ThreadView, run: Run) -> bool:
    """The run's context is still to be resolved: never was, or its provider thread turned out unusable before
    the context reached it (L4.2: then it is resolved again, onto a replacement)."""
    context = state.start_context(run.id)
    if context is None:
        return True
    pth = state.provider_thread_of(context.provider_thread_id)
    return not context.delivered and pth is not None and pth.status == "unusable"


def _open_transfers(state: ThreadView, run: Run) -> list[ContextTransfer]:
    """Transfers the run must resolve: pending forks and its merge-backs, and those it resolved already when
    it resolves again after an unusable provider thread."""
    return [
        t
        for t in state.transfers
        if (t.status == "pending" and (t.type == "fork" or t.run_id == run.id))
        or (t.status in ("resolved_native", "resolved_portable") and (t.run_id == run.id or _undelivered(state, t)))
    ]


def _undelivered(state: ThreadView, transfer: ContextTransfer) -> bool:
    """Resolved for a run that ended before its context reached a provider: the next run takes it over."""
    owner = state.run(transfer.run_id or "")
    context = state.start_context(transfer.run_id or "")
    return owner is not None and owner.terminal and context is not None and not context.delivered


def _usable(state: ThreadView, provider: str) -> list[ProviderThread]:
    """The provider's threads a run could go on with, newest first (divergent: rolled back under it, L10.5)."""
    return [
        p
        for p in reversed(state.provider_threads)
        if p.provider == provider and p.status not in ("unusable", "divergent")
    ]


def target_thread(
    state: ThreadView, provider: str, wanted: ProviderThreadSettings | None = None
) -> ProviderThread | None:
    """The provider thread a run on ``provider`` resumes: the newest usable one of that provider (L5.3) started
    under the settings the run asks for (L5.4; ``provider_settings.of_run``; None: any)."""
    return next((p for p in _usable(state, provider) if wanted is None or provider_settings.fits(p, wanted)), None)


def _target(state: ThreadView, run: Run) -> ProviderThread | None:
    return target_thread(state, run.provider, provider_settings.of_run(state, run))


def _incompatible(state: ThreadView, run: Run) -> str | None:
    """L5.4: why the provider's newest usable thread cannot serve ``run`` when no thread of it can (settings)."""
    newest = next(iter(_usable(state, run.provider)), None)
    if newest is None:
        return None
    change = provider_settings.incompatibility(newest.settings, provider_settings.of_run(state, run))
    return f"settings incompatible with provider thread {newest.id} ({change})" if change else None


def _failed(run: Run, transfer: ContextTransfer, error: str) -> list[Payload]:
    """An unresolvable transfer fails the run before any provider work, saying why."""
    return [
        TransferFailed(transfer_id=transfer.id, run_id=run.id, error=error),
        RunFailed(run_id=run.id, attempt_id=run.attempt.id, error=f"context transfer failed: {error}"),
    ]


def _native_fork(
    source: ThreadView,
    point_run: Run,
    provider: str,
    target: ProviderCapabilities | None,
    subagent_ref: str | None = None,
) -> tuple[str, str | None] | None:
    """Same provider, native fork on both sides and refs to fork at: the provider thread that ran the point, and
    the turn to fork after (None: its end, allowed only when the point is that thread's last turn).

    Weak identity is enough: it means Treadle minted the turn refs (Claude Code's prompt uuids), which the
    provider records and can fork at; only a provider with no ids at all has nothing to name the point by."""
    att = point_run.attempt
    pth = source.provider_thread_of(att.provider_thread_id)
    session = source.session(att.session_id or "")
    if pth is None or session is None or pth.provider != provider or not pth.native_ref:
        return None
    caps = session.capabilities
    if fork_fidelity(caps) != "native" or (target is not None and not target.fork):
        return None
    if subagent_ref:  # L6.4: the subagent's own provider thread, forked at its end (the subagent completed)
        return subagent_ref, None
    last = max(pth.covered_ordinals, default=0)
    if att.native_turn_ref is None and point_run.ordinal != last:
        return None
    return pth.native_ref, att.native_turn_ref


class _Draft(msgspec.Struct, kw_only=True):
    """A handoff to write: which runs of which thread, under what heading."""

    strategy: str
    reason: str
    state: ThreadView
    ordinals: list[int]
    heading: str
    from_provider: str | None = None
    transfer: ContextTransfer | None = None
    inherited: str = ""


def resolve_start_context(
    state: ThreadView,
    run: Run,
    target: ProviderCapabilities | None,
    sources: Mapping[str, ThreadView],
    ctx: Ctx,
    reasoning: bool = False,
) -> list[Payload]:
    """The provider-neutral hook every run passes before its provider sees it. Decides, as events:

    - no transfer and nothing missed: nothing (the provider thread resumes as it is, L4.1);
    - a pending fork: native fork of the source's provider thread at the point (same provider, native fork,
      strong refs), else portable context summarised from the source's graph (L6.2);
    - a provider switch or a return (L5.2/L5.3): resume the provider's own thread with the delta of the runs
      it missed, or a fresh thread with a full summary (L5.4: none yet, a clean context asked for, or too
      many deltas already);
    - a merge-back: the fork's runs after the fork point as a delta (L7);
    - a transfer that cannot be resolved: the run fails before any provider work.

    ``sources`` holds the states of the threads the pending transfers come from (and the parent, for a
    forked thread's full summary)."""
    if not needs_context(state, run) or state.thread is None:
        return []
    budget = target.max_handoff_chars if target is not None else ProviderCapabilities().max_handoff_chars
    pending = _open_transfers(state, run)
    existing = None if run.clean_context else _target(state, run)
    incompatible = None if existing is not None or run.clean_context else _incompatible(state, run)
    fresh = existing is None
    pth_id = existing.id if existing is not None else ctx.ids.next("pth")
    drafts: list[_Draft] = []
    transfers: dict[str, str] = {}
    fork_ref = turn_ref = None

    for transfer in (t for t in pending if t.type == "fork"):
        source = sources.get(transfer.source_thread_id)
        point = source.run(transfer.source_point.get("run_id", "")) if source is not None else None
        if source is None or point is None or point.status in ("rolled_back", "cancelled"):
            return _failed(run, transfer, "the fork's source point no longer exists")
        native = (
            None
            if transfer.fidelity == "synthetic"
            else _native_fork(source, point, run.provider, target, transfer.source_point.get("subagent_native_ref"))
        )
        if native is not None:
            fork_ref, turn_ref = native
            if not fresh:
                pth_id = ctx.ids.next("pth")  # a native fork is always a provider thread of its own
            fresh, transfers[transfer.id] = True, "resolved_native"
            continue
        ordinals = [r.ordinal for r in source.runs if r.ordinal <= point.ordinal and r.status in REPORTED]
        title = source.thread.title if source.thread else ""
        heading = (
            f'# Context: this conversation is a fork of "{title or transfer.source_thread_id}" '
            f"at its run {point.ordinal}. Summary of the conversation up to that point "
            f"({span(ordinals)}):"
        )
        reason = "fork without native fork" if transfer.fidelity is None else "synthetic fork of a subagent"
        drafts.append(
            _Draft(
                strategy="fork_context",
                reason=reason,
                state=source,
                ordinals=ordinals,
                heading=heading,
                transfer=transfer,
            )
        )
        transfers[transfer.id] = "resolved_portable"

    own: list[int] | None = None  # the completed runs before this one: walked only when something was missed
    if not transfers or fresh:
        if existing is not None and not state.uncovered(existing, run.ordinal):
            missed: list[int] = []  # the provider thread saw every completed run (L4.1: the common case)
        else:
            own = _own(state, run)
            covered = set(existing.covered_ordinals) if existing is not None else set()
            missed = [o for o in own if o not in covered]
        if existing is not None and missed and _deltas(state, existing) >= MAX_DELTA_HANDOFFS:
            existing, fresh, pth_id = None, True, ctx.ids.next("pth")
            missed, reason = own or [], "repeated handoffs"
        elif run.clean_context:
            reason = "clean context requested"
        elif incompatible is not None:
            reason = incompatible
        elif any(p.provider == run.provider and p.status == "unusable" for p in state.provider_threads):
            reason = "replacement for an unusable provider thread"  # L4.2
        else:
            reason = "new provider thread"
        if missed and existing is not None:
            previous = _previous_provider(state, missed)
            drafts.append(
                _Draft(
                    strategy="delta",
                    reason=f"returning to {run.provider}",
                    state=state,
                    ordinals=missed,
                    from_provider=previous,
                    heading=f"# Context update: while you were away this conversation went on with "
                    f"another assistant ({span(missed)}). What happened:",
                )
            )
        elif missed and fork_ref is None:
            drafts.append(
                _Draft(
                    strategy="full_thread_summary",
                    reason=reason,
                    state=state,
                    ordinals=missed,
                    from_provider=_previous_provider(state, missed),
                    inherited=_inherited(state, sources, reasoning),
                    heading=f"# Context: summary of this conversation so far ({span(missed)}):",
                )
            )

    for transfer in (t for t in pending if t.type == "merge_back"):
        fork_state = sources.get(transfer.source_thread_id)
        if fork_state is None or fork_state.thread is None:
            return _failed(run, transfer, f"fork {transfer.source_thread_id} is not readable")
        after, upto = transfer.source_point.get("after_ordinal", 0), transfer.source_point.get("ordinal", 0)
        ordinals = [r.ordinal for r in fork_state.runs if after < r.ordinal <= upto and r.status in REPORTED]
        base = (transfer.base_point or {}).get("ordinal")
        heading = (
            f'# Results of the fork "{fork_state.thread.title or transfer.source_thread_id}", made from '
            f"this conversation at run {base}: what changed there after the fork point ({span(ordinals)}):"
        )
        drafts.append(
            _Draft(
                strategy="merge_back",
                reason="merge-back",
                state=fork_state,
                ordinals=ordinals,
                heading=heading,
                transfer=transfer,
            )
        )
        transfers[transfer.id] = "resolved_portable"

    if not drafts and not transfers and not fresh:
        return []  # L4.1: the provider thread resumes with everything it needs
    if not drafts and not transfers and not (own if own is not None else _own(state, run)):
        return []  # a thread's first provider thread: nothing to hand over
    if budget <= 0:  # the target takes no context text: only a native fork could have carried this over
        for draft in drafts:
            if (unsent := draft.transfer) is not None:
                return _failed(
                    run, unsent, f"{run.provider} accepts no context handoff and cannot fork this thread natively"
                )
        drafts = []
    events: list[Payload] = []
    share = max(1, budget // max(1, len(drafts)))
    for draft in drafts:
        text, truncated = summarise(
            draft.state, draft.ordinals, draft.heading, share, preamble=draft.inherited, reasoning=reasoning
        )
        carried = draft.transfer
        events.append(
            HandoffCreated(
                handoff_id=ctx.ids.next("hoff"),
                run_id=run.id,
                strategy=draft.strategy,
                reason=draft.reason,
                from_provider=draft.from_provider,
                to_provider=run.provider,
                provider_thread_id=pth_id,
                transfer_id=carried.id if carried else None,
                source_thread_id=carried.source_thread_id if carried else None,
                covered_ordinals=draft.ordinals,
                text=text,
                truncated=truncated,
            )
        )
    events.append(
        ContextResolved(
            run_id=run.id,
            provider=run.provider,
            provider_thread_id=pth_id,
            fresh=fresh,
            fork_native_ref=fork_ref,
            fork_at_turn_ref=turn_ref,
            handoff_ids=[e.handoff_id for e in events if isinstance(e, HandoffCreated)],
            transfers=transfers,
        )
    )
    return events


def handoff_material(
    state: ThreadView,
    run: Run,
    target: ProviderCapabilities | None,
    sources: Mapping[str, ThreadView],
    ctx: Ctx,
    chars: int = MATERIAL_CHARS,
    reasoning: bool = False,
) -> dict[str, str]:
    """L5.5: the handoffs ``resolve_start_context`` decides with ``ctx`` (pass a copy of the one it was given: the
    same ids), each built at a budget of ``chars`` instead of the target's: what a provider-backed summariser
    condenses. Handoff id -> text."""
    roomy = msgspec.structs.replace(target or ProviderCapabilities(), max_handoff_chars=chars)
    return {
        e.handoff_id: e.text
        for e in resolve_start_context(state, run, roomy, sources, ctx, reasoning)
        if isinstance(e, HandoffCreated)
    }


def _own(state: ThreadView, run: Run) -> list[int]:
    """The ordinals of the thread's completed runs before ``run``."""
    return [r.ordinal for r in state.runs if r.ordinal < run.ordinal and r.status == "completed"]


def _deltas(state: ThreadView, pth: ProviderThread) -> int:
    """The delta handoffs delivered to ``pth`` (L5.4)."""
    return sum(1 for h in state.handoffs if h.strategy == "delta" and h.provider_thread_id == pth.id and h.delivered)


def _previous_provider(state: ThreadView, ordinals: list[int]) -> str | None:
    providers = [r.provider for r in state.runs if r.ordinal in ordinals]
    return providers[-1] if providers else None


def _inherited(state: ThreadView, sources: Mapping[str, ThreadView], reasoning: bool = False) -> str:
    """A forked thread's full summary also carries what it inherited from its parent up to the fork point."""
    lineage = state.lineage
    if lineage is None or lineage.parent_thread_id is None or lineage.source_point is None:
        return ""
    parent = sources.get(lineage.parent_thread_id)
    if parent is None:
        return f"(This conversation was forked from another at its run {lineage.source_point.get('ordinal')}.)"
    upto = lineage.source_point.get("ordinal", 0)
    ordinals = [r.ordinal for r in parent.runs if r.ordinal <= upto and r.status in REPORTED]
    text, _ = summarise(
        parent,
        ordinals,
        f"It was forked from an earlier conversation at run {upto}; before the fork ({span(ordinals)}):",
        20_000,
        reasoning=reasoning,
    )
    return text


def turn_text(state: ThreadView, run: Run, message_text: str) -> str:
    """L5.2: the resolved context goes in with the user message as the new root turn, recorded, never spliced
    in silently: the handoffs are events the run links to."""
    context = state.start_context(run.id)
    if context is None or context.delivered or not context.handoff_ids:
        return message_text
    texts = [h.text for h in (state.handoff(i) for i in context.handoff_ids) if h is not None]
    return "\n\n".join([*texts, "---", message_text])


def sources_needed(state: ThreadView, run: Run) -> list[str]:
    """The threads whose state ``resolve_start_context`` reads for ``run`` (the parent only when a full summary
    may be built, which then carries what the fork inherited)."""
    ids = [t.source_thread_id for t in _open_transfers(state, run)]
    lineage = state.lineage
    if lineage is not None and lineage.parent_thread_id and (run.clean_context or _target(state, run) is None):
        ids.append(lineage.parent_thread_id)
    return list(dict.fromkeys(ids))


# --- placement: which provider thread a run's session opens ------------------------------------------------


class Placement(msgspec.Struct, kw_only=True):
    provider_thread_id: str | None  # None: a new one (its id minted by the caller)
    native_ref: str | None = None  # resume this
    fork_from: str | None = None  # or open a native fork of this...
    fork_at_turn: str | None = None  # ...after this turn


def placement(state: ThreadView, run: Run) -> Placement:
    """The resolved context's provider thread (resumed once it exists, natively forked before), else the newest
    usable provider thread of the run's provider (L4.1, L5.3), else a new one."""
    context = state.start_context(run.id)
    if context is not None:
        pth = state.provider_thread_of(context.provider_thread_id)
        if pth is not None:
            return Placement(provider_thread_id=pth.id, native_ref=pth.native_ref)
        return Placement(
            provider_thread_id=context.provider_thread_id,
            fork_from=context.fork_native_ref,
            fork_at_turn=context.fork_at_turn_ref,
        )
    pth = _target(state, run)
    return (
        Placement(provider_thread_id=pth.id, native_ref=pth.native_ref) if pth else Placement(provider_thread_id=None)
    )


def session_fits(state: ThreadView, run: Run) -> bool:
    """The live session serves ``run``: same provider, attached to the provider thread the run must use."""
    session = state.live_session
    if session is None or session.provider != run.provider:
        return False
    want = placement(state, run).provider_thread_id
    attached = state.session_thread(session.id)
    if want is None:  # a new provider thread: not on a live one started under other settings (L5.4)
        return attached is None or provider_settings.fits(attached, provider_settings.of_run(state, run))
    return attached is not None and attached.id == want


def target_capabilities(
    state: ThreadView, run: Run, script_caps: ProviderCapabilities | None, sources: Mapping[str, ThreadView]
) -> ProviderCapabilities | None:
    """What the run's provider can do, before its session exists: the script's profile, else what a session of
    that provider declared on this thread or on a source thread."""
    if script_caps is not None:
        return script_caps
    for st in (state, *sources.values()):
        for session in reversed(st.sessions):
            if session.provider == run.provider:
                return session.capabilities
    return None


def fork_refused(state: ThreadView, run: Run, message: str) -> list[Payload]:
    """The provider refused a native fork that its capabilities promised: the transfer and the run fail."""
    context = state.start_context(run.id)
    events: list[Payload] = [
        TransferFailed(transfer_id=t, run_id=run.id, error=f"native fork refused: {message}")
        for t in (context.transfer_ids if context else [])
    ]
    return events + [RunFailed(run_id=run.id, attempt_id=run.attempt.id, error=f"native fork refused: {message}")]
