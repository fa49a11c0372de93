"""Placement of a new thread on a volume (issue 35): a pure decision over what the volumes announce."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from treadle.core.placement import MIN_DISK_FREE, Volume, has_room, load_band, place, placeable

names = st.sampled_from([f"node-{i}" for i in range(1, 6)])
volumes = st.builds(
    Volume,
    name=names,
    checkpoints=st.booleans(),
    hosts=st.integers(0, 3),
    capacity=st.integers(0, 20),
    live=st.integers(0, 20),
    disk_free=st.none() | st.integers(0, 4 * MIN_DISK_FREE),
    workspaces=st.integers(0, 100),
    draining=st.booleans(),
)
counts = st.dictionaries(names, st.integers(0, 10))


def node(name: str, **kw) -> Volume:
    return Volume(**{"name": name, "checkpoints": True, "hosts": 1, "capacity": 8, **kw})


@given(st.lists(volumes, max_size=6), counts)
def test_the_chosen_volume_is_placeable_and_none_only_when_nothing_is(vs, tenant):
    chosen = place(vs, tenant)
    if any(placeable(v) for v in vs):
        assert chosen is not None and any(v.name == chosen and placeable(v) for v in vs)
    else:
        assert chosen is None


@given(st.lists(volumes, min_size=1, max_size=6), counts)
def test_a_volume_with_room_is_chosen_over_any_without(vs, tenant):
    chosen = place(vs, tenant)
    roomy = [v for v in vs if placeable(v) and has_room(v)]
    if roomy:
        assert any(v.name == chosen and has_room(v) for v in roomy)


@given(st.integers(1, 6), st.integers(1, 40))
def test_a_tenants_threads_spread_evenly_over_equally_loaded_volumes(n, threads):
    vs = [node(f"node-{i}") for i in range(n)]
    tenant: Counter[str] = Counter()
    for _ in range(threads):
        chosen = place(vs, tenant)
        assert chosen is not None
        tenant[chosen] += 1
    assert max(tenant.get(v.name, 0) for v in vs) - min(tenant.get(v.name, 0) for v in vs) <= 1


def test_no_checkpoint_service_no_host_or_draining_is_never_a_candidate():
    assert place([node("a", checkpoints=False), node("b", hosts=0), node("c", draining=True)], {}) is None
    assert place([node("a", checkpoints=False), node("b", hosts=0), node("c")], {}) == "c"


def test_load_comes_before_the_tenants_spread_and_disk_before_both():
    busy, idle = node("busy", live=7), node("idle", live=0)
    assert load_band(busy) > load_band(idle)
    assert place([busy, idle], {"idle": 5}) == "idle"  # the tenant has more there, but the other is loaded
    full_disk = node("disk", disk_free=MIN_DISK_FREE - 1)
    assert place([full_disk, busy], {}) == "busy"
    assert place([node("a", workspaces=9), node("b", workspaces=3)], {}) == "b"
