"""Issue 23, item 4: log lines carry an ISO-8601 UTC timestamp and the tenant/thread/run/attempt a message is
about (bound at the handler's edge); each process exports only its own metric families, and build info."""

from __future__ import annotations

import datetime
import io
import logging

import msgspec

from treadle.core.events import Envelope, encode_event
from treadle.runtime import logs, metrics


def _lines(fmt: str, emit) -> list[str]:
    stream = io.StringIO()
    logs.setup("supervisor", "INFO", fmt)
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    try:
        emit(logging.getLogger("treadle.test"))
    finally:
        logging.getLogger().handlers[:] = []
    return stream.getvalue().splitlines()


def test_json_lines_have_a_utc_iso_timestamp_and_the_bound_run_ids():
    def emit(log: logging.Logger) -> None:
        log.info("outside")
        with logs.bound(tenant="acme", thread="th_1"), logs.bound(run="run_9", attempt="att_2"):
            log.info("inside")

    outside, inside = (msgspec.json.decode(line) for line in _lines("json", emit))
    at = datetime.datetime.fromisoformat(inside["at"].replace("Z", "+00:00"))
    assert inside["at"].endswith("Z") and at.utcoffset() == datetime.timedelta(0)
    assert abs((datetime.datetime.now(datetime.UTC) - at).total_seconds()) < 60
    assert {k: inside[k] for k in logs.IDS} == {"tenant": "acme", "thread": "th_1", "run": "run_9", "attempt": "att_2"}
    assert not set(logs.IDS) & set(outside)  # unbound again after the block


def test_text_lines_name_the_ids_too():
    def emit(log: logging.Logger) -> None:
        with logs.bound(tenant="acme", thread="th_1", run=None):
            log.info("hello")

    (line,) = _lines("text", emit)
    assert " tenant=acme thread=th_1 hello" in line and "run=" not in line and line[:20].count("-") == 2


def test_ids_come_from_an_event_envelope_and_garbage_gives_none():
    env = msgspec.json.decode(b'{"run_id":"run_1","attempt_id":"att_1"}')
    payload = msgspec.json.encode(
        {
            "id": "e1",
            "type": "run.started",
            "tenant": "acme",
            "thread": "th_1",
            "at": "2026-01-01T00:00:00Z",
            "data": env,
        }
    )
    assert logs.ids_of(payload) == {"tenant": "acme", "thread": "th_1", "run": "run_1", "attempt": "att_1"}
    assert logs.ids_of(b"\x00not json") == {}
    assert logs.ids_of(b'{"tenant": 5, "thread": ["x"]}') == {}  # wrong types: no ids rather than wrong ones
    assert logs.ids_of(b"[1,2]") == {}
    with logs.bound(tenant="t", bogus="x", run=None):  # unknown names are never logged
        assert logs.current() == {"tenant": "t"}
    assert Envelope and encode_event  # the envelope the consumers decode is the one shaped above


def _families(text: bytes) -> set[str]:
    return {line.split()[2] for line in text.decode().splitlines() if line.startswith("# TYPE treadle_")}


def test_each_process_exports_only_its_own_families_and_build_info():
    metrics.LIVE_SESSIONS.set(1)
    metrics.PROJECTED.inc(0)
    gateway, host, projector = (metrics.exposition(k) for k in ("gateway", "provider-host", "projector"))
    assert "treadle_provider_sessions_live" not in _families(gateway) | _families(projector)
    assert "treadle_provider_sessions_live" in _families(host)
    assert "treadle_projection_events_total" in _families(
        projector
    ) and "treadle_projection_events_total" not in _families(host)
    assert {"treadle_http_requests_total", "treadle_http_request_duration_seconds"} <= _families(gateway)
    for text in (gateway, host, projector):
        assert "treadle_build_info" in _families(text) and b'treadle_build_info{python="' in text
        assert b"process_" in text or b"python_gc" in text  # the runtime's own collectors stay
    assert metrics.exposition("unknown-kind")  # a kind with no families of its own still gets the common ones


def test_a_line_s_timestamp_is_datetime_s_own_rounding_to_the_millisecond():
    """The date and time are formatted once a second and the milliseconds added: the text is the one
    ``datetime.fromtimestamp`` gives, also where its microsecond rounding carries into the next second."""

    def reference(t: float) -> str:
        moment = datetime.datetime.fromtimestamp(t, tz=datetime.UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"

    base = 1_796_000_000
    times = [base + k / 10_000 for k in range(20_000)]  # two seconds in 0.1 ms steps
    times += [base + s + f for s in range(50) for f in (0.0, 0.0005, 0.9994995, 0.9995, 0.9999995, 0.99999951)]
    times += [978286730.124, 0.0, 1.5e-7]
    for t in times:
        assert logs.utc_iso(t) == reference(t), t
