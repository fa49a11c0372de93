"""L9.3: what a dead runtime process said, as a run's error: no colour codes, no unrelated warnings."""

from datetime import UTC

from treadle.providers import exits

CODEX_STDERR = [
    "\x1b[2m2026-12-03T20:01:02.345Z\x1b[0m \x1b[33m WARN\x1b[0m \x1b[2mcodex_core::config\x1b[0m: Codex could not find "
    "bubblewrap on PATH; using the bundled sandbox",
    "",
    "\x1b[2m2026-12-03T20:01:03.000Z\x1b[0m \x1b[31mERROR\x1b[0m \x1b[2mcodex_core::client\x1b[0m: stream error: "
    "connection reset",
    "\x1b[2m2026-12-03T20:01:04.000Z\x1b[0m \x1b[33m WARN\x1b[0m sandbox: seccomp filter failed to load, retrying",
]


def test_L9_3_the_error_is_the_last_error_line_without_ansi_codes_or_warnings():
    assert exits.describe("codex app-server", -9, CODEX_STDERR) == (
        "codex app-server was killed by SIGKILL: 2026-12-03T20:01:03.000Z ERROR codex_core::client: stream error: "
        "connection reset"
    )


def test_L9_3_an_exit_with_only_warnings_names_the_exit_alone():
    assert exits.describe("Claude Code", 143, CODEX_STDERR[:2]) == "Claude Code was killed by SIGTERM"
    assert exits.describe("codex app-server", 1, []) == "codex app-server exited with code 1"
    assert exits.describe("codex app-server", None, ["plain words"]) == "codex app-server exited"


def test_L9_3_a_long_line_is_cut():
    line = exits.relevant_line(["fatal: " + "x" * 1000])
    assert line is not None and len(line) == exits.MAX_LINE and line.endswith("…")


def test_L9_3_a_run_that_lost_its_runtime_for_good_says_how_the_runtime_ended():
    from datetime import datetime

    from treadle.core import events as ev
    from treadle.core.ctx import reaction_ctx
    from treadle.core.providers.model import ProviderCapabilities
    from treadle.core.run import supervision as sv
    from treadle.core.state import fold

    at = datetime(2026, 12, 3, tzinfo=UTC)
    seq = iter(range(1, 1000))

    def envelopes(*payloads: ev.Payload) -> list[ev.Envelope]:
        return [
            ev.Envelope(
                id=f"evt_{n}",
                type=p.TYPE,
                tenant="acme",
                thread="thr_1",
                at=at,
                command_id="cmd",
                actor="test",
                data=p,
                seq=n,
            )
            for n, p in zip(seq, payloads)
        ]

    def running_on(session: str, attempt: str) -> list[ev.Payload]:
        return [
            ev.ProviderAttached(
                session_id=session,
                provider="codex",
                host_id="host-1",
                boot_id="b",
                provider_thread_id="pth_1",
                native_ref="thread-1",
                capabilities=ProviderCapabilities(),
            ),
            ev.RunStarted(run_id="run_1", attempt_id=attempt, session_id=session, turn_id=f"turn_{session}"),
        ]

    state = fold(
        envelopes(
            ev.ThreadCreated(thread_id="thr_1", workspace="w", created_by="u"),
            ev.RunQueued(
                run_id="run_1",
                ordinal=1,
                message_id="msg_1",
                text="go",
                root_node_id="node_1",
                attempt_id="att_1",
                mode="auto",
                disposition="started",
                dispatched=True,
                provider="codex",
            ),
            *running_on("ps_1", "att_1"),
        )
    )
    died = "codex app-server was killed by SIGKILL"
    for n in (1, 2, 3):
        reaction = sv.session_stopped(state, f"ps_{n}", "provider_crashed", reaction_ctx(f"s{n}", at, "test"), died)
        assert reaction.events[0] == ev.ProviderStopped(session_id=f"ps_{n}", reason="provider_crashed", detail=died)
        if n < 3:
            [retry] = [e for e in reaction.events if isinstance(e, ev.AttemptStarted)]
            state = fold(envelopes(*reaction.events, *running_on(f"ps_{n + 1}", retry.attempt_id)), state)
    [failed] = [e for e in reaction.events if isinstance(e, ev.RunFailed)]
    assert failed.error == f"provider lost 3 times: provider_crashed ({died})"
