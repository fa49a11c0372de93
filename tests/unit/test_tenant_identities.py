"""Tenant uids: allocated once, stable across processes sharing a volume, never handed out twice."""

import json
import multiprocessing

import pytest

from treadle.sandbox.identity import RECORD, IdentityError, TenantIdentities


def test_a_tenant_keeps_its_ids_and_tenants_never_share_them(tmp_path):
    first = TenantIdentities(tmp_path)
    acme, globex = first.ids("acme"), first.ids("globex")
    assert acme != globex and acme.uid == acme.gid >= 200_000
    again = TenantIdentities(tmp_path)  # another process mounting the same volume
    assert again.ids("globex") == globex and again.ids("acme") == acme
    assert json.loads((tmp_path / RECORD).read_text()) == {"acme": acme.uid, "globex": globex.uid}


def _allocate(root, names, out):
    ids = TenantIdentities(root)
    out.put({n: ids.ids(n).uid for n in names})


def test_processes_allocating_at_once_hand_out_each_uid_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    names = [f"t{i}" for i in range(40)]
    procs = [ctx.Process(target=_allocate, args=(tmp_path, names[i::2] + names[:5], out)) for i in range(2)]
    for p in procs:
        p.start()
    seen = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    merged: dict[str, int] = {}
    for part in seen:
        for name, uid in part.items():
            assert merged.setdefault(name, uid) == uid
    assert len(set(merged.values())) == len(merged)


@pytest.mark.parametrize("name", ["", "../etc", "a/b", "x" * 65, "a b", "a\nb"])
def test_a_tenant_name_that_is_not_one_is_refused(tmp_path, name):
    with pytest.raises(IdentityError):
        TenantIdentities(tmp_path).ids(name)


def test_a_range_reaching_the_machines_users_is_refused(tmp_path):
    with pytest.raises(IdentityError):
        TenantIdentities(tmp_path, base=0)


def test_a_full_range_is_a_typed_error(tmp_path):
    ids = TenantIdentities(tmp_path, base=300_000, count=1)
    ids.ids("a")
    with pytest.raises(IdentityError):
        ids.ids("b")
