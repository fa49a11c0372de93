"""Backups of a deployment's durable state, and their restore: JetStream's own stream snapshots.

Everything durable lives in JetStream: the event log (``TREADLE_EVENTS``), the provider events, the audit and
dead-letter streams, the KV buckets (streams ``KV_<bucket>``: tokens, policies, keys, sessions, …) and the
checkpoint Object Store (``OBJ_treadle-checkpoints``). A backup is one snapshot per stream, as the server makes
it (``$JS.API.STREAM.SNAPSHOT``: its messages with their sequences, its configuration, and its durable
consumers with their positions), written to ``<name>.snapshot`` beside a ``manifest.json``; a restore hands
each back to an empty broker (``$JS.API.STREAM.RESTORE``), so the log keeps every sequence (clients' cursors,
the appends' fences) and the workers resume where their consumers were. Redis needs none: the projector
rebuilds it from the log.

Left out: what only says which processes are alive now (host and volume heartbeats, partition leases); a
restored deployment's own workers write them anew. The event log is snapshotted first and the Object Store
last: each stream's snapshot is consistent by itself, and an event refers only to checkpoints stored before it
was appended, so a backup of a running deployment never holds an event whose checkpoint it lacks."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from treadle.eventlog.streams import CHECKPOINTS_BUCKET
from treadle.eventlog.subjects import EVENTS_STREAM

FORMAT = 1
MANIFEST = "manifest.json"
LIVENESS = frozenset({"KV_treadle-hosts", "KV_treadle-volumes", "KV_treadle-leases"})
FIRST, LAST = EVENTS_STREAM, f"OBJ_{CHECKPOINTS_BUCKET}"
CHUNK = 128 * 1024
_NAME = re.compile(r"[A-Za-z0-9_-]{1,255}")  # a stream name JetStream accepts, and a safe file name


class BackupError(Exception):
    """A backup or restore that cannot be made as asked; what it was given is left as it was."""


@dataclass
class Copied:
    stream: str
    bytes: int
    messages: int
    seconds: float


def order(names: list[str]) -> list[str]:
    """The streams to copy, the event log first and the checkpoint objects last (see the module's docstring)."""
    kept = sorted(n for n in names if n not in LIVENESS)
    return sorted(kept, key=lambda n: (n != FIRST, n == LAST))


async def _api(nc: NATS, subject: str, body: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
    msg = await nc.request(subject, json.dumps(body).encode(), timeout=timeout)
    answer: dict[str, Any] = json.loads(msg.data or b"{}")
    if error := answer.get("error"):
        raise BackupError(f"{subject}: {error.get('description', error)}")
    return answer


async def stream_names(nc: NATS) -> list[str]:
    names: list[str] = []
    while True:
        page = await _api(nc, "$JS.API.STREAM.NAMES", {"offset": len(names)})
        names += page.get("streams") or []
        if not page.get("streams") or len(names) >= page.get("total", 0):
            return names


async def backup(nc: NATS, directory: Path) -> list[Copied]:
    """Snapshot every stream but the liveness buckets into ``directory`` (new, or empty)."""
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BackupError(f"{directory} is not an empty directory: a backup never overwrites one")
    directory.mkdir(parents=True, exist_ok=True)
    names = order(await stream_names(nc))
    if FIRST not in names:
        raise BackupError(f"this broker has no {FIRST} stream: is Treadle running on it?")
    copied, entries = [], []
    for name in names:
        started = time.perf_counter()
        path = directory / f"{name}.snapshot"
        meta, size, digest = await _snapshot(nc, name, path)
        state = meta.get("state") or {}
        copied.append(Copied(name, size, int(state.get("messages", 0)), time.perf_counter() - started))
        entries.append({"stream": name, "file": path.name, "bytes": size, "sha256": digest, **meta})
    manifest = {"format": FORMAT, "created": time.time(), "streams": entries}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return copied


async def _snapshot(nc: NATS, stream: str, path: Path) -> tuple[dict[str, Any], int, str]:
    chunks: asyncio.Queue[Msg] = asyncio.Queue()

    async def on_chunk(msg: Msg) -> None:
        await chunks.put(msg)

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=on_chunk)
    size, digest = 0, hashlib.sha256()
    try:
        meta = await _api(
            nc, f"$JS.API.STREAM.SNAPSHOT.{stream}", {"deliver_subject": inbox, "chunk_size": CHUNK, "jsck": False}
        )
        with path.open("wb") as out:
            while True:
                msg = await asyncio.wait_for(chunks.get(), timeout=60)
                status = (msg.headers or {}).get("Status", "")
                if status not in ("", "204"):  # the server gave up on the snapshot
                    detail = (msg.headers or {}).get("Description", "")
                    raise BackupError(f"snapshot of {stream} failed: {status} {detail}".rstrip())
                if not msg.data:  # the end (status 204, or none from older servers)
                    break
                out.write(msg.data)
                size += len(msg.data)
                digest.update(msg.data)
                if msg.reply:  # the server's flow control waits for these
                    await nc.publish(msg.reply, b"")
    finally:
        await sub.unsubscribe()
    return {"config": meta.get("config"), "state": meta.get("state")}, size, digest.hexdigest()


def read_manifest(directory: Path) -> list[dict[str, Any]]:
    """The streams of a backup, each file checked against its recorded size and hash (BackupError if not)."""
    try:
        manifest = json.loads((Path(directory) / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{directory} holds no readable {MANIFEST}: {exc}") from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("streams"), list)
    ):
        raise BackupError(f"{directory}/{MANIFEST} is not a Treadle backup of format {FORMAT}")
    entries: list[dict[str, Any]] = manifest["streams"]
    for entry in entries:
        name = entry.get("stream") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not _NAME.fullmatch(name) or entry.get("file") != f"{name}.snapshot":
            raise BackupError(f"{directory}/{MANIFEST} names a stream or file that is not one: {str(entry)[:80]}")
        data = (Path(directory) / entry["file"]).read_bytes()
        if len(data) != entry.get("bytes") or hashlib.sha256(data).hexdigest() != entry.get("sha256"):
            raise BackupError(f"{entry['file']} does not match the manifest: the backup is damaged")
    return entries


async def restore(nc: NATS, directory: Path) -> list[Copied]:
    """Hand every stream of the backup in ``directory`` back to the broker, which must have none of them (a
    restore never merges into or replaces what is there: restore into a new deployment before its workers
    start). Checked whole before anything is sent."""
    entries = read_manifest(directory)
    present = set(await stream_names(nc)) & {e["stream"] for e in entries}
    if present:
        raise BackupError(f"the broker already has {', '.join(sorted(present))}: restore into an empty one")
    copied = []
    for entry in entries:
        started = time.perf_counter()
        await _restore(nc, entry, Path(directory) / entry["file"])
        messages = int((entry.get("state") or {}).get("messages", 0))
        copied.append(Copied(entry["stream"], entry["bytes"], messages, time.perf_counter() - started))
    return copied


async def _restore(nc: NATS, entry: dict[str, Any], path: Path) -> None:
    name = entry["stream"]
    answer = await _api(nc, f"$JS.API.STREAM.RESTORE.{name}", {"config": entry["config"], "state": entry["state"]})
    deliver = answer.get("deliver_subject")
    if not deliver:
        raise BackupError(f"the broker gave no subject to restore {name} to")
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            await nc.request(deliver, chunk, timeout=30)
    done = await nc.request(deliver, b"", timeout=120)  # the end: the server restores and answers
    result = json.loads(done.data or b"{}")
    if error := result.get("error"):
        raise BackupError(f"restore of {name} failed: {error.get('description', error)}")
