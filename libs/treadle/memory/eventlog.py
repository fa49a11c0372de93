"""The event log in memory: the same contract as the JetStream log (``ports.EventLog``) for tests that need
no broker. One global sequence over every thread, OCC on the thread's (or the fence's) last sequence, atomic
batches, de-duplication by envelope id, the broker's partition token on stored subjects, and the stored
messages a consumer would deliver (with the fence headers ``ThreadStore.through`` reads)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

from treadle.core.envelope import Envelope
from treadle.core.events import decode_event
from treadle.eventlog import subjects
from treadle.eventlog.errors import Conflict
from treadle.eventlog.log import ELSS, ELSS_SUBJECT, batch_payloads
from treadle.eventlog.port import Appended
from treadle.runtime.partitions import DEFAULT_PARTITIONS, partition_of

MAX_PAYLOAD = 1024 * 1024  # the broker's default max_payload, which the stream's max_msg_size matches


def subject_matches(filter_subject: str, subject: str) -> bool:
    """NATS subject matching: ``*`` is one token, a trailing ``>`` one or more."""
    want, have = filter_subject.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


@dataclass
class StoredMessage:
    """A stored event as a consumer delivers it: ``subject``, ``data``, ``headers`` and
    ``metadata.sequence.stream``, the parts of a JetStream message the workers read."""

    seq: int
    subject: str
    data: bytes
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def metadata(self) -> SimpleNamespace:
        return SimpleNamespace(sequence=SimpleNamespace(stream=self.seq, consumer=self.seq), num_delivered=1)


class MemoryEventLog:
    def __init__(self, partitions: int | None = DEFAULT_PARTITIONS, max_payload: int = MAX_PAYLOAD) -> None:
        self._partitions = partitions  # None: a broker without the partition mapping
        self._max_payload = max_payload
        self.messages: list[StoredMessage] = []
        self._ids: dict[str, int] = {}  # envelope id -> its sequence (the broker's duplicate window, unbounded)

    def _stored_subject(self, tenant: str, thread: str, type_: str) -> str:
        subject = subjects.event(tenant, thread, type_)
        return subject if self._partitions is None else f"{subject}.{partition_of(thread, self._partitions)}"

    def _last(self, filter_subject: str) -> int:
        return next((m.seq for m in reversed(self.messages) if subject_matches(filter_subject, m.subject)), 0)

    async def append(
        self,
        tenant: str,
        thread: str,
        expected_seq: int,
        events: Sequence[Envelope],
        fence: tuple[str, int] | None = None,
    ) -> int:
        return (await self.append_checked(tenant, thread, expected_seq, events, fence)).seq

    async def append_checked(
        self,
        tenant: str,
        thread: str,
        expected_seq: int,
        events: Sequence[Envelope],
        fence: tuple[str, int] | None = None,
    ) -> Appended:
        payloads = batch_payloads(tenant, thread, events, self._max_payload)
        fence_subject, fence_seq = fence or (subjects.thread_events(tenant, thread), expected_seq)
        actual = self._last(fence_subject)
        if actual != fence_seq:
            raise Conflict(actual, f"wrong last sequence: {actual}")
        if len(events) == 1 and events[0].id in self._ids:
            return Appended(self._ids[events[0].id], True)  # the broker acks a duplicate with the original's seq
        if len(events) > 1 and any(e.id in self._ids for e in events):
            raise Conflict(None, "atomic batch contains a duplicate message")
        for i, (e, payload) in enumerate(zip(events, payloads)):
            seq = len(self.messages) + 1
            headers = {"Nats-Msg-Id": e.id}
            if i == 0:
                headers.update({ELSS: str(fence_seq), ELSS_SUBJECT: fence_subject})
            self.messages.append(StoredMessage(seq, self._stored_subject(tenant, thread, e.type), payload, headers))
            self._ids[e.id] = seq
        return Appended(len(self.messages))

    async def read(self, tenant: str, thread: str, after: int = 0) -> list[Envelope]:
        return await self.read_subject(subjects.thread_events(tenant, thread), after)

    async def read_subject(self, filter_subject: str, after: int = 0) -> list[Envelope]:
        return [
            decode_event(m.data, m.seq) for m in self.messages[after:] if subject_matches(filter_subject, m.subject)
        ]

    async def last_seq(self, tenant: str, thread: str) -> int:
        return self._last(subjects.thread_events(tenant, thread))

    async def last_seq_of(self, filter_subject: str) -> int:
        return self._last(filter_subject)

    async def subject_count(self, filter_subject: str) -> int:
        return len({m.subject for m in self.messages if subject_matches(filter_subject, m.subject)})

    def delivered(self, *filters: str, after: int = 0) -> list[StoredMessage]:
        """The stored messages a consumer filtering on ``filters`` (any of them) would deliver after ``after``."""
        return [m for m in self.messages[after:] if any(subject_matches(f, m.subject) for f in filters or (">",))]
