"""Wire messages of the checkpoint service (`treadle.ckpt.<volume>.<verb>`, core NATS request/reply).

Requests are plain structs (the subject says what they are); replies carry a `type` tag so a client
decodes "the result or a Failure" in one step.
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = [
    "Capture",
    "Captured",
    "CheckpointError",
    "Failure",
    "FileStat",
    "PrepareWorkspace",
    "WorkspaceReady",
    "decode_capture",
    "decode_capture_reply",
    "decode_prepare",
    "decode_prepare_reply",
    "encode",
]

FailureCode = Literal["bad_request", "workspace_missing", "git_error", "internal"]
Change = Literal["added", "modified", "deleted", "renamed"]


class _Message(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    pass


class PrepareWorkspace(_Message, kw_only=True):
    tenant: str
    thread: str
    workspace: str  # relative to the tenant workspace root, e.g. "threads/thr_abc"


class WorkspaceReady(_Message, kw_only=True, tag="workspace_ready", tag_field="type"):
    path: str  # absolute, symlinks resolved
    git: bool  # True: the workspace is (or was made) a git repo; False: Treadle keeps a shadow git dir
    created: bool  # the workspace directory did not exist before


class Capture(_Message, kw_only=True):
    tenant: str
    thread: str
    workspace: str
    scope: str = "root"  # child scopes nest under their parent: "root/node_abc"
    ordinal: int
    status: str = "completed"  # terminal status of the run, or "baseline"
    previous_ordinal: int | None = None
    previous_scope: str | None = None  # where previous_ordinal lives; defaults to `scope` (L10.3)


class FileStat(_Message, kw_only=True):
    path: str
    change: Change
    added: int  # lines; 0 for binary files
    removed: int
    old_path: str | None = None  # set for renames


class Captured(_Message, kw_only=True, tag="captured", tag_field="type"):
    ref: str
    commit: str
    tree: str
    ordinal: int
    scope: str
    status: str
    unchanged: bool  # same tree as the previous checkpoint
    files: list[FileStat] = []  # vs the previous checkpoint; empty without one or when unchanged
    previous_commit: str | None = None  # what `files` is relative to; None when there was none


class Failure(_Message, kw_only=True, tag="failure", tag_field="type"):
    code: FailureCode
    message: str


class CheckpointError(Exception):
    """A request that failed for a reason the caller can act on; maps 1:1 onto `Failure`."""

    def __init__(self, code: FailureCode, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code: FailureCode = code
        self.message = message

    def to_failure(self) -> Failure:
        return Failure(code=self.code, message=self.message)


_encoder = msgspec.json.Encoder()
_prepare = msgspec.json.Decoder(PrepareWorkspace)
_capture = msgspec.json.Decoder(Capture)
_prepare_reply = msgspec.json.Decoder(WorkspaceReady | Failure)
_capture_reply = msgspec.json.Decoder(Captured | Failure)


def encode(obj: msgspec.Struct) -> bytes:
    return _encoder.encode(obj)


def decode_prepare(data: bytes) -> PrepareWorkspace:
    return _prepare.decode(data)


def decode_capture(data: bytes) -> Capture:
    return _capture.decode(data)


def decode_prepare_reply(data: bytes) -> WorkspaceReady | Failure:
    return _prepare_reply.decode(data)


def decode_capture_reply(data: bytes) -> Captured | Failure:
    return _capture_reply.decode(data)
