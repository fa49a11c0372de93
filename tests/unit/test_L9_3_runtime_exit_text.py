"""L9.3: what a dead runtime process said, as a run's error: no colour codes, no unrelated warnings."""

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
        "connection reset")


def test_L9_3_an_exit_with_only_warnings_names_the_exit_alone():
    assert exits.describe("Claude Code", 143, CODEX_STDERR[:2]) == "Claude Code was killed by SIGTERM"
    assert exits.describe("codex app-server", 1, []) == "codex app-server exited with code 1"
    assert exits.describe("codex app-server", None, ["plain words"]) == "codex app-server exited"


def test_L9_3_a_long_line_is_cut():
    line = exits.relevant_line(["fatal: " + "x" * 1000])
    assert line is not None and len(line) == exits.MAX_LINE and line.endswith("…")
