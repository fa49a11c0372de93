"""L5.5: the provider-backed handoff summariser against a real broker and a real provider host (the scripted
provider plays the summarising model): the summary it writes, and the deterministic one standing whenever the
provider fails, overruns the target's budget, is unknown, or no host answers."""

from __future__ import annotations

import nats
import pytest

from treadle.core import events as ev
from treadle.core.lineage import summarise as sm
from treadle.eventlog import streams
from treadle.ops.servers import NatsServer
from treadle.provider_host.service import ProviderHost
from treadle.providers.hosts import HostClient
from treadle.runtime.clock import ManualClock
from treadle.runtime.settings import ProviderHostSettings, Shared, SupervisorSettings
from treadle.supervisor.summariser import ProviderSummariser, SummariserSettingError

HEADING = "# Context: summary of this conversation so far (runs 1-2):"
LOCAL_TEXT = HEADING + "\n\n## Run 1 (completed, on scripted)\nUser asked: write the parser\nAssistant replied: done"
MATERIAL = HEADING + "\n\n## Run 1 (completed, on scripted)\nUser asked: write the parser, with every detail kept"


@pytest.fixture
async def broker(tmp_path):
    server = NatsServer(tmp_path / "nats")
    await server.start()
    nc = await nats.connect(server.url)
    await streams.ensure(nc.jetstream())
    host = ProviderHost(
        nc, Shared(state_dir=tmp_path, nats_url=server.url), ProviderHostSettings(host_id="h1"), clock=ManualClock()
    )
    await host.start()
    yield nc, tmp_path
    await host.stop()
    await nc.close()
    await server.stop()


def handoff() -> ev.HandoffCreated:
    return ev.HandoffCreated(
        handoff_id="hoff_1",
        run_id="run_1",
        strategy="full_thread_summary",
        to_provider="b",
        text=LOCAL_TEXT,
        truncated=True,
    )


async def summarised(
    nc, steps: list[dict] | None, budget: int = 10_000, provider: str = "scripted", volume: str = "local"
) -> ev.HandoffCreated:
    summariser = ProviderSummariser(
        HostClient(nc, 2.0), provider, script={"steps": steps} if steps is not None else None, timeout=10
    )
    [out] = await summariser.apply("acme", volume, [handoff()], {"hoff_1": MATERIAL}, budget)
    return out


async def test_L5_5_a_provider_writes_the_summary_under_the_heading_and_the_handoff_says_who(broker):
    nc, state = broker
    out = await summarised(nc, [{"type": "text", "text": "The parser is written; nothing is open."}])
    assert out.text == HEADING + "\n\nThe parser is written; nothing is open."
    assert (out.summariser, out.version, out.fallback, out.truncated) == (
        "provider:scripted",
        sm.PROVIDER_VERSION,
        None,
        False,
    )
    assert not any((state / "provider-runtimes" / "h1" / "summaries").iterdir())  # the scratch space is gone


async def test_L5_5_the_provider_is_asked_from_the_material_within_the_budget(broker):
    nc, _ = broker
    out = await summarised(nc, [{"type": "echo", "prefix": ""}])  # the provider answers with the prompt it got
    asked = out.text.removeprefix(HEADING + "\n\n")
    assert "with every detail kept" in asked and "<conversation-record>" in asked  # the material, not the handoff
    assert f"at most {10_000 - len(HEADING) - 2} characters" in asked


@pytest.mark.parametrize(
    ("steps", "budget", "why"),
    [
        ([{"type": "fail", "message": "the model is overloaded"}], 10_000, "the model is overloaded"),
        ([{"type": "text", "text": "x" * 900}], 800, "over the"),
        ([{"type": "text", "text": "   "}], 10_000, "no summary"),
    ],
)
async def test_L5_5_a_failing_or_overrunning_provider_leaves_the_deterministic_summary(broker, steps, budget, why):
    nc, _ = broker
    out = await summarised(nc, steps, budget)
    assert (out.text, out.summariser, out.version, out.truncated) == (LOCAL_TEXT, sm.LOCAL, sm.LOCAL_VERSION, True)
    assert out.fallback.startswith("provider:scripted: ") and why in out.fallback


async def test_L5_5_an_unknown_provider_or_no_host_leaves_the_deterministic_summary(broker):
    nc, _ = broker
    unknown = await summarised(nc, None, provider="nosuch")
    assert unknown.text == LOCAL_TEXT and "bad_request" in unknown.fallback and "nosuch" in unknown.fallback
    nobody = await summarised(nc, None, volume="elsewhere")  # no host serves that volume
    assert nobody.text == LOCAL_TEXT and "no provider host answered" in nobody.fallback


def test_L5_5_the_summariser_setting_is_local_or_provider_and_a_bad_one_is_refused():
    assert ProviderSummariser.configured(None, SupervisorSettings()) is None  # type: ignore[arg-type]  # no host needed to decide
    chosen = ProviderSummariser.configured(
        None,
        SupervisorSettings(
            summariser="provider:claude",  # type: ignore[arg-type]  # a setting as the environment gives it
            summariser_model="haiku",
        ),
    )
    assert chosen is not None and chosen.name == "provider:claude"
    for bad in ("claude", "provider:", "remote:claude"):
        with pytest.raises(SummariserSettingError):
            ProviderSummariser.configured(None, SupervisorSettings(summariser=bad))  # type: ignore[arg-type]  # bad on purpose
    with pytest.raises(SummariserSettingError):
        ProviderSummariser.configured(
            None,
            SupervisorSettings(
                summariser="provider:scripted",  # type: ignore[arg-type]  # a setting as the environment gives it
                summariser_script="{not json",
            ),
        )
