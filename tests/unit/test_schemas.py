"""``schemas/`` is generated from the code; this fails when someone changes one without the other."""

from __future__ import annotations

from treadle.cli import schemas


def test_schemas_match_the_code():
    stale = schemas.check()
    assert not stale, f"schemas/ is out of date ({', '.join(stale)}): run `make schemas` and commit the result"


def test_every_event_type_has_a_schema_and_an_asyncapi_message():
    from treadle.domain.events import PAYLOADS

    events = schemas.events_schema()["$defs"]
    document = schemas.asyncapi()
    for type_, payload in PAYLOADS.items():
        assert payload.__name__ in events and f"{payload.__name__}Event" in events
        assert f'title: "{type_}"' in document
