"""Generate ``schemas/``: JSON Schema of the commands, events, provider events, scripts and views (the documents
the HTTP API serves), the OpenAPI document of the HTTP API (its response shapes are the views) and an AsyncAPI
document of the subjects, all from the code.

``python -m treadle.cli.schemas`` (``make schemas``) writes them; :func:`check` lists the files on disk
that differ, which is what the drift test asserts on. Output is byte-for-byte deterministic.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from treadle.core import commands, events, provider_events, script

ROOT = Path(__file__).resolve().parents[3] / "schemas"
DIALECT = "https://json-schema.org/draft/2020-12/schema"
REF = "#/$defs/{name}"


def _components(types: list[Any], title: str, description: str, root: str | None = None) -> dict[str, Any]:
    _, defs = msgspec.json.schema_components(types, ref_template=REF)
    doc: dict[str, Any] = {"$schema": DIALECT, "title": title, "description": description, "$defs": defs}
    if root:
        doc["$ref"] = REF.format(name=root)
    return doc


def _event_def(type_: str) -> str:
    return events.PAYLOADS[type_].__name__ + "Event"


def events_schema() -> dict[str, Any]:
    from treadle.core.provider_events import LiveDelta

    payloads = [events.PAYLOADS[t] for t in sorted(events.PAYLOADS)]
    doc = _components(
        [events.Envelope, LiveDelta, *payloads],
        "Treadle events",
        "Events of stream TREADLE_EVENTS on treadle.evt.<tenant>.<thread>.<aggregate>.<event>: an "
        "Envelope whose `type` names the payload in `data`. LiveDelta is the payload of the "
        "best-effort subject treadle.live.<tenant>.<thread>.",
    )
    for type_ in sorted(events.PAYLOADS):
        # One envelope per event type, so a consumer (or AsyncAPI) can validate a whole message.
        doc["$defs"][_event_def(type_)] = {
            "allOf": [
                {"$ref": REF.format(name="Envelope")},
                {
                    "type": "object",
                    "properties": {
                        "type": {"const": type_},
                        "data": {"$ref": REF.format(name=events.PAYLOADS[type_].__name__)},
                    },
                },
            ],
            "title": type_,
        }
    doc["oneOf"] = [{"$ref": REF.format(name=_event_def(t))} for t in sorted(events.PAYLOADS)]
    return doc


def commands_schema() -> dict[str, Any]:
    doc = _components(
        [commands.Command, commands.CreateThread, commands.SendMessage, commands.Accepted, commands.Rejected],
        "Treadle commands",
        "Requests on treadle.cmd.<tenant>.thread.<verb> (a Command) and their replies (a Reply).",
        root="Command",
    )
    doc["$defs"]["Reply"] = msgspec.json.schema(commands.Reply, ref_template=REF)
    doc["$defs"]["Reply"].pop("$defs", None)
    return doc


def provider_events_schema() -> dict[str, Any]:
    return _components(
        [provider_events.ProviderEvent],
        "Treadle provider events",
        "Normalised provider events of stream TREADLE_PROVIDER on treadle.prov.<tenant>.<thread>.<provider_thread>.",
        root="ProviderEvent",
    )


def script_schema() -> dict[str, Any]:
    return _components(
        [script.Script],
        "Scripted provider script",
        "The `script` of a message sent to the scripted provider.",
        root="Script",
    )


def views_schema() -> dict[str, Any]:
    from treadle.views import VIEW_VERSION
    from treadle.views.checkpoints import RollbackView
    from treadle.views.lineage import HandoffView, LineageView
    from treadle.views.pages import (
        ActivityPage,
        CheckpointPage,
        HandoffPage,
        MessagePage,
        RequestPage,
        RunPage,
        ThreadPage,
    )
    from treadle.views.runs import QueueView
    from treadle.views.thread import RunView, ThreadView

    pages = [ThreadPage, RunPage, MessagePage, ActivityPage, RequestPage, CheckpointPage, HandoffPage]
    return _components(
        [ThreadView, RunView, QueueView, HandoffView, LineageView, RollbackView, *pages],
        "Treadle views",
        f"The documents the HTTP API serves (view version {VIEW_VERSION}): the thread, a run with its attempts "
        "and nodes, the queue, a handoff, the lineage tree, a rollback, and a page of each list (items, "
        "next_cursor, seq).",
    )


def _internal() -> dict[str, Any]:
    from .asyncapi import internal_schema

    return internal_schema()


def openapi_schema() -> dict[str, Any]:
    from treadle.gateway.app import create_app
    from treadle.gateway.openapi import document

    return document(create_app())


def mcp_tools_schema() -> dict[str, Any]:
    from treadle.gateway.mcp.tools import tool_schemas

    return tool_schemas()


# --- AsyncAPI (and the internal subjects' payloads): treadle.cli.asyncapi ---------------------------------


def asyncapi() -> str:
    from .asyncapi import asyncapi as document

    return document()


# --- files --------------------------------------------------------------------------------------------


def _json(doc: dict[str, Any]) -> str:
    return json.dumps(msgspec.to_builtins(doc), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render() -> dict[str, str]:
    """Every generated file's name and content."""
    return {
        "events.json": _json(events_schema()),
        "commands.json": _json(commands_schema()),
        "provider-events.json": _json(provider_events_schema()),
        "script.json": _json(script_schema()),
        "views.json": _json(views_schema()),
        "openapi.json": _json(openapi_schema()),
        "mcp-tools.json": _json(mcp_tools_schema()),
        "asyncapi.yaml": asyncapi(),
        "internal.json": _json(_internal()),
    }


def write(root: Path = ROOT) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in render().items():
        path = root / name
        if not path.exists() or path.read_text() != content:
            path.write_text(content)
            written.append(path)
    return written


def check(root: Path = ROOT) -> list[str]:
    """Names of the generated files that are missing from ``root`` or differ from what the code generates."""
    return [
        name for name, content in render().items() if not (root / name).exists() or (root / name).read_text() != content
    ]


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args == ["--check"]:
        stale = check()
        for name in stale:
            print(f"schemas/{name} is out of date", file=sys.stderr)
        return 1 if stale else 0
    written = write()
    print(f"{len(written)} of {len(render())} files in {ROOT} updated" if written else f"{ROOT} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
