"""Settings: shared ones under ``TREADLE_``, each worker's own under ``TREADLE_<WORKER>_``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Shared(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TREADLE_", extra="ignore")

    nats_url: str = "nats://127.0.0.1:4222"
    nats_user: str | None = None  # the workers' service credentials (or user:password in nats_url)
    nats_password: str | None = None
    redis_url: str = "redis://127.0.0.1:6379/0"
    state_dir: Path = Path(".treadle")
    workspace_root: Path | None = None  # default: <state_dir>/workspaces
    volume: str = "local"
    log_level: str = "INFO"
    log_format: Literal["text", "json"] = "text"
    stream_replicas: int = 1
    # Replicated workers (runtime/leases.py): this process's replica name (default: the worker's kind), and
    # how long a replica's partition leases outlive its last heartbeat before others take them over.
    replica: str | None = None
    lease_ttl: float = 6.0

    def replica_name(self, kind: str) -> str:
        return self.replica or kind

    @property
    def workspaces(self) -> Path:
        return (self.workspace_root or self.state_dir / "workspaces").resolve()


class WorkerSettings(BaseSettings):
    metrics_port: int = 0  # 0: no /metrics endpoint (the gateway serves its own on the API port)
    metrics_host: str = "127.0.0.1"
    # A graceful stop (SIGTERM) ends within this many seconds even while the broker is away: well inside the
    # 30 s a process manager (Kubernetes' default grace period, the embedded stack) waits before it sends SIGKILL.
    stop_seconds: float = Field(default=20.0, gt=0)


class GatewaySettings(WorkerSettings):
    model_config = SettingsConfigDict(env_prefix="TREADLE_GATEWAY_", extra="ignore")
    host: str = "127.0.0.1"
    port: int = 8700
    command_timeout: float = 10.0
    max_body_bytes: int = 1024 * 1024
    rate_limit: float = 1000.0  # requests per second per token, sustained (0: no limit)
    rate_burst: int = 2000  # requests per token at once
    # a message's text and script (400 above, before the broker); core/limits.py caps both at the broker's budget
    max_text_chars: int = Field(default=100_000, gt=0)
    max_script_bytes: int = Field(default=256 * 1024, gt=0)  # a message's script as JSON
    max_streams_per_token: int = Field(default=20, ge=0)  # open SSE streams, per replica (0: no limit)
    max_streams_per_tenant: int = Field(default=200, ge=0)
    # Browser origins allowed to call the API from another origin (CORS), as a JSON list of scheme://host[:port];
    # none by default. Bearer tokens only: a cross-origin request never carries the console's session cookie.
    cors_origins: tuple[str, ...] = ()

    @field_validator("cors_origins")
    @classmethod
    def _exact_origins(cls, origins: tuple[str, ...]) -> tuple[str, ...]:
        from treadle.runtime.origins import check_origin

        return tuple(check_origin(origin) for origin in origins)

    access_log: bool = True  # one INFO line per request (runtime/access_log.py); off: TREADLE_GATEWAY_ACCESS_LOG=false


class CoordinatorSettings(WorkerSettings):
    model_config = SettingsConfigDict(env_prefix="TREADLE_COORDINATOR_", extra="ignore")
    cache_threads: int = 10_000
    checkpoint_timeout: float = 30.0
    host_timeout: float = 5.0
    # Quotas decided from the thread's and tenant's state (a tenant policy may set its own threads/queued runs).
    max_threads_per_tenant: int = Field(default=10_000, gt=0)
    max_queued_runs: int = Field(default=100, gt=0)  # queued runs per thread
    max_thread_text_bytes: int = Field(default=16 * 1024 * 1024, gt=0)  # message texts and scripts per thread
    # Delegated tasks (issue 21): a tenant policy's own values override these.
    delegation_max_depth: int = Field(default=3, gt=0)
    delegation_max_children_per_run: int = Field(default=10, gt=0)
    delegation_max_running_children: int = Field(default=5, gt=0)  # of a tenant, at once
    delegation_cascade_interrupts: bool = True  # an interrupted parent run interrupts its async tasks
    # A workspace volume that announced nothing this long (and whose record the KV TTL swept) is lost: its threads
    # move to live volumes by themselves (coordinator/volume_loss.py).
    volume_lost_seconds: float = Field(default=60.0, gt=0)


class SupervisorSettings(WorkerSettings):
    model_config = SettingsConfigDict(env_prefix="TREADLE_SUPERVISOR_", extra="ignore")
    cache_threads: int = 10_000
    host_timeout: float = 5.0
    checkpoint_timeout: float = 30.0
    # L5.5: who writes handoff summaries: "local" (deterministic, from the execution graph) or "provider:<name>"
    # (that provider, on a provider host; the local one whenever it fails or overruns the target's budget).
    summariser: str = "local"
    summariser_model: str | None = None  # the provider's model for summaries (None: its default)
    summariser_timeout: float = 60.0  # seconds a summary may take before the local one is used
    summariser_script: str | None = None  # JSON steps when the summariser is the scripted provider (tests)
    # Handoffs carry the conversation, decisions, files and commands; a model's raw reasoning only when asked.
    handoff_reasoning: bool = False
    # A run no host can take now waits for a host's "freed" signal, and looks again after this many seconds anyway.
    capacity_recheck_seconds: float = Field(default=5.0, gt=0)


class ProviderHostSettings(WorkerSettings):
    model_config = SettingsConfigDict(env_prefix="TREADLE_PROVIDER_HOST_", extra="ignore")
    host_id: str = "host-1"
    capacity: int = 1000
    heartbeat_seconds: float = 2.0
    host_expiry_seconds: float = 10.0  # a host whose heartbeat stood still this long is dead (L9.3)
    idle_seconds: float = 900.0  # the idle reaper releases a session unused this long (L9.3)
    # ... and one whose playing turn has reported nothing (waiting for no answer) this long: its runtime is
    # wedged (provider_host/reaper.py); 0: never
    unresponsive_seconds: float = Field(default=3600.0, ge=0)
    # Issue 36: what a tenant's workspaces and runtime homes may hold (core/disk.py; 0: no limit), and how often
    # at most the usage of a tenant with a live session is measured (less often where the scan takes long).
    disk_budget_bytes: int = Field(default=20 << 30, ge=0)
    disk_budget_files: int = Field(default=500_000, ge=0)
    disk_check_seconds: float = Field(default=10.0, gt=0)
    # Fair share (core/capacity.py): per-tenant limits across hosts (0: none), and how recently a session may
    # have been used and still be released to make room on a full host.
    tenant_sessions: int = Field(default=500, ge=0)
    tenant_runs: int = Field(default=100, ge=0)
    shed_grace_seconds: float = Field(default=1.0, ge=0)
    # Runtimes launched ahead of a new thread's first placement (provider_host/warm.py): at most this many per host
    # (0: off; a tenant holds at most half, at least one), each an extra sandboxed runtime in memory until its
    # placement adopts it or warm_seconds pass.
    warm_sessions: int = Field(default=4, ge=0)
    warm_seconds: float = Field(default=30.0, gt=0)
    # Spare runtimes (provider_host/spares.py): a tenant whose turn ended here gets one started for its next
    # thread, before that thread exists, so a first message sent at once need not wait for a runtime's start.
    # At most this many per host (one per tenant and provider; 0: off; none while mcp_url is set), each stopped
    # when not taken within spare_seconds. Each costs one idle sandboxed runtime's memory (Codex: about 90 MB PSS).
    spare_runtimes: int = Field(default=2, ge=0)
    spare_seconds: float = Field(default=300.0, gt=0)
    # Issue 21: the orchestrator's MCP server as a runtime reaches it (unset: runtimes get no MCP access); each
    # real runtime's session gets its own credential for these tools, expiring when idle and at a lifetime.
    mcp_url: str | None = None
    mcp_tools: tuple[str, ...] = (
        "capabilities",
        "thread_start",
        "create_threads",
        "thread_list",
        "thread_read",
        "thread_send",
        "thread_wait",
        "thread_interrupt",
        "thread_fork",
        "thread_transfers",
        "delegate_task",
        "task_status",
        "task_cancel",
        "schedule_follow_up",
        "schedule_list",
        "schedule_delete",
    )
    mcp_idle_seconds: float = Field(default=1800.0, gt=0)
    mcp_lifetime_seconds: float = Field(default=8 * 3600.0, gt=0)

    @field_validator("mcp_url")
    @classmethod
    def _reachable_from_a_sandbox(cls, url: str | None) -> str | None:
        """It becomes the one egress target of a runtime besides its model API: a URL no sandbox could reach
        stops the host at its start, not every session at its first tool call."""
        from treadle.sandbox.egress import sandbox_reachable_url

        return None if url is None else sandbox_reachable_url(url, "TREADLE_PROVIDER_HOST_MCP_URL")


class CheckpointsSettings(WorkerSettings):
    model_config = SettingsConfigDict(env_prefix="TREADLE_CHECKPOINTS_", extra="ignore")
    # Retention: threads idle this long keep only their newest checkpoints; 0 days: never prune.
    retention_idle_days: float = 30.0
    retention_keep_latest: int = 20
    retention_interval_seconds: float = 3600.0
    watch: bool = True  # inotify fast paths (unchanged and small-change captures) on local filesystems
    # Files larger than this are left out of checkpoints (listed as skipped, never touched by a restore); 0: no limit.
    max_file_bytes: int = Field(default=50 * 1024 * 1024, ge=0)
    # Git children as the tenant's uid: unset = when the service is root and the uids can reach the
    # workspaces; true = required (the service refuses to start otherwise); false = as the service's user.
    run_as_tenant: bool | None = None
    # Every checkpoint copied to the broker's Object Store before its capture answers (checkpoints/durable.py);
    # false: checkpoints live on this node's disk only. Archive requests time out after archive_timeout.
    durable: bool = True
    archive_timeout: float = Field(default=30.0, gt=0)
    # Issue 35: a thread's own workspace with no event, run or live session for this long, whose disk holds
    # exactly its last durable checkpoint, leaves the node (restored by its next request); 0: never. A day: far
    # past the hosts' session idle time (900 s), so a thread in use never waits for a restore, while a node's
    # disk holds about a day's active threads. Only with ``durable``.
    evict_idle_seconds: float = Field(default=86400.0, ge=0)
    evict_interval_seconds: float = Field(default=300.0, gt=0)  # how often idle workspaces are looked for


class ProjectorSettings(WorkerSettings):
    model_config = SettingsConfigDict(env_prefix="TREADLE_PROJECTOR_", extra="ignore")
    batch: int = 256


class SchedulerSettings(WorkerSettings):
    model_config = SettingsConfigDict(env_prefix="TREADLE_SCHEDULER_", extra="ignore")
    # How often the due schedules are looked for: a firing is at most this late.
    tick_seconds: float = Field(default=1.0, gt=0)
    # Catch-up bound: after downtime, the latest missed firing is made if at most this old; older ones are skipped.
    catch_up_seconds: float = Field(default=3600.0, ge=0)
    command_timeout: float = Field(default=10.0, gt=0)
    # Test only: a file holding the scheduler's "now" (ISO 8601); the e2e tests move time by rewriting it.
    clock_file: str | None = None


class WebhooksSettings(WorkerSettings):
    """The delivery worker's (services/treadle/deliveries) and the gateway's rules for webhooks (docs/webhooks.md)."""

    model_config = SettingsConfigDict(env_prefix="TREADLE_WEBHOOKS_", extra="ignore")
    # Host names or CIDRs that may receive webhooks although private, loopback or link-local (a JSON list,
    # e.g. ["10.1.2.0/24", "hooks.internal"]); empty by default: public addresses only.
    allow_hosts: tuple[str, ...] = ()
    connect_timeout: float = Field(default=5.0, gt=0)  # seconds to connect to a receiver
    read_timeout: float = Field(default=10.0, gt=0)  # seconds from the request sent to the answer read
    max_response_bytes: int = Field(default=64 * 1024, gt=0)  # of a receiver's answer read, at most
    # Retries: waits of backoff_base·2^n seconds, at most backoff_max each, while their sum stays within
    # retry_for seconds; then the delivery is dead-lettered (status failed, replayable).
    backoff_base: float = Field(default=1.0, gt=0)
    backoff_max: float = Field(default=300.0, gt=0)  # the longest wait between two attempts
    retry_for: float = Field(default=3600.0, ge=0)  # seconds of waits before a delivery is dead-lettered
    max_endpoints_per_tenant: int = Field(default=20, ge=1)  # webhook endpoints a tenant may register
    deliveries_per_minute: int = Field(default=600, ge=1)  # per tenant, per worker replica
    batch: int = Field(default=256, gt=0)  # events fetched at once per partition
