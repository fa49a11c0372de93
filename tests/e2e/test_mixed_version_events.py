"""Issue 41, item 4 (upgrades) on the real stack: while a rolling upgrade runs, a newer worker may append an
event type this version does not know, with fields of its own, to a thread this version's workers serve. They
must carry on: the thread reads as before (the projector and the gateway skip what they do not know), the
event is in the thread's event stream with its sequence, and the next message runs, its append fenced on top
of the newer event."""

from __future__ import annotations

import datetime

from tests.support.scripts import script, text
from treadle.core.envelope import Envelope


async def test_a_newer_workers_unknown_event_neither_breaks_reads_nor_stops_the_next_run(api, log, tenant):
    thread = await api.create_thread()
    first = await api.send(thread, "one", script=script(text("first")))
    await api.wait_run(first["run_id"])
    before = await api.thread(thread)

    newer = Envelope(
        id="evt_01newerworkerv9xxxxxxxxxx", type="thread.labelled", tenant=tenant, thread=thread,
        at=datetime.datetime.now(datetime.UTC), command_id="cmd_01newerworkerv9xxxxxxxxxx",
        actor="coordinator-v9", schema_version=2, data={"labels": ["urgent"], "by": "v9"},
    )  # fmt: skip
    seq = await log.append(tenant, thread, await log.last_seq(tenant, thread), [newer])

    second = await api.send(thread, "two", script=script(text("second")))
    run = await api.wait_run(second["run_id"])
    assert run["ordinal"] == 2 and run["status"] == "completed"
    after = await api.thread(thread)
    assert [m["text"] for m in after["messages"]] == [m["text"] for m in before["messages"]] + ["two", "second"]
    stored = {e.seq: e for e in await log.read(tenant, thread)}
    assert stored[seq].type == "thread.labelled" and stored[seq].data.raw == {"labels": ["urgent"], "by": "v9"}
    assert max(stored) > seq  # the next run's events were appended on top of it
