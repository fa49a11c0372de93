"""What-if patches for `bench/run.py --experiment …` (diagnostic only; never used by the product).

`bench/run.py` puts this directory on the workers' PYTHONPATH and names the experiments in
TREADLE_BENCH_EXPERIMENTS; Python imports this module at start-up in every worker process:

* ``no-batch``: a multi-event decision is appended as chained single-message appends, each fenced on the
  previous one's sequence, instead of an ADR-50 atomic batch. NOT atomic (a crash can leave half a decision):
  it only measures what the atomic batch costs. The events of a decision may also not be contiguous in the
  stream, so per-event sequences in the writer's cached fold can be off (the last one is right).
* ``no-git-ref``: an unchanged workspace's checkpoint ref is written as a loose ref file in-process instead of
  spawning ``git update-ref`` (skips the previous-ref verify; measures what one git process per run costs).
"""

from __future__ import annotations

import os

_WANTED = {e.strip() for e in os.environ.get("TREADLE_BENCH_EXPERIMENTS", "").split(",") if e.strip()}


def _no_batch() -> None:
    from treadle.eventlog.log import EventLog

    single = EventLog.append

    async def append(self, tenant, thread, expected_seq, events):
        if len(events) <= 1:
            return await single(self, tenant, thread, expected_seq, events)
        seq = expected_seq
        for e in events:
            seq = await single(self, tenant, thread, seq, [e])
        return seq

    EventLog.append = append


def _no_git_ref() -> None:
    from treadle.checkpoints import git

    async def create_ref(self, repo, ref, commit, prev_ref, prev):
        path = repo.gitdir / ref
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False, b"ref exists"
        try:
            os.write(fd, commit.encode() + b"\n")
        finally:
            os.close(fd)
        return True, b""

    git.Workspaces._create_ref = create_ref


if "no-batch" in _WANTED:
    _no_batch()
if "no-git-ref" in _WANTED:
    _no_git_ref()
