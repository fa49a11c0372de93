"""Issue 16 over HTTP: a run plants git config, hooks and attributes in its own workspace (the scripted
provider's `write_file` steps, as an agent would); the checkpoints taken after it, the run's diff, a rollback,
a fork and a merge-back run none of it and hand back no other tenant's bytes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.helpers import wait_for
from tests.support.rollbacks import replying, run_to_end
from tests.support.scripts import write

pytestmark = pytest.mark.e2e

FOREIGN = "FOREIGN-TENANT-SECRET-e2e-41b7"
RAW = "loot: $Id: keep $\r\nsecond\r\n"


def _command(markers: Path, foreign: Path, name: str) -> str:
    return f"sh -c 'touch {markers}/{name}; cat {foreign} > stolen-{name}.txt; cat {foreign}'"


def _config(markers: Path, foreign: Path, ws: Path) -> str:
    c = lambda name: _command(markers, foreign, name)  # noqa: E731
    return f"""[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tfsmonitor = {c("fsmonitor")}
\thooksPath = {ws / "hooks"}
\tsshCommand = {c("ssh")}
\tpager = {c("pager")}
\tattributesFile = {ws / "evil.attributes"}
[include]
\tpath = {ws / "more.cfg"}
[filter "x"]
\tclean = {c("clean")}
\tsmudge = {c("smudge")}
\tprocess = {c("process")}
[diff "x"]
\ttextconv = {c("textconv")}
\tcommand = {c("diffcmd")}
[diff]
\texternal = {c("external")}
[submodule "sub"]
\tupdate = !{c("submodule")}
"""


async def test_a_run_planting_git_config_hooks_and_attributes_runs_nothing_through_capture_diff_rollback_fork_merge(
    api, stack, tmp_path
):
    markers = tmp_path / "markers"
    markers.mkdir()
    os.chmod(markers, 0o777)
    other = stack.state_dir / "workspaces" / "other-tenant" / "threads" / "thr_x"
    other.mkdir(parents=True)
    foreign = other / "secret.txt"
    foreign.write_text(FOREIGN + "\n")

    thread = await api.create_thread(title="hostile")
    ws = stack.state_dir / "workspaces" / api.tenant / "threads" / thread
    c = lambda name: _command(markers, foreign, name)  # noqa: E731
    plant = replying(
        write(".git/config", _config(markers, foreign, ws)),
        write(".git/info/attributes", "* filter=x diff=x\n"),
        write("more.cfg", f'[filter "y"]\n\tclean = {c("include")}\n'),
        write("evil.attributes", "* filter=x diff=x\n"),
        write(
            ".gitattributes",
            "[attr]evil filter=x diff=x\nloot.txt filter=x diff=x ident text eol=crlf "
            "working-tree-encoding=UTF-16\n*.md evil\n",
        ),
        write(".gitmodules", f'[submodule "sub"]\n\tpath = sub\n\turl = ext::{c("ext")}\n'),
        write("loot.txt", RAW),
        write("notes.md", "# notes\n"),
    )
    run1 = await run_to_end(api, thread, "plant", plant)
    # Hooks need the executable bit, which write_file does not give: the test sets them, as an agent's shell would.
    for d in (ws / ".git" / "hooks", ws / "hooks"):
        d.mkdir(exist_ok=True)
        for hook in ("pre-commit", "post-checkout", "reference-transaction", "post-index-change", "pre-auto-gc"):
            (d / hook).write_text(f"#!/bin/sh\n{c('hook-' + hook)}\n")
            os.chmod(d / hook, 0o755)

    run2 = await run_to_end(
        api, thread, "change", replying(write("loot.txt", RAW + "third\r\n"), write("notes.md", "# notes\nmore\n"))
    )
    assert {f["path"] for f in run2["checkpoint"]["files"]} >= {"loot.txt", "notes.md"}  # and hooks/*
    diff = (await api.request("GET", f"/v1/runs/{run2['id']}/diff")).json()
    assert "+third" in diff["patch"] and FOREIGN not in diff["patch"]
    files = {f["path"]: f["binary"] for f in diff["files"]}
    assert (files["loot.txt"], files["notes.md"]) == (False, False)  # no diff driver, no `binary` macro

    r = await api.request("POST", f"/v1/threads/{thread}/rollback", json={"to_run_ordinal": 1})
    assert r.status_code == 200 and r.json()["status"] == "completed", r.text
    assert (ws / "loot.txt").read_bytes() == RAW.encode()  # raw bytes back: no smudge, EOL or encoding conversion

    forked = await api.request("POST", f"/v1/threads/{thread}/fork", json={"source": {"type": "run", "id": run1["id"]}})
    assert forked.status_code == 201, forked.text
    child = forked.json()["thread_id"]
    fork_ws = stack.state_dir / "workspaces" / api.tenant / "threads" / child
    await wait_for(lambda: (fork_ws / "loot.txt").exists(), what="the fork's workspace")
    assert (fork_ws / "loot.txt").read_bytes() == RAW.encode()
    await run_to_end(api, child, "on the fork", replying(write("fork.txt", "f\n")))
    merged = await api.send(thread, "merge it back", merge_back_from=child, script=replying())
    await api.wait_run(merged["run_id"])

    for doc in (await api.thread(thread), await api.thread(child)):
        assert FOREIGN not in str(doc)
    assert sorted(p.name for p in markers.iterdir()) == []
    assert [p for p in (*ws.rglob("stolen-*"), *fork_ws.rglob("stolen-*"))] == []
    # The agent's repository holds no checkpoint ref: the service's own git dir does.
    assert not (ws / ".git" / "refs" / "treadle").exists()


async def test_on_a_stack_run_as_root_every_checkpoint_git_runs_as_the_tenants_uid_without_the_services_secrets():
    """A private stack whose state dir other users can reach (pytest's tmp_path is not): the checkpoint service,
    as root, runs each git child as the tenant's uid. A recording `git` first on PATH proves it."""
    import shutil
    import tempfile

    import nats

    from tests.support.api import Api
    from tests.support.helpers import quiet
    from treadle.cli.stack import Stack
    from treadle.ops.tokens import TokenStore
    from treadle.sandbox.identity import TenantIdentities

    base = Path(tempfile.mkdtemp(prefix="treadle-e2e-uids-"))
    try:
        os.chmod(base, 0o711)
        calls, bindir = base / "calls", base / "bin"
        calls.mkdir(mode=0o777)
        os.chmod(calls, 0o777)
        bindir.mkdir()
        real = shutil.which("git")
        (bindir / "git").write_text(f"""#!/bin/sh
{{ echo "uid=$(id -u)"; env | sed 's/^/env:/'; echo "argv:$*"; }} > {calls}/call.$$
exec {real} "$@"
""")
        os.chmod(bindir / "git", 0o755)
        env = {"PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        async with Stack(base / "stack", env=env, on_output=quiet) as stack:
            nc = await nats.connect(stack.nats_url)
            api = Api(stack.api_url, await TokenStore(nc.jetstream()).create("uids", "alice"), "uids")
            try:
                thread = await api.create_thread()
                await run_to_end(api, thread, "one", replying(write("a.txt", "1\n")))
                two = await run_to_end(api, thread, "two", replying(write("a.txt", "2\n"), write("b/c.txt", "c\n")))
                diff = (await api.request("GET", f"/v1/runs/{two['id']}/diff")).json()
                assert "+2" in diff["patch"]
                r = await api.request("POST", f"/v1/threads/{thread}/rollback", json={"to_run_ordinal": 1})
                assert r.status_code == 200 and r.json()["status"] == "completed", r.text
                workspaces = stack.state_dir / "workspaces"
                ws = workspaces / "uids" / "threads" / thread
                assert (ws / "a.txt").read_text() == "1\n" and not (ws / "b").exists()
                tenant = TenantIdentities(workspaces).ids("uids")
                assert os.stat(workspaces / "uids").st_uid == tenant.uid and os.stat(ws / "a.txt").st_uid == tenant.uid
            finally:
                await api.close()
                await nc.close()
        recorded = [p.read_text() for p in calls.iterdir()]
        assert recorded, "the checkpoint service ran no git"
        for call in recorded:
            assert call.startswith(f"uid={tenant.uid}\n"), call.splitlines()[0]
            names = {line[4:].split("=", 1)[0] for line in call.splitlines() if line.startswith("env:")}
            assert not any(n.startswith(("TREADLE_", "NATS")) for n in names), names
            assert stack.nats_url not in call
    finally:
        shutil.rmtree(base, ignore_errors=True)
