"""A command retried after a lost acknowledgement is decided again, maybe by another replica whose cached state
is behind. A replicated stream's leader answers the repeated envelope id as a duplicate before it looks at the
fence, so what the retry decided is not what the log holds. The chaos test caught the cache folding it anyway: two
runs of one thread got ordinal 5. The cache must hold what the log holds. Real 3-node JetStream cluster."""

from __future__ import annotations

from datetime import UTC, datetime

import nats

from treadle.core import events as ev
from treadle.core.ids import IdFactory
from treadle.core.state import fold
from treadle.eventlog import streams
from treadle.eventlog.log import EventLog
from treadle.eventlog.store import ThreadStore
from treadle.ops.servers import NatsCluster
from treadle.runtime import broker_urls

TENANT, THREAD = "acme", "thr_retried"


async def _decide(store: ThreadStore, state, text: str, command: str) -> int:
    """A send decided on ``state``: its event's id comes from the command, as a coordinator's does."""
    now = datetime.now(UTC)
    return await store.append(
        TENANT,
        THREAD,
        state,
        [ev.MessageCreated(message_id=f"msg_{command}", role="user", text=text)],
        ids=IdFactory(command, 1_700_000_000_000),
        at=now,
        command_id=command,
        actor="user:u",
    )


async def test_L9_a_retried_decision_acked_as_a_duplicate_leaves_the_cache_as_the_log(tmp_path):
    async with NatsCluster(tmp_path / "nats") as cluster:
        nc = await nats.connect(**broker_urls.parse(cluster.url).connect_options(), name="test-retry")
        try:
            await streams.ensure(nc.jetstream(), 3)
            log = EventLog(nc)
            behind, ahead = ThreadStore(log, "replica-1"), ThreadStore(log, "replica-2")
            created = ev.ThreadCreated(thread_id=THREAD, workspace="w", created_by="u")
            await ahead.append(
                TENANT, THREAD, await ahead.refresh(TENANT, THREAD), [created],
                ids=IdFactory("cmd_create", 1), at=datetime.now(UTC), command_id="cmd_create", actor="user:u",
            )  # fmt: skip
            stale = await behind.refresh(TENANT, THREAD)  # replica 1 caches the thread as created
            first = await _decide(ahead, await ahead.refresh(TENANT, THREAD), "one", "cmd_1")
            await _decide(ahead, await ahead.refresh(TENANT, THREAD), "two", "cmd_2")

            # Replica 1 retries cmd_1, deciding on its stale cache: the leader acks the envelope id it stored
            # for cmd_1 as a duplicate without looking at the fence (a single server would refuse it: Conflict).
            again = await _decide(behind, stale, "one, decided again", "cmd_1")
            assert again == first
            held = fold(await log.read(TENANT, THREAD))
            cached = await behind.load(TENANT, THREAD)
            assert [m.text for m in cached.messages] == [m.text for m in held.messages] == ["one", "two"]
            assert cached.seq == held.seq
        finally:
            await nc.close()
