"""Prometheus metrics. Names say what they count; the domain never imports this."""

from __future__ import annotations

import importlib.metadata
import platform
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..eventlog.metrics import EVENTS_APPENDED

APPEND_CONFLICTS = Counter("treadle_append_conflicts_total", "Appends fenced by optimistic concurrency", ["worker"])
COMMANDS = Counter("treadle_commands_total", "Thread commands handled", ["verb", "outcome"])
HANDLER_RETRIES = Counter("treadle_handler_retries_total", "Consumer handler retries", ["consumer"])
DEAD_LETTERS = Counter("treadle_dead_letters_total", "Messages terminated after repeated failures", ["consumer"])
RUN_DURATION = Histogram(
    "treadle_run_duration_seconds",
    "Queued-to-terminal time of runs",
    ["status"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
PROJECTION_LAG = Gauge("treadle_projection_lag_events", "Events not yet projected into Redis", ["partition"])
PROJECTION_REWINDS = Counter(
    "treadle_projection_rewinds_total",
    "Projector partitions read again from their acked floor (a delivery went astray)",
)
PROJECTED = Counter("treadle_projection_events_total", "Events folded into projections")
RUN_OLDEST_ACTIVE = Gauge(
    "treadle_run_oldest_active_seconds",
    "Age of the oldest run not ended yet (queued or running) among the threads this projector has folded (0: none)",
)
LIVE_SESSIONS = Gauge("treadle_provider_sessions_live", "Provider sessions live on this host")
CHECKPOINT_SECONDS = Histogram(
    "treadle_checkpoint_capture_seconds",
    "Workspace checkpoint capture time",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
)
SESSIONS_RELEASED = Counter(
    "treadle_provider_sessions_released_total",
    "Idle provider sessions released to make room for another placement (L9.3)",
)
PLACEMENTS_REFUSED = Counter(
    "treadle_placements_refused_total", "Placements and turn starts a host refused", ["reason"]
)
NATIVE_STATE = Counter(
    "treadle_native_state_total",
    "Provider resume states kept off the node: stored, unchanged, restored, store_failed, restore_failed",
    ["outcome"],
)
WARM_SESSIONS = Counter(
    "treadle_warm_sessions_total",
    "Runtimes launched ahead of their placement (provider_host/warm.py): launched, adopted, expired, evicted, failed;"
    " spares launched before their thread (provider_host/spares.py): spare_launched, spare_taken, spare_expired,"
    " spare_failed",
    ["outcome"],
)
RUNS_HELD = Counter("treadle_runs_held_total", "Runs that went back to queued to wait for a provider", ["reason"])

# --- what every process says about itself, and the gateway's HTTP traffic
BUILD_INFO = Gauge("treadle_build_info", "Always 1: the version and Python this process runs", ["version", "python"])
HTTP_REQUESTS = Counter(
    "treadle_http_requests_total", "HTTP requests answered, by route", ["route", "method", "status"]
)
HTTP_DURATION = Histogram(
    "treadle_http_request_duration_seconds",
    "HTTP request handling time, by route",
    ["route", "method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
)

SCHEDULE_FIRINGS = Counter(
    "treadle_schedule_firings_total",
    "Schedule firings recorded by this scheduler: started, queued, …, skipped_active, missed, refused",
    ["outcome"],
)
SCHEDULE_SKIPPED = Counter(
    "treadle_schedule_missed_total", "Firings missed past the catch-up window (downtime), not made"
)

# Each process exports only the families it can move (a gateway reporting provider sessions would say 0 where
# it knows nothing). Families of every worker: the consumer kit's, the log's appends, build info.
_COMMON = (BUILD_INFO, HANDLER_RETRIES, DEAD_LETTERS, EVENTS_APPENDED)
OWN: dict[str, tuple[MetricWrapperBase, ...]] = {
    "gateway": (HTTP_REQUESTS, HTTP_DURATION),
    "coordinator": (APPEND_CONFLICTS, COMMANDS),
    "supervisor": (APPEND_CONFLICTS, RUN_DURATION, CHECKPOINT_SECONDS, RUNS_HELD),
    "projector": (PROJECTION_LAG, PROJECTION_REWINDS, PROJECTED, RUN_OLDEST_ACTIVE),
    "provider-host": (LIVE_SESSIONS, SESSIONS_RELEASED, PLACEMENTS_REFUSED),
    "checkpoints": (),
    "scheduler": (SCHEDULE_FIRINGS, SCHEDULE_SKIPPED),
}


class _Own(Collector):
    def __init__(self, names: frozenset[str]) -> None:
        self._names = names

    def collect(self) -> Iterable[Metric]:
        for family in REGISTRY.collect():  # the process/platform/gc collectors are every process's own
            if not family.name.startswith("treadle_") or family.name in self._names:
                yield family


_registries: dict[str, CollectorRegistry] = {}


def exposition(kind: str) -> bytes:
    """The Prometheus text of this process: its kind's families (``OWN``) and the common ones."""
    registry = _registries.get(kind)
    if registry is None:
        BUILD_INFO.labels(_version(), platform.python_version()).set(1)
        names = frozenset(f.name for m in (*_COMMON, *OWN.get(kind, ())) for f in m.describe())
        registry = _registries[kind] = CollectorRegistry(auto_describe=False)
        registry.register(_Own(names))
    return generate_latest(registry)


def _version() -> str:
    try:
        return importlib.metadata.version("treadle")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def http_metrics(app: Any) -> Any:  # ASGI in, ASGI out (Any: Litestar's and plain ASGI types differ)
    """ASGI middleware, around the router: each HTTP request counted and timed by its route template
    (``/v1/threads/{thread_id}``, never the raw path, so ids do not become label values); a path no route matches
    is ``unmatched`` and a method of none of ours is ``other``, so a client cannot make label values up."""

    series: dict[tuple[str, str, int], tuple[Any, Any]] = {}  # the children of both families, as labels() finds them

    async def middleware(
        scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
    ) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        def sending(message: Any) -> Awaitable[None]:  # send's own awaitable: no coroutine of ours per SSE frame
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            return send(message)

        try:
            await app(scope, receive, sending)
        finally:
            handler = scope.get("route_handler")
            paths = sorted(getattr(handler, "paths", ()) or ())
            route = paths[0] if paths else "unmatched"
            method = scope.get("method", "")
            method = method if method in HTTP_METHODS else "other"
            key = (route, method, status)
            if (children := series.get(key)) is None:
                children = series[key] = (
                    HTTP_REQUESTS.labels(route, method, str(status)),
                    HTTP_DURATION.labels(route, method),
                )
            children[0].inc()
            children[1].observe(time.perf_counter() - started)

    return middleware
