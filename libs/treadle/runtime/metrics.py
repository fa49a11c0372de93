"""Prometheus metrics. Names say what they count; the domain never imports this."""

from prometheus_client import Counter, Gauge, Histogram

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
RUNS_HELD = Counter("treadle_runs_held_total", "Runs that went back to queued to wait for a provider", ["reason"])
