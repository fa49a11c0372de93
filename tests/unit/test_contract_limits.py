"""The contract's limits are declared once, as constraints of its field types (``treadle.api.limits``): each
request field is accepted at its limit and refused one over with its own typed code, naming the field and the
limit; a value outside a ``Literal`` is refused with the field's code and the allowed values; the core's
commands carry the same types, so ``check_sizes`` refuses alike; and every constraint carries a code."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from msgspec import inspect as mi

from treadle import api
from treadle.api import limits as lim
from treadle.api.constraints import violation
from treadle.core import commands
from treadle.core.errors import BadRequest
from treadle.core.limits import check_sizes
from treadle.usecases.arguments import parse

RUN = "run_" + "0" * 26
WORST = "\x01"  # one character, six bytes of JSON
FORK = {"source": {"type": "run", "id": RUN}}

# (case, request type, body at the limit, (path, value one over), code)
CASES: list[tuple[str, type, dict[str, Any], tuple[str, Any], str]] = [
    ("create.title", api.CreateThreadRequest, {"title": "t" * lim.MAX_TITLE_CHARS}, ("title", "t"), "invalid_title"),
    ("create.provider", api.CreateThreadRequest, {"provider": "p" * lim.MAX_NAME_CHARS}, ("provider", "p"), "invalid_provider"),
    ("create.model", api.CreateThreadRequest, {"model": "m" * lim.MAX_MODEL_CHARS}, ("model", "m"), "invalid_model"),
    ("create.workspace", api.CreateThreadRequest, {"workspace": "w" * lim.MAX_WORKSPACE_CHARS}, ("workspace", "w"), "invalid_workspace"),
    ("send.text", api.SendMessageRequest, {"text": WORST * lim.MAX_TEXT_CHARS}, ("text", "x"), "text_too_long"),
    ("send.provider", api.SendMessageRequest, {"text": "x", "provider": "p" * lim.MAX_NAME_CHARS}, ("provider", "p"), "invalid_provider"),
    ("send.model", api.SendMessageRequest, {"text": "x", "model": "m" * lim.MAX_MODEL_CHARS}, ("model", "m"), "invalid_model"),
    ("send.target_run_id", api.SendMessageRequest, {"text": "x", "target_run_id": "r" * lim.MAX_NAME_CHARS}, ("target_run_id", "r"), "invalid_id"),
    ("send.merge_back_from", api.SendMessageRequest, {"text": "x", "merge_back_from": "t" * lim.MAX_NAME_CHARS}, ("merge_back_from", "t"), "invalid_id"),
    ("edit.text", api.EditBody, {"text": "e" * lim.MAX_TEXT_CHARS}, ("text", "e"), "text_too_long"),
    ("reorder.order", api.ReorderBody, {"order": [RUN] * lim.MAX_QUEUE_ORDER}, ("order", [RUN]), "invalid_order"),
    ("respond.message", api.RespondBody, {"message": "m" * lim.MAX_ANSWER_CHARS}, ("message", "m"), "invalid_response"),
    ("respond.answers", api.RespondBody, {"answers": {str(i): "" for i in range(lim.MAX_ANSWERS)}}, ("answers", {"x": ""}), "invalid_response"),
    ("fork.title", api.ForkBody, {**FORK, "title": "t" * lim.MAX_TITLE_CHARS}, ("title", "t"), "invalid_title"),
]  # fmt: skip


def _over(body: dict[str, Any], path: str, more: Any) -> dict[str, Any]:
    value = body[path]
    grown = value + more if not isinstance(value, dict) else {**value, **more}
    return {**body, path: grown}


@pytest.mark.parametrize("case,kind,at_limit,over,code", CASES, ids=[c[0] for c in CASES])
def test_each_request_field_is_accepted_at_its_limit_and_refused_one_over(case, kind, at_limit, over, code):
    parse(kind, at_limit)
    raw = msgspec.json.encode(_over(at_limit, *over))
    with pytest.raises(msgspec.ValidationError) as refused:
        msgspec.json.decode(raw, type=kind)  # as the gateway decodes a body
    found = violation(refused.value, kind)
    assert found is not None and found.code == code
    assert found.details["field"] == over[0] and found.details["limit"] == len(at_limit[over[0]])
    with pytest.raises(BadRequest) as typed:  # as the MCP tools build one from their arguments
        parse(kind, _over(at_limit, *over))
    assert (typed.value.code, typed.value.details) == (code, found.details)


@pytest.mark.parametrize(
    "kind,body,code,field",
    [
        (api.SendMessageRequest, {"text": "x", "mode": "sideways"}, "invalid_mode", "mode"),
        (api.SendMessageRequest, {"text": "x", "mode": "m" * 900_000}, "invalid_mode", "mode"),
        (api.CreateThreadRequest, {"runtime_mode": "yolo"}, "invalid_runtime_mode", "runtime_mode"),
        (api.RespondBody, {"decision": "maybe"}, "invalid_response", "decision"),
        (api.ReorderBody, {"order": ["r" * (lim.MAX_NAME_CHARS + 1)]}, "invalid_id", "order"),
        (api.ForkBody, {"source": {"type": "run", "id": "r" * (lim.MAX_NAME_CHARS + 1)}}, "invalid_id", "source.id"),
        (
            api.ForkBody,
            {"source": {"type": "provider_thread", "id": RUN, "turn": "t" * (lim.MAX_TURN_REF_CHARS + 1)}},
            "invalid_id",
            "source.turn",
        ),
    ],
)
def test_choices_items_and_nested_fields_are_refused_with_their_own_code(kind, body, code, field):
    with pytest.raises(BadRequest) as refused:
        parse(kind, body)
    assert (refused.value.code, refused.value.details["field"]) == (code, field)
    assert len(refused.value.message) < 200  # never the refused value itself


@pytest.mark.parametrize(
    "kind,body",
    [
        (api.SendMessageRequest, {"text": 5}),
        (api.SendMessageRequest, {"text": "x", "extra": 1}),
        (api.SendMessageRequest, {}),
        (api.ForkBody, {"source": {"type": "branch", "id": RUN}}),
    ],
)
def test_what_no_constraint_says_stays_a_plain_bad_request(kind, body):
    with pytest.raises(msgspec.ValidationError) as refused:
        msgspec.convert(body, kind)
    assert violation(refused.value, kind) is None
    with pytest.raises(BadRequest) as plain:
        parse(kind, body)
    assert plain.value.code == "bad_request"


def test_the_commands_carry_the_same_limits_as_the_requests():
    request = parse(api.SendMessageRequest, {"text": "x"})
    body = commands.SendMessage(**{**msgspec.structs.asdict(request), "text": "x" * (lim.MAX_TEXT_CHARS + 1)})
    with pytest.raises(BadRequest) as refused:
        check_sizes(body)
    assert refused.value.code == "text_too_long" and refused.value.details["limit"] == lim.MAX_TEXT_CHARS


def _constraints(info: mi.Type, seen: set[type]) -> list[mi.Metadata]:
    """Every constrained type under ``info`` (through structs, unions, lists, dicts)."""
    found: list[mi.Metadata] = []
    if isinstance(info, mi.Metadata):
        if isinstance(info.type, (mi.StrType, mi.ListType, mi.DictType)) and info.type.max_length is not None:
            found.append(info)
        return found + _constraints(info.type, seen)
    if isinstance(info, mi.StructType) and info.cls not in seen:
        seen.add(info.cls)
        return [m for f in info.fields for m in _constraints(f.type, seen)]
    if isinstance(info, mi.UnionType):
        return [m for t in info.types for m in _constraints(t, seen)]
    if isinstance(info, (mi.ListType, mi.DictType)):
        inner = info.value_type if isinstance(info, mi.DictType) else info.item_type
        return _constraints(inner, seen)
    return found


@pytest.mark.parametrize(
    "kind",
    [
        api.CreateThreadRequest,
        api.SendMessageRequest,
        api.EditBody,
        api.ReorderBody,
        api.RespondBody,
        api.ForkBody,
        api.NodeRollbackRequest,
        commands.Command,
    ],
)
def test_every_limit_carries_the_code_it_is_refused_with(kind):
    found = _constraints(mi.type_info(kind), set())
    assert found, kind
    assert all((m.extra or {}).get("code") for m in found), [m for m in found if not (m.extra or {}).get("code")]
