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
    "DiffRequest",
    "DiffResult",
    "Restore",
    "Restored",
    "RefName",
    "Skipped",
    "Prune",
    "Pruned",
]

# Per-file stats in one reply or event are capped: a run that touched 20,000 files must still fit a NATS
# message (1 MiB) and a thread event. The whole list is always available from the diff API.
MAX_FILES = 1000

# store_unavailable: the checkpoint archive (off the node) did not answer; the checkpoint is not durable, so
# the request failed (retrying it sends what the archive lacks).
FailureCode = Literal[
    "bad_request", "workspace_missing", "path_escape", "unknown_commit", "git_error", "internal", "store_unavailable"
]
Change = Literal["added", "modified", "deleted", "renamed"]


class _Message(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    pass


class PrepareWorkspace(_Message, frozen=True, kw_only=True):
    tenant: str
    thread: str
    workspace: str  # relative to the tenant workspace root, e.g. "threads/thr_abc"


class WorkspaceReady(_Message, frozen=True, kw_only=True, tag="workspace_ready", tag_field="type"):
    path: str  # absolute, symlinks resolved
    git: bool  # True: the workspace is (or was made) a git repo; False: Treadle keeps a shadow git dir
    created: bool  # the workspace directory did not exist before


class Capture(_Message, frozen=True, kw_only=True):
    tenant: str
    thread: str
    workspace: str
    scope: str = "root"  # child scopes nest under their parent: "root/node_abc"
    ordinal: int
    status: str = "completed"  # terminal status of the run, or "baseline"
    previous_ordinal: int | None = None
    previous_scope: str | None = None  # where previous_ordinal lives; defaults to `scope` (L10.3)
    # What the caller recorded for the previous checkpoint: used when it has no ref of its own (an
    # unchanged capture writes none) and this process has forgotten it (a restart).
    previous_commit: str | None = None
    previous_tree: str | None = None
    previous_ref: str | None = None
    # The id the caller's event gives this checkpoint (ckpt_…), when known before the capture: the archive
    # then finds it by that id (hydrate.Hydrate.checkpoint_id).
    checkpoint_id: str | None = None


class FileStat(_Message, frozen=True, kw_only=True):
    path: str
    change: Change
    added: int  # lines; 0 for binary files
    removed: int
    old_path: str | None = None  # set for renames
    binary: bool = False


class Skipped(_Message, frozen=True, kw_only=True):
    """A path a checkpoint left alone, and why (a submodule's own files, a file above the size limit)."""

    path: str
    reason: Literal["submodule", "too_large"]
    size: int | None = None


class Captured(_Message, frozen=True, kw_only=True, tag="captured", tag_field="type"):
    ref: str  # the ref holding `commit`: this ordinal's own, or for an unchanged capture the earlier one
    commit: str
    tree: str
    ordinal: int
    scope: str
    status: str
    unchanged: bool  # same tree as the previous checkpoint
    files: list[FileStat] = []  # vs the previous checkpoint; empty without one or when unchanged
    previous_commit: str | None = None  # what `files` is relative to; None when there was none
    skipped: list[Skipped] = []
    files_total: int = 0  # len(files) unless the list was cut at MAX_FILES


class Failure(_Message, frozen=True, kw_only=True, tag="failure", tag_field="type"):
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


class DiffRequest(_Message, frozen=True, kw_only=True):
    """The change from ``from_commit`` (None: the empty tree) to ``to_commit``, both checkpoint commits."""

    tenant: str
    thread: str
    workspace: str
    from_commit: str | None = None
    to_commit: str
    max_bytes: int = 256 * 1024  # the unified diff is cut at this size (``truncated``)
    max_files: int = MAX_FILES


class DiffResult(_Message, frozen=True, kw_only=True, tag="diff", tag_field="type"):
    files: list[FileStat]  # cut at ``max_files`` (files_total says how many there are)
    files_total: int = 0
    patch: str
    truncated: bool
    patch_bytes: int  # the size of the whole diff, also when cut


class RefName(_Message, frozen=True, kw_only=True):
    scope: str
    ordinal: int


class Restore(_Message, frozen=True, kw_only=True):
    """Make the workspace's checkpointed files equal to ``commit`` (L10.5, L10.6).

    Before touching a file the current state is committed under the ``undo`` ref named by
    ``restore_id``, so a rollback can itself be undone; ``retire`` names checkpoints that the
    restore makes stale: they move to ``refs/treadle/checkpoints/<thread>/stale/<restore_id>/…``
    (kept for audit, out of the way of the ordinals that will be captured again)."""

    tenant: str
    thread: str
    workspace: str
    restore_id: str
    commit: str
    retire: list[RefName] = []


class Restored(_Message, frozen=True, kw_only=True, tag="restored", tag_field="type"):
    commit: str
    tree: str
    undo_ref: str
    undo_commit: str
    files: list[FileStat]  # what the restore changed: the state before it vs the checkpoint (cut at MAX_FILES)
    files_total: int = 0
    retired: list[str] = []  # the stale refs the retired checkpoints now live under
    skipped: list[Skipped] = []


class Prune(_Message, frozen=True, kw_only=True):
    """Retention for one workspace's git dir: threads idle longer than ``idle_seconds`` keep only
    their ``keep_latest`` newest root checkpoints (and the child scopes of those)."""

    tenant: str
    workspace: str
    idle_seconds: float
    keep_latest: int
    now: float | None = None  # epoch seconds; the service's clock when omitted


class Pruned(_Message, frozen=True, kw_only=True, tag="pruned", tag_field="type"):
    deleted: list[str]
    kept: int


_encoder = msgspec.json.Encoder()
_prepare = msgspec.json.Decoder(PrepareWorkspace)
_capture = msgspec.json.Decoder(Capture)
_prepare_reply = msgspec.json.Decoder(WorkspaceReady | Failure)
_capture_reply = msgspec.json.Decoder(Captured | Failure)


_diff = msgspec.json.Decoder(DiffRequest)
_restore = msgspec.json.Decoder(Restore)
_prune = msgspec.json.Decoder(Prune)
_diff_reply = msgspec.json.Decoder(DiffResult | Failure)
_restore_reply = msgspec.json.Decoder(Restored | Failure)
_prune_reply = msgspec.json.Decoder(Pruned | Failure)


def decode_diff(data: bytes) -> DiffRequest:
    return _diff.decode(data)


def decode_restore(data: bytes) -> Restore:
    return _restore.decode(data)


def decode_prune(data: bytes) -> Prune:
    return _prune.decode(data)


def decode_diff_reply(data: bytes) -> DiffResult | Failure:
    return _diff_reply.decode(data)


def decode_restore_reply(data: bytes) -> Restored | Failure:
    return _restore_reply.decode(data)


def decode_prune_reply(data: bytes) -> Pruned | Failure:
    return _prune_reply.decode(data)


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
