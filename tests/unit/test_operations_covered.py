"""Every operation of the HTTP API has an SDK method (async and sync, named after its operation id) and a CLI
command: the operations are read from the gateway's app and from schemas/openapi.json, so a new route that the
SDK or the CLI does not cover fails here."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from treadle.cli import completion
from treadle.cli.completion import tree
from treadle.cli.main import build_parser
from treadle.cli.operations import COMMANDS
from treadle.client import OPERATIONS, AsyncTreadle, Treadle
from treadle.gateway.app import create_app

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "openapi.json"


def app_operations() -> set[str]:
    names = set()
    for route in create_app().routes:
        if not route.path.startswith("/v1/"):  # health, metrics and the schema's own routes are no operations
            continue
        for handler in getattr(route, "route_handlers", ()):
            if handler.include_in_schema is False or handler.handler_name == "options_handler":
                continue
            name = handler.operation_id if isinstance(handler.operation_id, str) else handler.handler_name
            names.add(name)
    return names


def schema_operations() -> set[str]:
    """The document's operation ids (the handler names)."""
    paths = json.loads(SCHEMA.read_text())["paths"].values()
    return {op["operationId"] for path in paths for op in path.values() if isinstance(op, dict) and "operationId" in op}


def test_every_operation_of_the_app_and_the_document_has_an_sdk_method_and_a_cli_command():
    operations = app_operations()
    assert len(operations) >= 29
    assert schema_operations() == operations
    assert set(OPERATIONS) == operations
    for client in (AsyncTreadle, Treadle):
        missing = sorted(op for op in operations if not callable(getattr(client, op, None)))
        assert missing == [], f"{client.__name__} lacks {missing}"
    assert set(COMMANDS) == operations
    paths = {" ".join(p) for p in tree(build_parser())}
    assert sorted(cmd for cmd in COMMANDS.values() if cmd not in paths) == []


def test_every_command_has_help_and_a_completion(capsys):
    parser = build_parser()
    paths = tree(parser)
    for path in paths:
        with pytest.raises(SystemExit) as done:
            build_parser().parse_args([*path, "--help"])
        assert done.value.code == 0, path
    capsys.readouterr()
    script = completion.bash(parser)
    assert all(f'"{" ".join(p)}")' in script for p in paths)
    assert "--output" in paths[("threads", "list")] and "--version" in paths[()]


def test_bash_completes_commands_and_options_from_the_script(tmp_path):
    script = tmp_path / "treadle.bash"
    script.write_text(completion.bash(build_parser()))

    def complete(*words: str) -> list[str]:
        line = " ".join(f'"{w}"' for w in words)
        run = subprocess.run(
            [
                "bash",
                "-c",
                f'source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _treadle; echo "${{COMPREPLY[@]}}"',
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return run.stdout.split()

    assert complete("treadle", "qu") == ["queue"]
    assert set(complete("treadle", "queue", "")) >= {"list", "reorder", "edit", "cancel"}
    assert "--output" in complete("treadle", "queue", "edit", "--o")
    assert complete("treadle", "runs", "show", "run_1", "--ap") == ["--api"]
