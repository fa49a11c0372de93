"""ACP permission requests in the one request shape, without an agent: what the translator reads of a request
(paths relative to the workspace, never the host's; which calls are Treadle's own MCP tools) and what a hostile
model cannot make it believe."""

from __future__ import annotations

from treadle.core import provider_events as pe
from treadle.core.ids import IdFactory
from treadle.providers.acp.translate import TurnTranslator, mcp_call_of
from treadle.providers.base import Turn

WS = "/srv/ws/acme/threads/thr_1"
OPTIONS = [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}, {"optionId": "no", "kind": "reject_once"}]


def _opened(call: dict) -> pe.RequestOpened:
    turn = Turn(run_id="r", attempt_id="a", root_node_id="n", text="go", script=None, ids=IdFactory("a", 1))
    [opened] = TurnTranslator(turn, WS).permission(7, {"toolCall": call, "options": OPTIONS}).events
    assert isinstance(opened, pe.RequestOpened)
    return opened


def test_L11_1_a_command_shows_its_command_and_a_cwd_relative_to_the_workspace():
    opened = _opened(
        {
            "toolCallId": "c1",
            "kind": "execute",
            "title": "make test",
            "rawInput": {"command": ["bash", "-lc", "make test"], "cwd": f"{WS}/src", "description": "Run tests"},
        }
    )
    assert (opened.kind, opened.command, opened.cwd, opened.description) == ("command", "make test", "src", "Run tests")
    assert opened.prompt == "Run `make test` in src"
    assert opened.detail == {
        "tool": "execute",
        "title": "make test",
        "options": [
            {"id": "allow", "label": "Allow", "kind": "allow_once"},
            {"id": "no", "label": "no", "kind": "reject_once"},
        ],
    }


def test_L11_1_an_edit_lists_its_files_relative_to_the_workspace_with_their_diff_and_no_host_path():
    opened = _opened(
        {
            "toolCallId": "c2",
            "kind": "edit",
            "title": f"Edit {WS}/notes.md",
            "content": [{"type": "diff", "path": f"{WS}/notes.md", "oldText": "a\n", "newText": "b\n"}],
            "locations": [{"path": f"{WS}/notes.md"}, {"path": f"{WS}/../../other/x"}],
        }
    )
    assert [(f.path, f.change) for f in opened.files] == [("notes.md", "update"), ("/srv/ws/acme/other/x", "update")]
    assert "--- notes.md" in opened.files[0].diff and WS not in opened.files[0].diff
    assert opened.prompt == "Edit notes.md; Edit /srv/ws/acme/other/x"  # outside the workspace: shown whole


def test_treadles_own_mcp_calls_are_known_by_what_the_agent_writes_not_by_the_models_words():
    claude = {"toolCallId": "t", "kind": "other", "title": "mcp__treadle__capabilities", "rawInput": {}}
    assert mcp_call_of({"toolCall": claude}) == ("treadle", "capabilities")
    # a command or a task titled like the tool is the model's text: not an MCP call
    for kind in ("execute", "think", "edit"):
        assert mcp_call_of({"toolCall": {**claude, "kind": kind}}) is None
    codex = {
        "toolCallId": "call_x",
        "title": "Approve MCP tool call",
        "rawInput": {
            "server_name": "treadle",
            "request": {
                "_meta": {"codex_approval_kind": "mcp_tool_call"},
                "message": 'Allow the treadle MCP server to run tool "thread_start"?',
            },
        },
    }
    assert mcp_call_of({"toolCall": codex}) == ("treadle", "thread_start")
    other = {**codex, "rawInput": {**codex["rawInput"], "server_name": "evil"}}
    assert mcp_call_of({"toolCall": other}) is None  # the question names another server than the request
    assert mcp_call_of({"toolCall": {"kind": "other", "title": "mcp__treadle"}}) is None
    assert mcp_call_of({"toolCall": "nonsense"}) is None
