"""The subject contract (docs/concepts.md "Subjects and streams"). Nothing user-supplied reaches a subject
without passing :func:`token`."""

from __future__ import annotations

from treadle.core.ids import is_token

EVENTS_STREAM = "TREADLE_EVENTS"
PROVIDER_STREAM = "TREADLE_PROVIDER"
EVENTS_ALL = "treadle.evt.>"
PROVIDER_ALL = "treadle.prov.>"


class InvalidToken(ValueError):
    pass


def token(value: str, what: str = "id") -> str:
    if not is_token(value):
        raise InvalidToken(f"{what} {value!r} is not a valid token ([A-Za-z0-9_-], 1..64 characters)")
    return value


def event(tenant: str, thread: str, type_: str) -> str:
    return f"treadle.evt.{token(tenant, 'tenant')}.{token(thread, 'thread')}.{type_}"


def thread_events(tenant: str, thread: str) -> str:
    """The wildcard every append of a thread is fenced on (OCC) and every reader filters by."""
    return f"treadle.evt.{token(tenant, 'tenant')}.{token(thread, 'thread')}.>"


def thread_creations(tenant: str) -> str:
    """Every (partitioned) ``thread.created`` of a tenant: a new thread's append is fenced on it, so threads
    counted against the tenant's limit by concurrent coordinators cannot both land."""
    return f"treadle.evt.{token(tenant, 'tenant')}.*.thread.created.*"


def thread_deletions(tenant: str) -> str:
    """Every (partitioned) ``thread.deleted`` of a tenant: a thread count taken before the last one is stale."""
    return f"treadle.evt.{token(tenant, 'tenant')}.*.thread.deleted.*"


def command(tenant: str, verb: str) -> str:
    return f"treadle.cmd.{token(tenant, 'tenant')}.thread.{verb}"


COMMANDS_ALL = "treadle.cmd.*.thread.*"


def live(tenant: str, thread: str) -> str:
    return f"treadle.live.{token(tenant, 'tenant')}.{token(thread, 'thread')}"


def projected(tenant: str, thread: str) -> str:
    """The projector wrote the thread's document (its sequence is the payload): a read waiting for it looks again."""
    return f"treadle.projected.{token(tenant, 'tenant')}.{token(thread, 'thread')}"


def provider(tenant: str, thread: str, provider_thread: str) -> str:
    return (
        f"treadle.prov.{token(tenant, 'tenant')}.{token(thread, 'thread')}.{token(provider_thread, 'provider thread')}"
    )


def host_place(volume: str) -> str:
    """Placement requests for threads on ``volume``: only hosts mounting it, and only while they have room,
    are in its queue group."""
    return f"treadle.place.{token(volume, 'volume')}"


def host_shed(volume: str) -> str:
    """Placement when every host of ``volume`` is full: each host is in this queue group always, and makes room
    by releasing an idle session (core/capacity.py) or refuses with the reason the run waits under."""
    return f"treadle.shed.{token(volume, 'volume')}"


def host_freed(volume: str) -> str:
    """A host of ``volume`` has room again (a session or a turn ended, a host started): waiting runs try now."""
    return f"treadle.freed.{token(volume, 'volume')}"


HOST_FREED_ALL = "treadle.freed.*"  # every volume's announcements (the supervisor serves threads on all)


def host_summarise(volume: str) -> str:
    """L5.5: provider-backed handoff summaries; any host of the volume answers (queue group)."""
    return f"treadle.summarise.{token(volume, 'volume')}"


def host_warm(volume: str) -> str:
    """A session about to be placed on ``volume``: one host of it may launch its runtime ahead (queue group)."""
    return f"treadle.warm.{token(volume, 'volume')}"


def host(host_id: str, verb: str) -> str:
    return f"treadle.host.{token(host_id, 'host')}.{verb}"


def checkpoint(volume: str, verb: str) -> str:
    return f"treadle.ckpt.{token(volume, 'volume')}.{verb}"


def parse_event_subject(subject: str) -> tuple[str, str, str]:
    """``treadle.evt.<tenant>.<thread>.<a>.<b>[.<partition>]`` → (tenant, thread, "a.b")."""
    parts = subject.split(".", 7)
    return parts[2], parts[3], parts[4] + "." + parts[5]
