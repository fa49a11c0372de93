"""``schemas/`` is generated from the code; this fails when someone changes one without the other."""

from __future__ import annotations

from treadle.cli import schemas


def test_schemas_match_the_code():
    stale = schemas.check()
    assert not stale, f"schemas/ is out of date ({', '.join(stale)}): run `make schemas` and commit the result"


def test_every_event_type_has_a_schema_and_an_asyncapi_message():
    from treadle.core.envelope import PAYLOADS

    events = schemas.events_schema()["$defs"]
    document = schemas.asyncapi()
    for type_, payload in PAYLOADS.items():
        assert payload.__name__ in events and f"{payload.__name__}Event" in events
        assert f'title: "{type_}"' in document


def test_asyncapi_names_every_subject_the_code_uses_with_an_example_of_every_message():
    import json
    import re

    import yaml

    from treadle.core.envelope import PAYLOADS, SCHEMA_VERSION
    from treadle.core.events import decode_event
    from treadle.eventlog import subjects
    from treadle.ops import audit

    document = yaml.safe_load(schemas.asyncapi())
    assert document["info"]["x-schema-version"] == SCHEMA_VERSION

    # A parameter is one subject token, except {verb} and {action}, which may be dotted (turn.start).
    def pattern(address: str) -> re.Pattern:
        tokens = [
            r"[^.]+(\.[^.]+)*" if t in ("{verb}", "{action}") else "[^.]+" if t.startswith("{") else re.escape(t)
            for t in address.split(".")
        ]
        return re.compile(r"\.".join(tokens) + "$")

    patterns = [pattern(c["address"]) for c in document["channels"].values()]
    used = [
        subjects.command("acme", "send"),
        subjects.event("acme", "thr_1", "run.completed"),
        subjects.live("acme", "thr_1"),
        subjects.provider("acme", "thr_1", "pth_1"),
        subjects.host_place("local"),
        subjects.host_shed("local"),
        subjects.host("host-1", "turn.start"),
        subjects.checkpoint("local", "capture"),
        audit.subject("acme", "token.revoked"),
    ]
    for subject in used:
        assert any(p.match(subject) for p in patterns), f"{subject} is in no AsyncAPI channel"
    messages = document["components"]["messages"]
    assert all(message["examples"] for message in messages.values())
    for type_, payload in PAYLOADS.items():
        example = messages[f"{payload.__name__}Event"]["examples"][0]["payload"]
        event = decode_event(json.dumps(example).encode())
        assert event.type == type_ and event.schema_version == SCHEMA_VERSION


def test_an_event_written_before_schema_version_existed_still_decodes_as_version_1():
    from treadle.core.events import decode_event

    old = (
        b'{"id":"evt_1","type":"run.dispatched","tenant":"acme","thread":"thr_1","at":"2026-12-01T00:00:00Z",'
        b'"command_id":"cmd_1","actor":"coordinator","data":{"run_id":"run_1"}}'
    )
    assert decode_event(old).schema_version == 1
