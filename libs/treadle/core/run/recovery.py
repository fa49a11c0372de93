"""L9.4: when a provider thread cannot be resumed, the conversation goes on on a replacement provider thread
built from app context. Pure decisions; the supervisor's placement does the I/O."""

from __future__ import annotations

from treadle.core.envelope import Payload
from treadle.core.providers.events import ProviderResumeFailed
from treadle.core.requests.events import RequestResolved
from treadle.core.run.model import Run
from treadle.core.view import ThreadView

CONTEXT_LIMIT = 20_000  # characters of earlier conversation carried into a replacement provider thread


def resume_failed(state: ThreadView, provider_thread_id: str, reason: str) -> list[Payload]:
    """Keep the graph, mark the provider thread unusable, and mark what was waiting on its live runtime
    ``not_resumable`` (its callbacks died with it)."""
    events: list[Payload] = [ProviderResumeFailed(provider_thread_id=provider_thread_id, reason=reason)]
    for req in state.requests:
        if req.status == "pending":
            events.append(RequestResolved(request_id=req.id, run_id=req.run_id, status="not_resumable"))
    return events


def needs_context(state: ThreadView) -> bool:
    """The live provider thread replaces one that could not resume, and no turn has run on it yet."""
    pth = state.provider_thread
    if pth is None or pth.replaces is None:
        return False
    # newest first: once a turn ran on it, that is one of the last runs (from the oldest, every run walked them all)
    return not any(a.provider_thread_id == pth.id for r in reversed(state.runs) for a in r.attempts)


def replacement_context(state: ThreadView, run: Run) -> str:
    """The app thread's conversation before ``run``, as text the new provider thread starts from."""
    lines = []
    for m in state.messages:
        if m.run_id == run.id:
            continue
        earlier = state.run(m.run_id or "")
        if earlier is None or earlier.ordinal >= run.ordinal or not m.text.strip():
            continue
        if m.role == "assistant" and m.status != "completed":
            continue
        lines.append(f"{m.role}: {m.text.strip()}")
    if not lines:
        return ""
    text = "\n".join(lines)[-CONTEXT_LIMIT:]
    return (
        "[The earlier provider thread of this conversation could not be resumed. The conversation so far:]\n"
        f"{text}\n[End of the earlier conversation.]"
    )


def replaced_thread(state: ThreadView, provider: str, new_provider_thread_id: str) -> str | None:
    """The unusable provider thread a newly placed one replaces (L9.4), if it is new and one is unreplaced."""
    if state.provider_thread_of(new_provider_thread_id) is not None:
        return None
    replaced = {p.replaces for p in state.provider_threads}
    return next(
        (
            p.id
            for p in reversed(state.provider_threads)
            if p.provider == provider and p.status == "unusable" and p.id not in replaced
        ),
        None,
    )


def with_replacement_context(state: ThreadView, run: Run, text: str) -> str:
    """The turn's input; the first turn on a replacement provider thread carries the conversation before it."""
    if not needs_context(state):
        return text
    context = replacement_context(state, run)
    return f"{context}\n\n{text}" if context else text
