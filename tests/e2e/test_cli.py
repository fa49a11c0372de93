"""The ``treadle`` command as a user runs it: separate processes against a running stack, judged by what they
print and how they exit."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import uuid
from pathlib import Path

import pytest

from treadle.cli.stack import Stack
from treadle.runtime import broker_urls

pytestmark = pytest.mark.e2e

TREADLE = Path(sys.executable).parent / "treadle"
REPLY = "I wrote notes.md with the three points you asked for."


def _quiet(name: str, line: str) -> None:
    if " ERROR " in line or "Traceback" in line:
        print(f"{name} | {line}")


async def treadle(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    # No TREADLE_* from the developer's shell, and a cwd without a .treadle/: only the flags (and ``env``) count.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TREADLE_")}
    proc = await asyncio.create_subprocess_exec(
        str(TREADLE),
        *args,
        cwd=cwd,
        env={**clean, "COLUMNS": "200", **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode, out.decode(), err.decode()


async def test_tokens_threads_send_wait_and_show(tmp_path, nats_url, redis_url):
    tenant = f"cli-{uuid.uuid4().hex[:8]}"
    async with Stack(tmp_path / "stack", nats_url=nats_url, redis_url=redis_url, on_output=_quiet) as stack:
        code, out, err = await treadle(
            "tokens", "create", "--tenant", tenant, "--user", "carol", "--nats-url", stack.nats_url, cwd=tmp_path
        )
        assert code == 0, err
        token = out.strip()
        assert re.fullmatch(r"trd_[\w-]+", token) and f"{tenant}/carol" in err
        api = ["--api", stack.api_url, "--token", token]

        code, out, err = await treadle("threads", "create", "--title", "from the cli", *api, cwd=tmp_path)
        assert code == 0, err
        assert "created thread" in out
        thread = re.search(r"thr_[0-9a-z]+", out).group(0)

        script = tmp_path / "script.json"
        script.write_text(
            json.dumps(
                {
                    "steps": [
                        {"type": "text", "text": REPLY, "chunk": 7, "delay_ms": 5},
                        {"type": "write_file", "path": "notes.md", "content": "- one\n- two\n- three\n"},
                    ]
                }
            )
        )
        code, out, err = await treadle(
            "send", thread, "write my notes", "--script", str(script), "--wait", *api, cwd=tmp_path
        )
        assert code == 0, out + err
        run = re.search(r"run_[0-9a-z]+", out).group(0)
        assert REPLY in out
        assert re.search(r"status\s+completed", out)
        assert "notes.md added +3/-0" in out
        assert f"refs/treadle/checkpoints/{thread}/root/1" in out

        code, out, err = await treadle("threads", "show", thread, *api, cwd=tmp_path)
        assert code == 0, err
        assert "from the cli" in out
        assert re.search(rf"1\s+{run}\s+completed", out)
        assert "user › write my notes" in out and f"assistant › {REPLY}" in out
        assert "notes.md added" in out

        # An expected failure is one red line on stderr and the exit code of its kind (3: not found), never a traceback.
        code, out, err = await treadle("threads", "show", "thr_" + "0" * 26, *api, cwd=tmp_path)
        assert code == 3
        assert "not found" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


async def test_threads_show_puts_a_pending_approvals_real_command_first_and_the_models_words_beside_it(
    tmp_path, nats_url, redis_url
):
    """Issue 25: what the CLI shows of an approval is the command that would run, with the model's description
    only beside it."""
    from tests.support.helpers import wait_for
    from tests.support.provider_http import api_client, tenant_token

    async with Stack(tmp_path / "stack", nats_url=nats_url, redis_url=redis_url, on_output=_quiet) as stack:
        token = await tenant_token(stack, f"cli-{uuid.uuid4().hex[:8]}")
        async with api_client(stack, token) as client:
            thread = (await client.create_thread(title="liar"))["thread_id"]
            step = {"type": "approval", "prompt": "list the files", "command": "rm -rf ~/notes"}
            await client.send(thread, "tidy up", script={"steps": [step]})

            async def pending():
                return [r for r in (await client.get_thread(thread))["requests"] if r["status"] == "pending"]

            [request] = await wait_for(pending, timeout=30, what="the pending approval")
            api = ["--api", stack.api_url, "--token", token]
            code, out, err = await treadle("threads", "show", thread, *api, cwd=tmp_path)
    assert code == 0, err
    shown = " ".join(out[out.index(request["id"]) :].split())  # the request's entry, however the terminal wrapped it
    assert shown.index("Run `rm -rf ~/notes` in ") < shown.index('(the model says: "list the files")')


async def test_tokens_create_takes_the_service_credentials_from_the_environment_as_the_workers_do(
    tmp_path, nats_url, redis_url
):
    """A deployment gives the workers TREADLE_NATS_USER/_PASSWORD and a URL without them; the CLI ignored them
    and could not connect."""
    async with Stack(tmp_path / "stack", nats_url=nats_url, redis_url=redis_url, on_output=_quiet) as stack:
        urls = broker_urls.parse(stack.nats_url)
        assert urls.user is not None and urls.password is not None
        bare = ["--nats-url", urls.address]
        code, _, err = await treadle("tokens", "create", "--tenant", "envcreds", "--user", "u", *bare, cwd=tmp_path)
        assert code != 0 and "cannot connect to NATS" in err and urls.password not in err
        creds = {"TREADLE_NATS_USER": urls.user, "TREADLE_NATS_PASSWORD": urls.password}
        code, out, err = await treadle(
            "tokens", "create", "--tenant", "envcreds", "--user", "u", *bare, cwd=tmp_path, env=creds
        )
        assert code == 0, err
        assert re.fullmatch(r"trd_[\w-]+", out.strip())
