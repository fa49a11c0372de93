"""What the Claude and Codex tests over HTTP share: API clients acting as a tenant's user, and reading a
thread's workspace, history, messages and runtime requests the way a client of the API sees them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, get_args

import nats
import psutil

from tests.support.helpers import checkpoint_git, wait_for
from treadle.cli.stack import Stack
from treadle.client.http import TreadleClient
from treadle.core.policy import TenantPolicy
from treadle.core.thread.model import RuntimeMode
from treadle.ops.policies import PolicyStore
from treadle.ops.servers import free_port
from treadle.ops.tokens import TokenStore


async def tenant_token(stack: Stack, tenant: str) -> str:
    """A fresh API token of ``tenant``'s user alice. The tenant may use every runtime mode: the real runtimes'
    tests run threads in full_access, which only an admin's policy allows (issue 16)."""
    nc = await nats.connect(stack.nats_url)
    try:
        await PolicyStore(nc.jetstream()).put(tenant, TenantPolicy(allowed_modes=get_args(RuntimeMode)), actor="test")
        return await TokenStore(nc.jetstream()).create(tenant, "alice")
    finally:
        await nc.close()


def api_client(stack: Stack, token: str) -> TreadleClient:
    return TreadleClient(stack.api_url, token, timeout=30)


@contextlib.asynccontextmanager
async def tenant_client(stack: Stack, tenant: str) -> AsyncIterator[TreadleClient]:
    """An API client with a fresh token of ``tenant``'s user alice."""
    async with api_client(stack, await tenant_token(stack, tenant)) as client:
        yield client


def workspace_of(stack: Stack, tenant: str, thread: str) -> Path:
    return stack.workspace_of(tenant, thread)  # on the node that holds it


