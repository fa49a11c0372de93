"""Waiting for a replicated event stream to be whole again before a test reads it.

Direct gets (how ``EventLog.read`` reads) are answered by any replica, and a node that just rejoined serves
what it holds while it catches up: a read right after a node came back may end before the newest events.
"""

from __future__ import annotations

from nats.js import JetStreamContext

from treadle.eventlog.subjects import EVENTS_STREAM

from .helpers import wait_for


async def caught_up(js: JetStreamContext, stream: str = EVENTS_STREAM) -> bool:
    """A leader, and every follower current with nothing left to apply."""
    try:
        info = await js.stream_info(stream)
    except Exception:  # the test's own connection may be failing over too
        return False
    cluster = info.cluster
    if cluster is None:
        return True  # one server: its reads are its writes
    followers = cluster.replicas or []
    return bool(cluster.leader) and all(r.current and not r.lag and not r.offline for r in followers)


async def wait_caught_up(js: JetStreamContext, timeout: float = 60) -> None:
    await wait_for(lambda: caught_up(js), timeout=timeout, what="every replica of the event stream caught up")
