"""L9.3 at the CLI's start: Claude Code killed as it starts (a kill -9, the OOM killer) is a lost runtime, which
the host retries on a new session within the run's budget; a CLI that exits by itself fails the turn with its
reason (starting it again would fail again). Real adapter, a stand-in CLI script, the mock model API."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.claude.claude_fixtures import api, claude  # noqa: F401  (fixtures)
from treadle.providers.base import RuntimeLost


def stand_in_cli(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "claude"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


async def open_with(claude, cli: Path):
    adapter = claude.adapter()
    adapter.settings = adapter.settings.model_copy(update={"cli_path": cli})
    await adapter.open_thread(None, "unused")
    return adapter


async def test_L9_3_a_cli_killed_as_it_starts_is_a_lost_runtime(claude, tmp_path):
    adapter = await open_with(claude, stand_in_cli(tmp_path, "kill -9 $$"))
    with pytest.raises(RuntimeLost, match="Claude Code was killed by SIGKILL as it started"):
        await claude.play(adapter, "#text hello")
    assert claude.api.seen == []


async def test_L2_5_a_cli_that_exits_as_it_starts_fails_the_turn_with_its_reason(claude, tmp_path):
    adapter = await open_with(claude, stand_in_cli(tmp_path, "echo 'error: no such config' >&2; exit 3"))
    _, sink = await claude.play(adapter, "#text hello")
    assert sink.completed is not None and sink.completed.status == "failed"
    assert sink.completed.error.startswith("Claude Code did not start")
