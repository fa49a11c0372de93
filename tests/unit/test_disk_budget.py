"""Issue 36, finding 3: the disk budget's rule (core/disk.py) and its measurement (sandbox/disk.py) on the
real filesystem: allocated blocks (a sparse file counts what it holds), every entry an inode, hard links once,
and a walk whose cost is bounded by the file budget."""

from __future__ import annotations

import os
from pathlib import Path

from treadle.core.disk import DiskBudget, DiskUsage, budget_for, ceiling, next_check, over
from treadle.sandbox.disk import measure

MIB = 1 << 20


def test_issue36_a_sparse_file_counts_what_it_holds_and_a_dense_one_all_of_it(tmp_path: Path):
    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as f:
        f.truncate(3 << 30)  # 3 GiB of holes
    assert measure([tmp_path]).bytes < MIB
    (tmp_path / "dense.bin").write_bytes(os.urandom(4 * MIB))
    used = measure([tmp_path])
    assert 4 * MIB <= used.bytes < 5 * MIB and used.files == 2


def test_issue36_hard_links_count_once_and_symlinks_are_not_followed(tmp_path: Path, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    (outside / "big.bin").write_bytes(os.urandom(2 * MIB))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.bin").write_bytes(os.urandom(MIB))
    os.link(ws / "a.bin", ws / "b.bin")
    (ws / "out").symlink_to(outside)
    used = measure([ws, ws / "out", ws])  # a root inside another, and twice: counted once
    assert MIB <= used.bytes < 2 * MIB and used.files == 3


def test_issue36_the_walk_stops_past_the_file_budget(tmp_path: Path):
    for d in range(10):
        (tmp_path / f"d{d}").mkdir()
        for i in range(100):
            (tmp_path / f"d{d}" / f"f{i}").touch()
    assert measure([tmp_path]) == DiskUsage(bytes=measure([tmp_path]).bytes, files=1010)
    bounded = measure([tmp_path], max_files=50)
    assert bounded.files == 51 and not bounded.complete
    assert "more than 51 files" in (over(bounded, DiskBudget(files=50)) or "")


def test_issue36_the_ceiling_is_the_budget_or_what_a_turn_started_with():
    budget = DiskBudget(bytes=100, files=10)
    assert over(DiskUsage(bytes=100, files=10), budget) is None
    assert "over its disk budget" in (over(DiskUsage(bytes=101, files=1), budget) or "")
    assert "over its budget of 10" in (over(DiskUsage(bytes=1, files=11), budget) or "")
    started_over = ceiling(budget, DiskUsage(bytes=150, files=5))
    assert started_over == DiskBudget(bytes=150, files=10)  # may stay at 150 bytes, never grow
    assert over(DiskUsage(bytes=150, files=10), started_over) is None
    assert over(DiskUsage(bytes=151, files=10), started_over) is not None
    assert ceiling(DiskBudget(), DiskUsage(bytes=150, files=5)) == DiskBudget()  # no budget: no limit
    assert over(DiskUsage(bytes=1 << 40, files=10**9), DiskBudget()) is None
    assert budget_for(budget, None, 99) == DiskBudget(bytes=100, files=99)
    assert next_check(10, 0.01) == 10 and next_check(10, 2.0) == 40  # a long scan: checked less often


def test_issue36_a_session_stopped_for_the_disk_budget_fails_its_run_at_once_with_the_reason():
    """No recovery attempt (it would write the same files again): the run fails with ``disk_quota: …``."""
    from datetime import UTC, datetime

    from treadle.core import events as ev
    from treadle.core.ctx import reaction_ctx
    from treadle.core.providers.model import ProviderCapabilities
    from treadle.core.run import supervision as sv
    from treadle.core.state import fold

    at = datetime(2026, 12, 3, tzinfo=UTC)
    payloads = [
        ev.ThreadCreated(thread_id="thr_1", workspace="w", created_by="u"),
        ev.RunQueued(
            run_id="run_1",
            ordinal=1,
            message_id="msg_1",
            text="go",
            root_node_id="node_1",
            attempt_id="att_1",
            mode="auto",
            disposition="started",
            dispatched=True,
            provider="codex",
        ),
        ev.ProviderAttached(
            session_id="ps_1",
            provider="codex",
            host_id="host-1",
            boot_id="b",
            provider_thread_id="pth_1",
            native_ref="thread-1",
            capabilities=ProviderCapabilities(),
        ),
        ev.RunStarted(run_id="run_1", attempt_id="att_1", session_id="ps_1", turn_id="turn_1"),
    ]
    state = fold(
        [
            ev.Envelope(
                id=f"evt_{n}",
                type=p.TYPE,
                tenant="acme",
                thread="thr_1",
                at=at,
                command_id="cmd",
                actor="test",
                data=p,
                seq=n,
            )  # fmt: skip
            for n, p in enumerate(payloads, 1)
        ]
    )
    why = "the tenant's workspaces and runtime homes hold 3072.0 MiB, over its disk budget of 1024.0 MiB"
    reaction = sv.session_stopped(state, "ps_1", "disk_quota", reaction_ctx("s", at, "test"), why)
    assert reaction.events[0] == ev.ProviderStopped(session_id="ps_1", reason="disk_quota", detail=why)
    assert not [e for e in reaction.events if isinstance(e, ev.AttemptStarted)]
    [failed] = [e for e in reaction.events if isinstance(e, ev.RunFailed)]
    assert failed.error == f"disk_quota: {why}"
