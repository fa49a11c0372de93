"""The AsyncAPI document of Treadle's subjects (``schemas/asyncapi.yaml``), generated from the code with a
worked example of every message; and ``schemas/internal.json``, the payloads of the service-to-service
subjects. :mod:`treadle.cli.schemas` writes both with the other schemas.

The document is hand-assembled YAML (JSON strings are valid YAML scalars), so it needs no YAML library
and is byte-for-byte deterministic.
"""

from __future__ import annotations

import json
import types
import typing
from datetime import UTC, datetime
from typing import Any

import msgspec

from treadle.core import events
from treadle.core.commands import Accepted, Command
from treadle.core.provider_events import LiveDelta, ProviderEvent, TextDelta
from treadle.core.thread.commands import SendMessage

from ..checkpoints import protocol as checkpoints
from ..ops.audit import ACTIONS, AuditRecord
from ..providers import protocol as hosts

EXAMPLE_AT = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
TENANT, THREAD = "acme", "thr_01m8xb0000000000000000000"
COMPATIBILITY = (
    f"Every event envelope carries `schema_version` (now {events.SCHEMA_VERSION}). Within one schema version changes are additive "
    "only: new event types, new optional payload fields with defaults, new enum values in free-form string "
    "fields. Nothing is removed, renamed, retyped or made required. Consumers must ignore unknown fields and "
    "unknown event types (Treadle itself folds an unknown type as a no-op). Anything else is a new "
    "schema_version, announced before it is written."
)


# --- examples -----------------------------------------------------------------------------------------


def _id_for(name: str) -> str:
    prefix = name.removesuffix("_id").split("_")[-1]
    short = {
        "thread": "thr",
        "message": "msg",
        "attempt": "att",
        "request": "req",
        "checkpoint": "ckpt",
        "session": "ps",
        "provider_thread": "pth",
        "root_node": "node",
        "parent": "node",
        "turn": "turn",
    }
    key = name.removesuffix("_id")
    return f"{short.get(key, short.get(prefix, prefix))}_01m8xb0000000000000000000"


