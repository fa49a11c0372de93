"""Checkpoint ref names."""

from __future__ import annotations

_REF_PREFIX = "refs/treadle/checkpoints"


def checkpoint_ref(thread: str, scope: str, ordinal: int) -> str:
    return f"{_REF_PREFIX}/{thread}/{scope}/{ordinal}"


def thread_prefix(thread: str) -> str:
    return f"{_REF_PREFIX}/{thread}"