def history(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a thread's history is made of: its runs with their status and messages, and its provider threads."""
    return (
        [(r["id"], r["status"]) for r in doc["runs"]]
        + [(m["role"], m["text"]) for m in doc["messages"]]
        + [(p["id"], p["native_ref"], p["covered_ordinals"]) for p in doc["provider_threads"]]
    )


def user_texts(run: dict[str, Any]) -> list[str]:
    return [m["text"] for m in run["messages"] if m["role"] == "user"]


async def pending_request(client: TreadleClient, thread: str, *, besides: tuple[str, ...] = ()) -> dict[str, Any]:
    """The thread's one pending request (other than ``besides``), as the pending-request projection lists it
    (L11.1)."""
    return await client.wait_request(thread, 60, besides=besides)


async def respond(client: TreadleClient, request_id: str, body: dict[str, Any]) -> dict[str, Any]:
    r = await client.request("POST", f"/v1/requests/{request_id}/respond", json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def request_status(client: TreadleClient, thread: str, request_id: str) -> dict[str, Any]:
    return next(r for r in (await client.get_thread(thread))["requests"] if r["id"] == request_id)


async def kill_the_provider_host_under(
    stack: Stack, client: TreadleClient, thread: str, request: dict[str, Any]
) -> None:
    """L11.3: the provider host dies while ``request`` is pending. Answering it then is refused as
    not_resumable, which the thread's projection shows; returns once the host has been restarted."""
    restarts = stack.processes.restarts("provider-host")
    await stack.processes.kill("provider-host")
    gone = await client.request("POST", f"/v1/requests/{request['id']}/respond", json={"decision": "accept"})
    assert gone.status_code == 409 and gone.json()["error"]["code"] == "not_resumable"

    async def marked() -> bool:  # the projection follows the 409's record a moment later
        return (await request_status(client, thread, request["id"]))["status"] == "not_resumable"

    await wait_for(marked, timeout=10, what="the request marked not_resumable")
    await wait_for(
        lambda: stack.processes.restarts("provider-host") > restarts, timeout=30, what="provider host restarted"
    )


def checkpointed(stack: Stack, tenant: str, thread: str, checkpoint: dict[str, Any], path: str) -> str:
    """``path`` as ``checkpoint`` (a run's, as the API shows it) holds it, read from the checkpoint service's git dir."""
    return checkpoint_git(stack.node_dir_of(tenant, thread), tenant, thread, "show", f"{checkpoint['ref']}:{path}")


async def answered_once(client: TreadleClient, thread: str, request: dict[str, Any], response: dict[str, Any]) -> None:
    """``request`` is resolved with ``response``; answering it again is refused (its callback is used up)."""
    answered = await request_status(client, thread, request["id"])
    assert answered["status"] == "resolved" and answered["response"] == response
    again = await client.request("POST", f"/v1/requests/{request['id']}/respond", json=response)
    assert again.status_code == 409


def native_fork_thread(
    fork: dict[str, Any], source_run: dict[str, Any], source_pth: dict[str, Any], provider: str
) -> dict[str, Any]:
    """L6.2: the fork (its thread document) was started natively from ``source_run`` of the source's provider
    thread ``source_pth``, on a provider thread of its own, which is returned."""
    [transfer] = fork["transfers"]
    assert (transfer["status"], transfer["fidelity"], transfer["source_point"]["run_id"]) == (
        "consumed",
        "native",
        source_run["id"],
    )
    [resolved] = fork["start_contexts"]
    assert resolved["fork_native_ref"] == source_pth["native_ref"]
    assert resolved["fork_at_turn_ref"] == source_run["attempts"][-1]["native_turn_ref"]
    [fork_pth] = fork["provider_threads"]
    assert fork_pth["provider"] == provider and fork_pth["native_ref"] not in ("", None, source_pth["native_ref"])
    return fork_pth


def runtime_pid(stack: Stack, marker: str) -> int | None:
    """The one runtime process (``app-server`` for Codex, ``/claude`` for Claude Code) the provider host runs."""
    host = stack.processes.pid("provider-host")
    if host is None:
        return None
    found = [
        p.pid for p in psutil.Process(host).children(recursive=True) if any(marker in part for part in p.cmdline()[:2])
    ]
    return found[0] if len(found) == 1 else None


async def kill_the_runtime(stack: Stack, marker: str) -> int:
    """kill -9 of the runtime process alone; the provider host lives on. Returns the dead pid."""
    pid = await wait_for(lambda: runtime_pid(stack, marker), timeout=30, what=f"the {marker} process")
    os.kill(pid, signal.SIGKILL)
    return pid


class TreadleUp:
    """``treadle up`` in a process of its own, as an operator runs it, stopped the way a service manager stops
    it: SIGTERM to that process. Restarted on the same state dir and port."""

    def __init__(self, state_dir: Path, env: dict[str, str], demo: bool = False, args: tuple[str, ...] = ()) -> None:
        self.state_dir, self.env, self.port, self.demo = state_dir, env, free_port(), demo
        self.args = args  # more flags of `treadle up`
        self.log = state_dir.parent / f"{state_dir.name}-up.log"
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        return (self.state_dir / "dev-token").read_text().strip()

    async def start(self, timeout: float = 120) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            out.write(b"--- treadle up\n")
            out.flush()
            self.proc = await asyncio.create_subprocess_exec(
                str(Path(sys.executable).parent / "treadle"),
                "up",
                "--state-dir",
                str(self.state_dir),
                "--port",
                str(self.port),
                "--demo" if self.demo else "--no-demo",
                *self.args,
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        starts = self.log.read_text().count("--- treadle up")

        def serving() -> bool:
            if self.proc is not None and self.proc.returncode is not None:
                raise RuntimeError(f"treadle up exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            return self.log.read_text().split("--- treadle up")[starts].count("serving") > 0

        await wait_for(serving, timeout=timeout, interval=0.1, what="treadle up serving")

    async def stop(self, timeout: float = 90) -> int:
        """SIGTERM, as `kill` or a service manager sends it; returns the exit status."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(timeout):
            return await self.proc.wait()

    async def restart_and_finish(
        self, waiting: str, asked: dict[str, Any], runs: dict[str, str]
    ) -> dict[str, dict[str, Any]]:
        """Stop gracefully and start again; accept the request the ``waiting`` thread asks again (``asked`` was
        the one before the stop), and return each of ``runs`` (thread -> run id) once it has ended."""
        assert await self.stop() == 0
        await self.start()
        async with TreadleClient(self.api_url, self.token, timeout=30) as client:
            again = await pending_request(client, waiting, besides=(asked["id"],))
            await respond(client, again["id"], {"decision": "accept"})
            return {t: await client.wait_run(r, timeout=120) for t, r in runs.items()}

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
