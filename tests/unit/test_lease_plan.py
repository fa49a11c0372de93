"""Partition lease decisions (runtime/lease_plan.py), pure: fair shares, convergence, takeover."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from treadle.runtime.clock import ManualClock
from treadle.runtime.lease_plan import Liveness, Plan, fair_share, plan, preference


def settle(replicas: list[str], partitions: int, holders: dict[int, str], rounds: int = 20) -> dict[int, str]:
    """Let every replica act in turn, as the KV would settle it: a claim of a held partition loses (OCC)."""
    for _ in range(rounds):
        before = dict(holders)
        for me in replicas:
            decided = plan(me, partitions, holders, replicas)
            for p in decided.release:
                del holders[p]
            for p in decided.claim:
                holders.setdefault(p, me)  # a held partition's claim fails its revision check
        if holders == before:
            return holders
    raise AssertionError(f"no convergence after {rounds} rounds: {holders}")


def test_a_lone_replica_claims_every_partition():
    assert plan("c1", 8, {}, []) == Plan(claim=tuple(sorted(range(8), key=lambda p: -preference("c1", p))))
    assert set(plan("c1", 8, {}, ["c1"]).claim) == set(range(8))


def test_a_replica_above_its_fair_share_hands_back_the_excess():
    holders = {p: "c1" for p in range(8)}
    decided = plan("c1", 8, holders, ["c1", "c2"])
    assert len(decided.release) == 4 and not decided.claim
    assert plan("c2", 8, holders, ["c1", "c2"]) == Plan()  # nothing is free until c1 lets go


def test_claims_stop_at_the_fair_share_and_skip_held_partitions():
    holders = {0: "c2", 1: "c2", 2: "c3"}
    decided = plan("c1", 8, holders, ["c1", "c2", "c3"])
    assert len(decided.claim) == fair_share(8, 3) == 3
    assert not set(decided.claim) & set(holders)


def test_a_replica_adopts_partitions_once_their_holder_is_gone():
    # c2 died: its records stopped moving, so the observer no longer lists it as a holder or a member.
    holders = {0: "c1", 1: "c1", 2: "c1", 3: "c1"}
    decided = plan("c1", 8, holders, ["c1"])
    assert set(decided.claim) == {4, 5, 6, 7}


@settings(max_examples=200, deadline=None)
@given(
    partitions=st.integers(1, 32),
    replicas=st.integers(1, 6),
    dead=st.integers(0, 5),
    start=st.dictionaries(st.integers(0, 31), st.integers(0, 5), max_size=32),
)
def test_leases_converge_on_an_even_spread_and_cover_every_partition(partitions, replicas, dead, start):
    names = [f"r{i}" for i in range(replicas)]
    holders = {p: names[r % replicas] for p, r in start.items() if p < partitions}
    holders = settle(names, partitions, holders)
    assert sorted(holders) == list(range(partitions))  # every partition has exactly one holder
    counts = [sum(1 for h in holders.values() if h == n) for n in names]
    assert max(counts) <= math.ceil(partitions / replicas)
    # Replicas die: their records go stale, so they vanish from the holders and the members.
    survivors = names[: max(1, replicas - dead)]
    holders = {p: h for p, h in holders.items() if h in survivors}
    holders = settle(survivors, partitions, holders)
    assert sorted(holders) == list(range(partitions)) and set(holders.values()) <= set(survivors)
    assert max(sum(1 for h in holders.values() if h == n) for n in survivors) <= math.ceil(partitions / len(survivors))


def test_liveness_is_judged_on_the_observers_clock():
    clock, alive = ManualClock(), Liveness(ttl=6.0)
    alive.observe("lease.1", 10, clock.now())
    clock.advance(5.9)
    assert alive.alive("lease.1", clock.now())
    alive.observe("lease.1", 10, clock.now())  # the same revision again is not a heartbeat
    clock.advance(0.1)
    assert not alive.alive("lease.1", clock.now())
    alive.observe("lease.1", 11, clock.now())  # a renewal moves the revision
    assert alive.alive("lease.1", clock.now())
    assert not alive.alive("never.seen", clock.now())
