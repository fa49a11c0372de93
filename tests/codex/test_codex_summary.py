"""L5.5: a provider-backed handoff summary written by the real ``codex`` binary (mock Responses API): one turn on
an ephemeral Codex thread in an empty scratch workspace, nothing of it kept."""

from __future__ import annotations

import pytest

from tests.codex.codex_mock import Text
from tests.codex.codex_support import codex_env
from treadle.core.lineage import summarise as sm
from treadle.provider_host import summaries
from treadle.providers import protocol as hp

pytestmark = pytest.mark.e2e


async def test_L5_5_codex_writes_a_summary_on_an_ephemeral_thread_and_keeps_nothing(
    mock, homes_root, tmp_path, monkeypatch
):
    for name, value in codex_env(mock, homes_root).items():
        monkeypatch.setenv(name, value)
    prompt = sm.provider_prompt("## Run 1 (completed, on codex)\nUser asked: write the codex parser", 2_000)
    mock.on(prompt, [Text("The codex parser is written; nothing is open.")])
    reply = await summaries.summarise(
        hp.Summarise(tenant="summaryco", provider="codex", text=prompt, timeout=60), tmp_path / "summaries"
    )
    assert reply == hp.Summary(text="The codex parser is written; nothing is open.")
    assert [r.prompt for r in mock.requests].count(prompt) == 1
    assert not list((tmp_path / "summaries").iterdir())  # the scratch workspace and runtime files are gone
    assert not list((homes_root / "summaryco").glob("sessions/**/*.jsonl"))  # Codex kept no rollout of it
