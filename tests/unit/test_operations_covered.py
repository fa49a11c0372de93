"""Every operation of the HTTP API has an SDK method (async and sync, named after its operation id) and a CLI
command: the operations are read from the gateway's app and from schemas/openapi.json, so a new route that the
SDK or the CLI does not cover fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

from treadle.cli.completion import tree
from treadle.cli.main import build_parser
from treadle.cli.operations import COMMANDS
from treadle.client import OPERATIONS, AsyncTreadle, Treadle
from treadle.gateway.app import create_app

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "openapi.json"
RENAMED = {"events": "stream_events"}  # the SSE handler's first name (h-openapi names it stream_events)


def app_operations() -> set[str]:
    names = set()
    for route in create_app().routes:
        if not route.path.startswith("/v1/"):  # health, metrics and the schema's own routes are no operations
            continue
        for handler in getattr(route, "route_handlers", ()):
            if handler.include_in_schema is False or handler.handler_name == "options_handler":
                continue
            name = handler.operation_id if isinstance(handler.operation_id, str) else handler.handler_name
            names.add(RENAMED.get(name, name))
    return names


def schema_operations(known: set[str]) -> set[str]:
    """The document's operation ids, as handler names: as they are, or the handler name that ends a generated
    id (``V1ThreadsThreadIdQueueGetQueue`` → ``get_queue``)."""
    ops = set()
    squashed = {name.replace("_", ""): name for name in known} | {"events": "stream_events"}
    for path in json.loads(SCHEMA.read_text())["paths"].values():
        for op in path.values():
            if isinstance(op, dict) and "operationId" in op:
                op_id = op["operationId"]
                if re.fullmatch(r"[a-z_]+", op_id):
                    ops.add(op_id)
                    continue
                flat = op_id.lower()
                matches = [name for key, name in squashed.items() if flat.endswith(key)]
                ops.add(max(matches, key=len) if matches else op_id)
    return ops


def test_every_operation_of_the_app_and_the_document_has_an_sdk_method_and_a_cli_command():
    operations = app_operations()
    assert len(operations) >= 29
    assert schema_operations(operations) == operations
    assert set(OPERATIONS) == operations
    for client in (AsyncTreadle, Treadle):
        missing = sorted(op for op in operations if not callable(getattr(client, op, None)))
        assert missing == [], f"{client.__name__} lacks {missing}"
    assert set(COMMANDS) == operations
    paths = {" ".join(p) for p in tree(build_parser())}
    assert sorted(cmd for cmd in COMMANDS.values() if cmd not in paths) == []
