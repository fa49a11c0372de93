"""L9.3, issue 17: a restarted host, or a watcher of a dead one, reports many sessions stopped several at a
time. One by one, the idle sessions of a host's history held up the report, and so the recovery, of the one
whose run was waiting (7 ms each under load: a stuck run within 30 s at a few thousand sessions)."""

from __future__ import annotations

import asyncio

from treadle.provider_host.registry import SessionRecord
from treadle.provider_host.watcher import REPORTS_IN_FLIGHT, report_all


async def test_L9_3_sessions_are_reported_concurrently_up_to_a_bound():
    record = SessionRecord(tenant="t", thread="thr", provider_thread_id="pth", boot_id="b")
    in_flight, most, reported = 0, 0, []
    all_in = asyncio.Event()

    async def report(session_id: str, rec: SessionRecord, reason: str) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        if in_flight == REPORTS_IN_FLIGHT:
            all_in.set()
        await all_in.wait()  # one at a time, this would never be set
        reported.append((session_id, reason))
        in_flight -= 1

    sessions = [(f"ps_{i}", record) for i in range(REPORTS_IN_FLIGHT * 3)]
    async with asyncio.timeout(5):
        await report_all(sessions, report, "host_restarted")
    assert most == REPORTS_IN_FLIGHT and sorted(reported) == sorted((s, "host_restarted") for s, _ in sessions)
