"""The default summariser (L5.5): deterministic and local, built from a thread's execution graph.

For each run it keeps what a colleague taking over would need: the user's request, the final reply,
decisions taken (answered questions, approvals, plans), files changed with their line stats, the
commands and tools run with their outcome, questions left open and todos left pending. Ids, native refs,
deltas and attempt internals are protocol noise and never appear. A model's own reasoning is another model's
hidden thinking, not the conversation: it is left out unless the deployment asks for it (``reasoning``). The text is bounded by the target
provider's ``max_handoff_chars``: the newest runs are kept whole, older ones dropped with a note.
"""

from __future__ import annotations

from collections.abc import Iterable

from treadle.core.run.model import Run
from treadle.core.view import ThreadView

REQUEST_CHARS = 1_200
REPLY_CHARS = 1_500
OUTPUT_CHARS = 160
TRUNCATION_NOTE = "\n[handoff truncated to fit the target's context budget]"


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split()) if "\n" not in text else text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _span(ordinals: list[int]) -> str:
    """``[6, 7, 8]`` → ``runs 6-8``; gaps are listed (``runs 2, 4-5``)."""
    if not ordinals:
        return "no runs"
    parts, start, prev = [], ordinals[0], ordinals[0]
    for n in [*ordinals[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ("run " if len(ordinals) == 1 else "runs ") + ", ".join(parts)


def span(ordinals: Iterable[int]) -> str:
    return _span(sorted(set(ordinals)))


def _reply(state: ThreadView, run: Run) -> str:
    """The run's final reply: its completed assistant messages of the attempt that ended it."""
    texts = [
        m.text
        for m in state.messages
        if m.run_id == run.id and m.role == "assistant" and m.attempt_id == run.attempt.id and m.text.strip()
    ]
    return "\n".join(texts)


def _request_text(state: ThreadView, run: Run) -> str:
    texts = [m.text for m in state.messages if m.run_id == run.id and m.role == "user"]
    return "\n\n".join(texts)


def run_block(state: ThreadView, run: Run, reasoning: bool = False) -> str:
    lines = [f"## Run {run.ordinal} ({run.status}, on {run.provider})"]
    if request := _request_text(state, run):
        lines.append(f"User asked: {_clip(request, REQUEST_CHARS)}")
    if reply := _reply(state, run):
        lines.append(f"Assistant replied: {_clip(reply, REPLY_CHARS)}")
    if run.error:
        lines.append(f"Error: {_clip(run.error, OUTPUT_CHARS)}")

    decisions, open_questions = [], []
    for req in state.requests:
        if req.run_id != run.id:
            continue
        if req.kind == "user_input":
            if req.status == "resolved" and req.response:
                answers = req.response.get("answers") or {}
                decisions.append(f'asked "{_clip(req.prompt, 200)}" → answered {", ".join(answers.values()) or "it"}')
            else:
                open_questions.append(_clip(req.prompt, 300))
        elif req.status == "resolved" and req.response:
            decisions.append(
                f'{req.kind} approval "{_clip(req.prompt, 200)}" → {req.response.get("decision", "answered")}'
            )
        else:
            decisions.append(f'{req.kind} approval "{_clip(req.prompt, 200)}" → {req.status}')
    for plan in state.plans:
        if plan.run_id == run.id and plan.kind == "proposed_plan":
            decisions.append(f"proposed plan ({plan.status}): {_clip(plan.text, 300)}")
    # Questions the assistant asked in plain text and nobody answered within the run.
    for line in reply.splitlines() if reply else ():
        if line.strip().endswith("?"):
            open_questions.append(_clip(line.strip(), 300))
    if decisions:
        lines.append("Decisions: " + "; ".join(decisions))

    checkpoint = next((c for c in state.checkpoints if c.id == run.checkpoint_id), None)
    if checkpoint is not None and checkpoint.files:
        files = ", ".join(f"{f.path} ({f.change}, +{f.added} -{f.removed})" for f in checkpoint.files)
        lines.append(f"Files changed: {files}")

    tools = []
    for node in run.nodes:
        if node.attempt_id != run.attempt.id:
            continue
        if node.kind not in ("tool", "subagent") and not (reasoning and node.kind == "reasoning"):
            continue
        what = node.title
        command = (node.input or {}).get("command") if node.kind == "tool" else None
        if command:
            what += f" `{_clip(str(command), 200)}`"
        outcome: str = node.status
        if node.output:
            outcome += f": {_clip(node.output, OUTPUT_CHARS)}"
        tools.append(f"{'subagent ' if node.kind == 'subagent' else ''}{what} → {outcome}")
    if tools:
        lines.append("Commands and tools: " + "; ".join(tools))
    if open_questions:
        lines.append("Open questions: " + "; ".join(open_questions))

    pending = [
        item.text
        for plan in state.plans
        if plan.run_id == run.id and plan.kind == "todo_list" and plan.root
        for item in plan.items
        if item.status != "completed"
    ]
    if pending:
        lines.append("Pending todos: " + "; ".join(_clip(t, 200) for t in pending))
    return "\n".join(lines)


def summarise(
    state: ThreadView,
    ordinals: Iterable[int],
    heading: str,
    max_chars: int,
    preamble: str = "",
    reasoning: bool = False,
) -> tuple[str, bool]:
    """The handoff text over the runs ``ordinals`` of ``state`` (oldest first), at most ``max_chars`` long;
    ``reasoning``: with the models' reasoning nodes (``TREADLE_SUPERVISOR_HANDOFF_REASONING``). Returns (text,
    truncated)."""
    wanted = set(ordinals)
    runs = sorted((r for r in state.runs if r.ordinal in wanted), key=lambda r: r.ordinal)
    blocks = [run_block(state, r, reasoning) for r in runs]
    head = heading + ("\n" + preamble if preamble else "")
    text = "\n\n".join([head, *blocks])
    if len(text) <= max_chars:
        return text, False
    # Keep the newest runs whole; say how many older ones were dropped.
    kept: list[str] = []
    budget = max_chars - len(head) - len(TRUNCATION_NOTE) - 64
    for block in reversed(blocks):
        if len(block) + 2 > budget:
            break
        kept.insert(0, block)
        budget -= len(block) + 2
    dropped = len(blocks) - len(kept)
    note = f"({dropped} earlier run{'s' if dropped != 1 else ''} omitted)" if dropped else ""
    text = "\n\n".join(filter(None, [head, note, *kept])) + TRUNCATION_NOTE
    if len(text) > max_chars:
        text = text[: max(0, max_chars - len(TRUNCATION_NOTE))] + TRUNCATION_NOTE
        text = text[:max_chars]
    return text, True


# --- a provider-backed summary (L5.5) ------------------------------------------------------------------------

LOCAL = "local"  # the deterministic summariser above
LOCAL_VERSION = 1
PROVIDER_VERSION = 1  # of the prompt below: a handoff records it, so a summary can be traced to what asked for it
MATERIAL_CHARS = 200_000  # how much of the graph a provider is given to summarise from


def provider_name(provider: str) -> str:
    return f"provider:{provider}"


def split_heading(text: str) -> tuple[str, str]:
    """A handoff's heading (its first paragraph, which tells the target what the context is) and its body."""
    heading, _, body = text.partition("\n\n")
    return heading, body


def provider_prompt(material: str, max_chars: int) -> str:
    """What a provider is asked: a summary of ``material`` (the deterministic summary at a large budget, built
    from the execution graph) for another assistant, at most ``max_chars`` long."""
    return (
        "Summarise the conversation record below for another assistant who will continue the work. Keep what "
        "it needs: what the user asked, what was decided, which files changed, which commands and tests ran and "
        "how they ended, questions left open and work left to do. Leave out ids and tool protocol details. "
        f"Reply with the summary only, in plain text, at most {max_chars} characters.\n\n"
        f"<conversation-record>\n{material}\n</conversation-record>"
    )


def accept_summary(text: str, max_chars: int) -> tuple[str | None, str | None]:
    """A provider's summary, or why it cannot be used (then the deterministic one is)."""
    text = text.strip()
    if not text:
        return None, "the provider returned no summary"
    if len(text) > max_chars:
        return None, f"the provider's summary has {len(text)} characters, over the {max_chars} allowed"
    return text, None
