"""Issue 23, item 4: the stuck-run alert reads the age of the oldest run not ended yet, exported by the
projector (it folds every event, so it knows which runs are open): while a run hangs, the gauge is at least as
old as the run; once it has ended (interrupted), it is 0."""

from __future__ import annotations

from datetime import datetime

import httpx
import nats

from tests.support.api import make_api
from tests.support.helpers import quiet, wait_for
from tests.support.scripts import HANG, script
from treadle.cli.stack import Stack


def _gauge(text: str) -> float:
    [value] = [float(line.split()[-1]) for line in text.splitlines() if line.startswith("treadle_run_oldest_active_")]
    return value


async def test_the_projector_exports_the_age_of_the_oldest_run_not_ended(tmp_path):
    async with Stack(tmp_path / "stack", on_output=quiet) as stack:
        nc = await nats.connect(stack.nats_url)
        api = await make_api(stack, nc, "stuck")
        metrics = httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.health_ports['projector']}")
        try:
            assert _gauge((await metrics.get("/metrics")).text) == 0  # nothing open yet
            thread = await api.create_thread()
            hung = await api.send(thread, "hang", script=script(HANG))
            run = await api.wait_running(hung["run_id"])
            opened = datetime.fromisoformat(run["queued_at"])

            async def age() -> float | None:
                value = _gauge((await metrics.get("/metrics")).text)
                return value if value > 0 else None  # once the projector has folded the run's queueing

            before = datetime.now(opened.tzinfo)
            seen = await wait_for(age, timeout=20, what="the open run's age exported")
            assert seen >= (before - opened).total_seconds()  # the hung run's age, not a later one's

            await api.post(f"/v1/runs/{hung['run_id']}/interrupt", expect=202)
            await api.wait_run(hung["run_id"], "interrupted")

            async def closed() -> bool:
                return _gauge((await metrics.get("/metrics")).text) == 0

            await wait_for(closed, timeout=20, what="the gauge back to 0 once every run ended")
        finally:
            await metrics.aclose()
            await api.close()
            await nc.close()
