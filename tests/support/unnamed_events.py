"""Logs of events that change what they do not name, for the tests of what the projection writer writes
(``projections.changes``): a long thread of bench/frozen_state.py's shape, then renames and archives, steers
joined and carried over (to a restart attempt, to a late steer's own run, to the run that supersedes theirs),
a provider event reported by another run's attempt, edits and a reorder of queued runs, a delegation, a handoff
resolved and its context delivered, a provider thread that cannot resume, and rollbacks to the middle (kept,
rolled back natively, divergent, failed); and a delegated child thread. Consistent enough for the folds (which
trust their events), not a decision's output."""

from __future__ import annotations

import sys
from pathlib import Path

from msgspec.structs import replace

from treadle.core import events as ev
from treadle.core.providers.model import ProviderCapabilities
from treadle.core.state import fold, provider_cause

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from frozen_state import THREAD, thread_events  # noqa: E402


class _Log:
    def __init__(self, events: list[ev.Envelope]) -> None:
        self.events = events

    def add(self, data: ev.Payload, causation: str | None = None, thread: str = THREAD) -> None:
        last = self.events[-1]
        seq = (last.seq or 0) + 1
        self.events.append(
            replace(last, id=f"evt_u{seq}", type=data.TYPE, seq=seq, data=data, causation_id=causation, thread=thread)
        )


def _queued(n: int, message: str, dispatched: bool = False, **kw: object) -> ev.RunQueued:
    return ev.RunQueued(
        run_id=f"run_u{n}",
        ordinal=n,
        message_id=message,
        text=f"request {n}",
        root_node_id=f"nod_u{n}",
        attempt_id=f"att_u{n}",
        mode="auto",
        disposition="started" if dispatched else "queued",
        dispatched=dispatched,
        provider="scripted",
        **kw,  # type: ignore[arg-type]  # the optional fields of RunQueued, as the caller names them
    )


def _delta(n: int, message: str, text: str, attempt: str | None = None) -> ev.MessageDelta:
    return ev.MessageDelta(
        message_id=message, run_id=f"run_u{n}", attempt_id=attempt or f"att_u{n}", node_id=f"nod_u{n}", text=text
    )


def _rollback(log: _Log, n: int, to: int, context: str, fail: bool = False) -> None:
    state = fold(log.events)
    dropped = [r.id for r in state.runs if r.ordinal > to]
    stale = [c.id for c in state.checkpoints if c.ordinal > to]
    rollback = f"rb_u{n}"
    log.add(
        ev.RollbackStarted(
            rollback_id=rollback,
            kind="thread",
            to_run_ordinal=to,
            checkpoint_id=stale[0] if stale else "chk_none",
            commit="c0",
            rolled_back_run_ids=dropped,
            stale_checkpoint_ids=stale,
        )
    )
    if fail:
        log.add(ev.RollbackFailed(rollback_id=rollback, error="restore refused"))
        return
    if context == "rolled_back":
        log.add(
            ev.RollbackProviderRequested(
                rollback_id=rollback, provider_thread_id="pth_2", session_id="ses_2", host_id="h", turns=2
            )
        )
    log.add(
        ev.RollbackCompleted(
            rollback_id=rollback,
            undo_ref=f"refs/undo/{n}",
            undo_commit="c1",
            provider_context=context,
            provider_thread_id="pth_2" if context != "divergent" else None,
            provider_turns_dropped=2 if context == "rolled_back" else 0,
        )
    )