def _example_value(name: str, tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        return _example_value(name, options[0])
    if origin is typing.Literal:
        return typing.get_args(tp)[0]
    if origin in (list, tuple, set, frozenset):
        (item,) = typing.get_args(tp)[:1] or (str,)
        return [_example_value(name.rstrip("s"), item)]
    if tp is dict or origin is dict:
        return {}
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return example(tp)
    if tp is bool:
        return False
    if tp is int:
        return 1
    if tp is float:
        return 1.0
    if tp is datetime:
        return EXAMPLE_AT.isoformat().replace("+00:00", "Z")
    if name.endswith("_id") or name == "id":
        return _id_for(name)
    return {
        "tenant": TENANT,
        "thread": THREAD,
        "text": "Hello!",
        "provider": "scripted",
        "status": "completed",
        "kind": "tool",
        "mode": "auto",
        "disposition": "started",
        "workspace": f"threads/{THREAD}",
        "commit": "5d41402abc4b2a76b9719d911017c592ae2c7f10",
        "tree": "4b825dc642cb6eb9a060e54bf8d69288fbc4904c",
        "ref": "refs/treadle/checkpoints/root/1",
        "path": "hello.py",
        "title": "Write hello.py",
        "host_id": "host-1",
        "boot_id": "boot-1",
        "native_ref": "native-thread-1",
        "reason": "lost",
        "role": "assistant",
        "created_by": "alice",
        "prompt": "Run `python hello.py` in /srv/workspaces/acme/threads/thr_x",
        "message": "Hello!",
        "user": "alice",
        "scope": "root",
    }.get(name, name)


def _is_struct(tp: Any) -> bool:
    return any(isinstance(a, type) and issubclass(a, msgspec.Struct) for a in (tp, *typing.get_args(tp)))


def example(cls: type[msgspec.Struct], **override: Any) -> dict[str, Any]:
    """A plausible instance of ``cls`` as JSON builtins: defaults where there are any, made-up values else."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for field in msgspec.structs.fields(cls):
        if field.default is None and not _is_struct(hints[field.name]):
            continue  # optional and absent, as on the wire
        if field.default is not msgspec.NODEFAULT and field.default is not None:
            out[field.encode_name] = msgspec.to_builtins(field.default)
        elif field.default_factory is not msgspec.NODEFAULT:
            out[field.encode_name] = msgspec.to_builtins(field.default_factory())
        else:
            out[field.encode_name] = _example_value(field.name, hints[field.name])
    config = cls.__struct_config__
    if config.tag is not None and config.tag_field is not None:  # msgspec gives a tag its field ("type")
        out[config.tag_field] = config.tag
    out.update(override)
    return out


def event_example(type_: str) -> dict[str, Any]:
    payload = events.PAYLOADS[type_]
    return {
        "id": "evt_01m8xb0000000000000000000",
        "type": type_,
        "tenant": TENANT,
        "thread": THREAD,
        "at": EXAMPLE_AT.isoformat().replace("+00:00", "Z"),
        "command_id": "cmd_01m8xb0000000000000000000",
        "actor": "supervisor",
        "schema_version": events.SCHEMA_VERSION,
        "data": example(payload),
    }


def _checked(cls: Any, doc: dict[str, Any]) -> dict[str, Any]:
    """Every example must decode as what it illustrates, so a stale example fails generation."""
    msgspec.convert(doc, cls, strict=False)
    return doc


# --- internal payload schemas ---------------------------------------------------------------------------


def internal_schema() -> dict[str, Any]:
    ref = "#/$defs/{name}"
    kinds = [
        hosts.PlaceSession,
        hosts.StartTurn,
        hosts.SessionPlaced,
        hosts.TurnAccepted,
        hosts.HostFailure,
        hosts.Summarise,
        hosts.Summary,
        hosts.WarmSession,
        checkpoints.PrepareWorkspace,
        checkpoints.WorkspaceReady,
        checkpoints.Capture,
        checkpoints.Captured,
        checkpoints.Failure,
        AuditRecord,
    ]
    _, defs = msgspec.json.schema_components(kinds, ref_template=ref)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Treadle internal subjects",
        "description": "Requests and replies between Treadle's own services (treadle.host.*, treadle.ckpt.*) "
        "and the audit records of treadle.audit.*. Not for tenants: their credentials cannot "
        "reach these subjects.",
        "$defs": defs,
    }


# --- YAML assembly -------------------------------------------------------------------------------------


def _q(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _yaml_value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)  # flow style: JSON is YAML


def _channel(
    name: str, address: str, description: str, params: dict[str, str | tuple[str, list[str]]], messages: list[str]
) -> list[str]:
    out = [f"  {name}:", f"    address: {_q(address)}", f"    description: {_q(description)}"]
    if params:
        out.append("    parameters:")
    for param, spec in params.items():
        text, enum = spec if isinstance(spec, tuple) else (spec, None)
        out += [f"      {param}:", f"        description: {_q(text)}"]
        if enum:
            out.append(f"        enum: [{', '.join(_q(v) for v in enum)}]")
    out.append("    messages:")
    out += [f"      {m}:\n        $ref: {_q('#/components/messages/' + m)}" for m in messages]
    return out


def _message(name: str, title: str, payload_ref: str, example_payload: dict[str, Any], summary: str = "") -> list[str]:
    out = [
        f"    {name}:",
        f"      name: {_q(name)}",
        f"      title: {_q(title)}",
        "      contentType: application/json",
    ]
    if summary:
        out.append(f"      summary: {_q(summary)}")
    out += [
        "      payload:",
        "        schemaFormat: application/schema+json;version=draft-2020-12",
        "        schema:",
        f"          $ref: {_q(payload_ref)}",
        "      examples:",
        f"        - name: {_q(name + 'Example')}",
        f"          payload: {_yaml_value(example_payload)}",
    ]
    return out


def _event_def(type_: str) -> str:
    return events.PAYLOADS[type_].__name__ + "Event"


def asyncapi() -> str:
    tenant = "tenant id ([A-Za-z0-9_-], 1..64)"
    thread = "app thread id (thr_…)"
    types_ = sorted(events.PAYLOADS)
    command = _checked(
        Command,
        {
            "id": "cmd_01m8xb0000000000000000000",
            "tenant": TENANT,
            "user": "alice",
            "thread": THREAD,
            "issued_at": EXAMPLE_AT.isoformat().replace("+00:00", "Z"),
            "body": example(SendMessage, text="Write a hello-world script."),
        },
    )
    provider_event = _checked(ProviderEvent, example(ProviderEvent, index=1, body=example(TextDelta)))
    lines = [
        "# Generated by `make schemas` (python -m treadle.cli.schemas); do not edit.",
        "asyncapi: 3.0.0",
        "info:",
        "  title: Treadle subjects",
        "  version: 1.0.0",
        f"  x-schema-version: {events.SCHEMA_VERSION}",
        "  description: >-",
        '    NATS subjects of Treadle (docs/concepts.md, "Subjects and streams"). Payloads are msgspec JSON;',
        "    their JSON Schemas are the files next to this one.",
        "",
        f"    Versioning: {COMPATIBILITY}",
        "",
        "    Tenant consumers: `treadle consumers create --tenant T [--from-seq N] [--type X]` issues a broker",
        "    credential in a NATS account of its own and creates its durable pull consumer on stream TREADLE_EVENTS",
        "    (named after the credential, filtered on `treadle.evt.T.>` or one event type; `treadle consumers reset`",
        "    repositions it). The credential's account imports only that consumer's MSG.NEXT and INFO (at",
        "    `treadle.js.CONSUMER.<verb>.TREADLE_EVENTS.<credential>`), its acks (`$JS.ACK.TREADLE_EVENTS.<credential>.>`)",
        "    and `treadle.evt.T.>` for live subscription. It creates no consumer (a create body may set a push",
        "    deliver_subject) and publishes nothing else; answers to its requests stay in its own account, whatever",
        "    reply subject it names. `treadle.ops.tenant_events.follow_tenant` and `treadle events tail` use it.",
        "defaultContentType: application/json",
        "channels:",
        *_channel(
            "commands",
            "treadle.cmd.{tenant}.thread.{verb}",
            "Thread commands, request/reply on core NATS (queue group of all coordinator replicas). The "
            "reply is a Reply. "
            "Service credentials only.",
            {"tenant": tenant, "verb": ("the command's verb", ["create", "send"])},
            ["Command", "Reply"],
        ),
        *_channel(
            "events",
            "treadle.evt.{tenant}.{thread}.{aggregate}.{event}",
            "Durable events, stream TREADLE_EVENTS; {aggregate}.{event} is the envelope's type. The broker "
            "stores each with its thread's partition appended (a subject mapping: "
            "treadle.evt.{tenant}.{thread}.{aggregate}.{event}.{partition}), so a filter on one type ends "
            "in `.*`. Tenant consumer credentials may read their tenant's part. Internal: the projector "
            "announces each write of a thread's views on core NATS treadle.projected.{tenant}.{thread} (the body "
            "is the sequence written, ASCII digits); a gateway read waiting for the projection wakes on it.",
            {
                "tenant": tenant,
                "thread": thread,
                "aggregate": ("first token of the event type", sorted({t.split(".")[0] for t in types_})),
                "event": ("second token of the event type", sorted({t.split(".")[1] for t in types_})),
            },
            [_event_def(t) for t in types_],
        ),
        *_channel(
            "live",
            "treadle.live.{tenant}.{thread}",
            "Raw text deltas on core NATS, best effort (durable text arrives as message.delta events).",
            {"tenant": tenant, "thread": thread},
            ["LiveDelta"],
        ),
        *_channel(
            "provider",
            "treadle.prov.{tenant}.{thread}.{providerThread}",
            "Normalised provider events from provider hosts, stream TREADLE_PROVIDER (stored with the "
            "thread's partition appended). The payload's tenant and thread must be the subject's, or the run "
            "supervisor dead-letters it.",
            {"tenant": tenant, "thread": thread, "providerThread": "provider thread id (pth_…)"},
            ["ProviderEvent"],
        ),
        *_channel(
            "hostPlacement",
            "treadle.place.{volume}",
            "Internal: place a provider session, request/reply to the queue group of the provider hosts that "
            "mount the volume and have room.",
            {
                "volume": "workspace volume: the thread's home (its thread.created or thread.moved), served by the node with that TREADLE_VOLUME"
            },
            ["PlaceSession", "HostReply"],
        ),
        *_channel(
            "hostShedding",
            "treadle.shed.{volume}",
            "Internal: place a provider session when no host of the volume has room (L9.3), request/reply to "
            "the queue group of all its hosts: the one asked releases an idle session of the busiest tenant, or "
            "refuses (capacity, tenant_quota) and the run waits. Hosts announce freed room on core NATS "
            "treadle.freed.{volume} (the body is the tenant concerned, or empty).",
            {
                "volume": "workspace volume: the thread's home (its thread.created or thread.moved), served by the node with that TREADLE_VOLUME"
            },
            ["PlaceSession", "HostReply"],
        ),
        *_channel(
            "hostVerbs",
            "treadle.host.{hostId}.{verb}",
            "Internal: requests to one provider host (turn.start, …), request/reply.",
            {"hostId": "provider host id", "verb": "e.g. turn.start"},
            ["StartTurn", "HostReply"],
        ),
        *_channel(
            "hostSummaries",
            "treadle.summarise.{volume}",
            "Internal: a provider-backed handoff summary (L5.5), request/reply to the queue group of every "
            "provider host of the volume.",
            {
                "volume": "workspace volume: the thread's home (its thread.created or thread.moved), served by the node with that TREADLE_VOLUME"
            },
            ["Summarise", "SummaryReply"],
        ),
        *_channel(
            "hostWarming",
            "treadle.warm.{volume}",
            "Internal: a hint, no reply, to the queue group of every provider host of the volume: a new thread's "
            "session is about to be placed; the host may launch its runtime now, and the placement naming the same "
            "session adopts it.",
            {
                "volume": "workspace volume: the thread's home (its thread.created or thread.moved), served by the node with that TREADLE_VOLUME"
            },
            ["WarmSession"],
        ),
        *_channel(
            "checkpoints",
            "treadle.ckpt.{volume}.{verb}",
            "Internal: the checkpoint service of one workspace volume, request/reply.",
            {
                "volume": "workspace volume: the thread's home (its thread.created or thread.moved), served by the node with that TREADLE_VOLUME",
                "verb": ("the request", ["prepare", "capture"]),
            },
            ["PrepareWorkspace", "Capture", "CheckpointReply"],
        ),
        *_channel(
            "audit",
            "treadle.audit.{tenant}.{action}",
            "Audit trail, stream TREADLE_AUDIT: API tokens and broker credentials created and revoked. "
            "Service credentials only. (KV buckets treadle-hosts, -sessions, -volumes, -idempotency and -tokens are "
            "internal state, on $KV.<bucket>.>, and never reachable by tenants.)",
            {"tenant": tenant, "action": ("what happened", list(ACTIONS))},
            ["AuditRecord"],
        ),
        "operations:",
    ]
    ops = [
        ("sendCommand", "send", "commands", ["Command"], "Reply"),
        ("receiveEvents", "receive", "events", [_event_def(t) for t in types_], None),
        ("receiveLiveDeltas", "receive", "live", ["LiveDelta"], None),
        ("receiveProviderEvents", "receive", "provider", ["ProviderEvent"], None),
        ("placeSession", "send", "hostPlacement", ["PlaceSession"], "HostReply"),
        ("placeSessionOnAFullHost", "send", "hostShedding", ["PlaceSession"], "HostReply"),
        ("startTurn", "send", "hostVerbs", ["StartTurn"], "HostReply"),
        ("summarise", "send", "hostSummaries", ["Summarise"], "SummaryReply"),
        ("warmSession", "send", "hostWarming", ["WarmSession"], None),
        ("requestCheckpoint", "send", "checkpoints", ["PrepareWorkspace", "Capture"], "CheckpointReply"),
        ("receiveAudit", "receive", "audit", ["AuditRecord"], None),
    ]
    for name, action, channel, msgs, reply in ops:
        lines += [
            f"  {name}:",
            f"    action: {action}",
            "    channel:",
            f"      $ref: {_q('#/channels/' + channel)}",
            "    messages:",
        ]
        lines += [f"      - $ref: {_q(f'#/channels/{channel}/messages/{m}')}" for m in msgs]
        if reply:
            lines += [
                "    reply:",
                "      address:",
                "        description: the requester's inbox",
                "        location: $message.header#/replyTo",
                "      channel:",
                f"        $ref: {_q('#/channels/' + channel)}",
                "      messages:",
                f"        - $ref: {_q(f'#/channels/{channel}/messages/{reply}')}",
            ]
    lines += ["components:", "  messages:"]
    lines += _message("Command", "Thread command", "commands.json#/$defs/Command", command)
    lines += _message(
        "Reply",
        "Command reply (Accepted or Rejected)",
        "commands.json#/$defs/Reply",
        _checked(
            Accepted,
            example(
                Accepted,
                seq=42,
                message_id="msg_01m8xb0000000000000000000",
                run_id="run_01m8xb0000000000000000000",
                disposition="started",
            ),
        ),
    )
    for t in types_:
        summary = (events.PAYLOADS[t].__doc__ or "").strip().split("\n")[0]
        lines += _message(_event_def(t), t, f"events.json#/$defs/{_event_def(t)}", _event_checked(t), summary)
    lines += _message("LiveDelta", "Live text delta", "events.json#/$defs/LiveDelta", example(LiveDelta))
    lines += _message("ProviderEvent", "Provider event", "provider-events.json#/$defs/ProviderEvent", provider_event)
    lines += _message(
        "PlaceSession", "Place a provider session", "internal.json#/$defs/PlaceSession", example(hosts.PlaceSession)
    )
    lines += _message("StartTurn", "Start a turn", "internal.json#/$defs/StartTurn", example(hosts.StartTurn))
    lines += _message(
        "HostReply",
        "Provider host reply (SessionPlaced, TurnAccepted or HostFailure)",
        "internal.json#/$defs/HostFailure",
        example(hosts.HostFailure, code="capacity", message="no spare capacity"),
    )
    lines += _message(
        "WarmSession",
        "Launch the runtime of a session about to be placed",
        "internal.json#/$defs/WarmSession",
        example(hosts.WarmSession),
    )
    lines += _message(
        "Summarise", "Ask a provider for a handoff summary", "internal.json#/$defs/Summarise", example(hosts.Summarise)
    )
    lines += _message(
        "SummaryReply",
        "Provider host reply (Summary or HostFailure)",
        "internal.json#/$defs/Summary",
        example(hosts.Summary),
    )
    lines += _message(
        "PrepareWorkspace",
        "Prepare a workspace",
        "internal.json#/$defs/PrepareWorkspace",
        example(checkpoints.PrepareWorkspace),
    )
    lines += _message("Capture", "Capture a checkpoint", "internal.json#/$defs/Capture", example(checkpoints.Capture))
    lines += _message(
        "CheckpointReply",
        "Checkpoint service reply (WorkspaceReady, Captured or Failure)",
        "internal.json#/$defs/Failure",
        example(checkpoints.Failure, code="git_error", message="git failed"),
    )
    lines += _message(
        "AuditRecord",
        "Audit record",
        "internal.json#/$defs/AuditRecord",
        example(
            AuditRecord,
            action="token.revoked",
            actor="operator:root",
            target="3f2a9c0d1e4b5a6f",
            details={"user": "alice"},
        ),
    )
    return "\n".join(lines) + "\n"


def _event_checked(type_: str) -> dict[str, Any]:
    doc = event_example(type_)
    decoded = events.decode_event(msgspec.json.encode(doc))
    assert decoded.type == type_ and not isinstance(decoded.data, events.UnknownEvent)
    return doc


__all__ = ["COMPATIBILITY", "asyncapi", "event_example", "example", "internal_schema"]
