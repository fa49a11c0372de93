"""Issue 19, done when: a client generated from schemas/openapi.json by a standard generator (openapi-python-client,
a pinned dev dependency, run offline from the venv) compiles and drives a run through an approval against the
real stack: create a thread, send a message whose run asks for an approval, read the SSE stream, answer the
approval from the event, and see the run completed."""

from __future__ import annotations

import asyncio
import compileall
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.scripts import approval, script, text

pytestmark = pytest.mark.e2e

DOCUMENT = Path(__file__).resolve().parents[2] / "schemas" / "openapi.json"
PACKAGE = "treadle_generated_client"


def generate(into: Path):
    """Generates the client package into ``into`` and imports it (no formatter hooks: nothing but the generator)."""
    config = into / "config.json"
    config.write_text(json.dumps({"package_name_override": PACKAGE, "post_hooks": []}))
    generator = Path(sys.executable).with_name("openapi-python-client")
    done = subprocess.run(
        [str(generator), "generate", "--path", str(DOCUMENT), "--config", str(config), "--meta", "none"]
        + ["--output-path", str(into / PACKAGE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr  # every schema understood
    assert compileall.compile_dir(into / PACKAGE, quiet=1), "the generated client does not compile"
    sys.path.insert(0, str(into))
    try:
        return importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(into))


async def frames(http, thread: str):
    """The thread's SSE frames as (id, event, data), read with the generated client's own httpx client."""
    async with http.stream("GET", f"/v1/threads/{thread}/events") as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        id_, event = None, None
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                id_ = line.removeprefix("id: ")
            elif line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: ") and event is not None:
                yield id_, event, json.loads(line.removeprefix("data: "))
                id_, event = None, None


async def test_a_generated_client_creates_sends_streams_answers_an_approval_and_sees_the_run_completed(
    api, stack, tmp_path
):
    generate(tmp_path)
    client_module = importlib.import_module(f"{PACKAGE}.client")
    models = importlib.import_module(f"{PACKAGE}.models")
    create_thread = importlib.import_module(f"{PACKAGE}.api.threads.create_thread")
    send_message = importlib.import_module(f"{PACKAGE}.api.messages.send_message")
    respond = importlib.import_module(f"{PACKAGE}.api.requests.respond")
    get_run = importlib.import_module(f"{PACKAGE}.api.runs.get_run")
    client = client_module.AuthenticatedClient(base_url=stack.api_url, token=api.token, raise_on_unexpected_status=True)

    async with client:
        created = await create_thread.asyncio_detailed(
            client=client, body=models.CreateThreadRequest(title="generated client")
        )
        assert created.status_code == 201 and isinstance(created.parsed, models.ThreadCreated), created.content
        thread = created.parsed.thread_id

        async def drive() -> tuple[str, str]:
            answered, sent = None, None
            async for id_, event, data in frames(client.get_async_httpx_client(), thread):
                if sent is None and event == "thread.created":  # the stream is open: nothing can be missed now
                    body = models.SendMessageRequest.from_dict(
                        {"text": "deploy", "script": script(approval("deploy?"), text("deployed"))}
                    )
                    accepted = await send_message.asyncio_detailed(thread, client=client, body=body)
                    assert accepted.status_code == 202 and isinstance(accepted.parsed, models.MessageAccepted)
                    sent = accepted.parsed.run_id
                elif event == "request.opened" and data["data"]["run_id"] == sent:
                    answer = models.RespondBody.from_dict({"decision": "accept"})
                    ack = await respond.asyncio_detailed(data["data"]["request_id"], client=client, body=answer)
                    assert ack.status_code == 200 and isinstance(ack.parsed, models.Acknowledged), ack.content
                    answered = data["data"]["request_id"]
                elif event == "run.completed" and data["data"]["run_id"] == sent:
                    assert answered is not None, "the run completed without its approval"
                    assert id_ is not None, "a stored event without its id"
                    return sent, id_
            raise AssertionError("the event stream ended before the run completed")

        run_id, seq = await asyncio.wait_for(drive(), 60)
        run = await get_run.asyncio_detailed(run_id, client=client, min_seq=seq)
        assert isinstance(run.parsed, models.RunView), run.content
        assert run.parsed.status == models.RunViewStatus.COMPLETED

        # A failure is the documented error model, with its code.
        missing = await get_run.asyncio_detailed("run_00000000000000000000000000", client=client)
        assert missing.status_code == 404 and isinstance(missing.parsed, models.ErrorResponse)
        assert missing.parsed.error.code == "run_not_found"