def unnamed_log(runs: int = 12) -> list[ev.Envelope]:
    """A long thread, then every kind of event that changes what it does not name (see the module)."""
    log = _Log(thread_events(runs))
    n = runs + 1
    log.add(ev.ThreadRenamed(title="renamed", by="u"))
    log.add(ev.ThreadArchived(by="u"))
    log.add(ev.ThreadUnarchived(by="u"))
    # Steers: one joins after text streamed before it, one restarts the attempt, two come too late.
    log.add(_queued(n, "msg_u1", dispatched=True))
    log.add(ev.RunStarted(run_id=f"run_u{n}", attempt_id=f"att_u{n}", session_id="ses_1", turn_id="turn_u1"))
    log.add(_delta(n, "msg_reply_u1", "Outlining "))
    log.add(ev.RunSteered(run_id=f"run_u{n}", message_id="msg_s1", text="shorter", steering="native"))
    log.add(_delta(n, "msg_reply_u2", "cut off"))
    log.add(ev.SteerJoined(run_id=f"run_u{n}", attempt_id=f"att_u{n}", message_id="msg_s1"))
    log.add(ev.SteerDelivered(run_id=f"run_u{n}", attempt_id=f"att_u{n}", message_id="msg_s1"))
    log.add(ev.RunSteered(run_id=f"run_u{n}", message_id="msg_s2", text="start over", steering="restart"))
    log.add(
        ev.AttemptStarted(
            run_id=f"run_u{n}",
            attempt_id="att_u_restart",
            root_node_id="nod_u_restart",
            reason="steering_restart",
            message_ids=["msg_s2"],
        )
    )
    log.add(ev.RunSteered(run_id=f"run_u{n}", message_id="msg_s3", text="late one", steering="native"))
    log.add(ev.RunSteered(run_id=f"run_u{n}", message_id="msg_s4", text="late two", steering="native"))
    log.add(ev.RunCompleted(run_id=f"run_u{n}", attempt_id="att_u_restart"))
    log.add(_queued(n + 1, "msg_s3", dispatched=True, supersedes_run_id=f"run_u{n}"))  # carries msg_s4 along
    # the superseded run's attempt reports a provider event of the run that superseded it
    log.add(
        _delta(n + 1, "msg_reply_u3", "both points", attempt="att_u_restart"), provider_cause(7, 3, "att_u_restart")
    )
    # Queued runs edited and reordered, a delegation from the active run.
    log.add(_queued(n + 2, "msg_u3"))
    log.add(_queued(n + 3, "msg_u4"))
    log.add(ev.RunEdited(run_id=f"run_u{n + 2}", text="edited", script={"steps": ["a"]}))
    log.add(ev.QueueReordered(order=[f"run_u{n + 3}", f"run_u{n + 2}"]))
    log.add(ev.RunEdited(run_id=f"run_u{n + 3}", text="edited too"))
    log.add(
        ev.DelegationStarted(
            run_id=f"run_u{n + 1}",
            attempt_id=f"att_u{n + 1}",
            node_id="nod_task",
            child_thread_id="thr_child",
            child_run_id="run_child",
            title="look it up",
        )
    )
    log.add(
        ev.DelegationFinished(
            run_id=f"run_u{n + 1}",
            node_id="nod_task",
            child_thread_id="thr_child",
            child_run_id="run_child",
            transfer_id="tr_task",
            status="completed",
            summary="found it",
        )
    )
    log.add(ev.RunCompleted(run_id=f"run_u{n + 1}", attempt_id=f"att_u{n + 1}"))
    # The next run switches provider: a handoff, its context resolved, then delivered; the old thread is unusable.
    log.add(ev.RunDispatched(run_id=f"run_u{n + 3}"))
    log.add(
        ev.ProviderAttached(
            session_id="ses_2",
            provider="scripted",
            host_id="h",
            boot_id="b",
            provider_thread_id="pth_2",
            native_ref="n2",
            capabilities=ProviderCapabilities(),
        )
    )
    log.add(
        ev.HandoffCreated(
            handoff_id="ho_1",
            run_id=f"run_u{n + 3}",
            strategy="delta",
            to_provider="scripted",
            provider_thread_id="pth_2",
            covered_ordinals=list(range(1, n + 2)),
            text="what happened so far",
        )
    )
    log.add(
        ev.ContextResolved(
            run_id=f"run_u{n + 3}", provider="scripted", provider_thread_id="pth_2", fresh=True, handoff_ids=["ho_1"]
        )
    )
    log.add(ev.RunStarted(run_id=f"run_u{n + 3}", attempt_id=f"att_u{n + 3}", session_id="ses_2", turn_id="turn_u4"))
    log.add(ev.ContextDelivered(run_id=f"run_u{n + 3}", provider_thread_id="pth_2"))
    log.add(ev.ProviderResumeFailed(provider_thread_id="pth_1", reason="gone"))
    checkpoint = ev.CheckpointCaptured(
        checkpoint_id="ckpt_u4", run_id=f"run_u{n + 3}", ordinal=n + 3, kind="run", status="completed"
    )
    log.add(ev.RunCompleted(run_id=f"run_u{n + 3}", attempt_id=f"att_u{n + 3}", checkpoint=checkpoint))
    # Rollbacks to the middle: the provider thread rolled back natively, one kept, one divergent, one failed.
    _rollback(log, 1, runs - 2, "rolled_back")
    _rollback(log, 2, runs // 2, "kept")
    _rollback(log, 3, runs // 3, "divergent")
    _rollback(log, 4, 1, "kept", fail=True)
    log.add(ev.ThreadRenamed(title="renamed again", by="u"))
    return log.events


def child_log() -> list[ev.Envelope]:
    """A delegated child thread: created, delegated, its run, the delegation ended."""
    log = _Log(thread_events(0))
    child = "thr_bench_child"
    log.events = [replace(e, thread=child) for e in log.events]
    log.events[0] = replace(log.events[0], data=replace(log.events[0].data, thread_id=child))
    log.add(
        ev.ThreadDelegated(
            parent_thread_id=THREAD,
            root_thread_id=THREAD,
            parent_run_id="run_u14",
            parent_node_id="nod_task",
            depth=1,
            mode="wait",
        ),
        thread=child,
    )
    log.add(_queued(1, "msg_c1", dispatched=True), thread=child)
    log.add(ev.RunCompleted(run_id="run_u1", attempt_id="att_u1"), thread=child)
    log.add(ev.DelegationEnded(child_run_id="run_u1", status="completed"), thread=child)
    return log.events
