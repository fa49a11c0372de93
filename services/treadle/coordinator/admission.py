"""What the coordinator checks before deciding a command: the tenant's policy (runtime modes) and the quotas
it can decide exactly from state it owns (queued runs and stored text per thread, threads per tenant)."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from nats.errors import Error as NatsError
from nats.js import JetStreamContext

from treadle.core import delegation, policy, quotas
from treadle.core.commands import Command
from treadle.core.lineage.commands import DelegateTask, ForkThread
from treadle.core.lineage.forks import fork_thread_id
from treadle.core.plans.commands import ImplementPlan
from treadle.core.policy import TenantPolicy
from treadle.core.state import ThreadState
from treadle.core.thread.commands import CreateThread, EditQueued, SendMessage
from treadle.eventlog import subjects
from treadle.eventlog.errors import Unavailable
from treadle.ops.policies import PolicyStore
from treadle.ops.policy_cache import PolicyCache
from treadle.ports import EventLog
from treadle.runtime.settings import CoordinatorSettings
from treadle.usecases.ports import PolicyBook

_GUARDED = (CreateThread, SendMessage, ForkThread, ImplementPlan, EditQueued, DelegateTask)


class Admission:
    def __init__(
        self, js: JetStreamContext, log: EventLog, own: CoordinatorSettings, policies: PolicyBook | None = None
    ) -> None:
        self._log = log
        # A watched cache unless given one (tests pass a twin): a command's policy costs no broker round trip.
        self._cache: PolicyCache | None = None
        if policies is None:
            self._cache = policies = PolicyCache(PolicyStore(js))
        self._policies = policies
        self._defaults = quotas.Quotas(
            max_threads=own.max_threads_per_tenant,
            max_queued_runs=own.max_queued_runs,
            max_thread_text_bytes=own.max_thread_text_bytes,
        )
        # Thread creations of one tenant are counted and appended one at a time in this process (across
        # processes the fence of ``check`` orders them: a lost race is a conflict, decided again).
        self._creating: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        # tenant -> (last thread.created sequence, threads then): while no thread was made since, the count
        # stands, so a flood of creates refused at the limit costs one direct get each, not a count.
        self._counted: dict[str, tuple[int, int]] = {}
        self._deleted: dict[str, int] = {}  # the tenant's last thread.deleted when its count was last checked

    async def start(self) -> None:
        if self._cache is not None:
            await self._cache.start()

    async def stop(self) -> None:
        if self._cache is not None:
            await self._cache.stop()

    def guards(self, command: Command) -> bool:
        return isinstance(command.body, _GUARDED)

    def creates_thread(self, command: Command) -> bool:
        return isinstance(command.body, (CreateThread, ForkThread, DelegateTask))

    def creation_lock(self, tenant: str) -> asyncio.Lock:
        return self._creating[tenant]

    async def policy(self, tenant: str, at_least: int = 0) -> TenantPolicy:
        """``at_least``: the policy revision the command's sender knew; an older cached one is not used."""
        try:
            if self._cache is not None:
                return await self._cache.get(tenant, at_least)
            return await self._policies.get(tenant)
        except NatsError as exc:  # the decision loop retries an unavailable broker like a failed append
            raise Unavailable(f"tenant policy of {tenant} unreadable: {exc!r}") from None

    def quotas_for(self, tenant_policy: TenantPolicy) -> quotas.Quotas:
        return quotas.Quotas(
            max_threads=tenant_policy.max_threads or self._defaults.max_threads,
            max_queued_runs=tenant_policy.max_queued_runs or self._defaults.max_queued_runs,
            max_thread_text_bytes=self._defaults.max_thread_text_bytes,
        )

    async def check(self, tenant_policy: TenantPolicy, state: ThreadState, command: Command) -> tuple[str, int] | None:
        """Raises the domain's Forbidden or QuotaExceeded; nothing has been appended yet. A command making a
        thread gets the fence its append must carry: the tenant's thread creations as they were when counted,
        so a thread another coordinator created meanwhile makes the append conflict and the count is redone."""
        policy.check_command(tenant_policy, state, command)
        limits = self.quotas_for(tenant_policy)
        quotas.check_command(limits, state, command)
        if not self._new_thread(state, command):
            return None
        creations = subjects.thread_creations(command.tenant)
        fence = (creations, await self._log.last_seq_of(creations))  # read before counting
        # A deletion (on any replica) purges a thread.created: a count cached before it is one too many.
        deleted = await self._log.last_seq_of(subjects.thread_deletions(command.tenant))
        if deleted != self._deleted.get(command.tenant, 0):
            self._counted.pop(command.tenant, None)
            self._deleted[command.tenant] = deleted
        quotas.check_thread_count(limits, await self._threads_at(command.tenant, fence[1]))
        return fence

    async def _threads_at(self, tenant: str, creation_seq: int) -> int:
        """The tenant's threads once its last creation is ``creation_seq``. Counted after that sequence was read,
        so a creation landing in between is counted too; that entry is never used again, since the last
        creation is past ``creation_seq`` from then on."""
        known = self._counted.get(tenant)
        if known is not None and known[0] == creation_seq:
            return known[1]
        count = await self.thread_count(tenant)
        if len(self._counted) >= 100_000:
            self._counted.clear()
            self._deleted.clear()
        self._counted[tenant] = (creation_seq, count)
        return count

    def created(self, tenant: str, fence: tuple[str, int], seq: int) -> None:
        """A thread counted under ``fence`` was created at ``seq``: one more, known without counting."""
        known = self._counted.get(tenant)
        if known is not None and known[0] == fence[1]:
            self._counted[tenant] = (seq, known[1] + 1)

    @staticmethod
    def _new_thread(state: ThreadState, command: Command) -> bool:
        if isinstance(command.body, CreateThread):
            return state.thread is None  # a retried create finds its thread and is answered as a duplicate
        if isinstance(command.body, ForkThread):
            children = state.lineage.children if state.lineage is not None else []
            return not any(c.get("thread_id") == fork_thread_id(command) for c in children)
        if isinstance(command.body, DelegateTask):
            return delegation.node_of(state, delegation.child_thread_id(command)) is None
        return False

    async def thread_count(self, tenant: str) -> int:
        """The tenant's threads as the log has them: distinct ``thread.created`` subjects (one per thread)."""
        return await self.threads_with(tenant, "thread.created")

    async def threads_with(self, tenant: str, event_type: str) -> int:
        """How many of the tenant's threads have an event of ``event_type``: its distinct subjects, partitioned or
        from before partitions."""
        total = 0
        for pattern in (f"treadle.evt.{tenant}.*.{event_type}", f"treadle.evt.{tenant}.*.{event_type}.*"):
            total += await self._log.subject_count(pattern)
        return total
