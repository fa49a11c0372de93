"""Prometheus metrics of the event log itself (the worker kit's metrics are in ``treadle.runtime.metrics``)."""

from prometheus_client import Counter

EVENTS_APPENDED = Counter("treadle_events_appended_total", "Events appended to the thread log", ["worker"])
