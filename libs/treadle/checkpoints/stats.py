"""Per-file stats of an incremental capture, computed from the blobs it changed (no `git diff-tree`).

The counts are those of `git diff-tree --numstat`: for text, lines added and removed by a minimal
line diff (git's Myers diff is minimal until its cost cut-off, which a diff of fewer than
:data:`MAX_EDITS` edits never reaches); for binary content (a NUL in the first 8000 bytes, as git
decides) none. What git alone can tell — possible renames (files both added and deleted), type
changes, submodules, large diffs, blobs in packs that are not Treadle's — returns None, and the caller
asks git.
"""

from __future__ import annotations

from collections.abc import Callable

from treadle.checkpoints.protocol import Change, FileStat

MAX_EDITS = 200  # below git's smallest cost cut-off (256)
_SYMLINK, _GITLINK = b"120000", b"160000"

Entry = tuple[bytes, bytes]


def file_stats(
    changes: list[tuple[bytes, Entry | None, Entry | None]],
    blob: Callable[[bytes], bytes | None],
    new_blobs: dict[bytes, tuple[int, bytes]],
) -> list[FileStat] | None:
    """``changes``: (path, before, after) per changed file, sorted by path; ``blob`` reads an old blob."""
    kinds = {b is None for _, b, a in changes if (b is None) != (a is None)}
    if len(kinds) > 1:  # files both added and deleted: git may call some of them renames
        return None
    out = []
    for path, before, after in changes:
        if any(e is not None and (e[0] == _GITLINK) for e in (before, after)):
            return None
        if before is not None and after is not None and (before[0] == _SYMLINK) != (after[0] == _SYMLINK):
            return None  # a type change
        old = _content(before, blob, new_blobs)
        new = _content(after, blob, new_blobs)
        if old is None or new is None:
            return None
        binary = _binary(old) or _binary(new)
        if binary:
            added = removed = 0
        else:
            counted = _line_changes(old, new) if before and after else (_lines(old), _lines(new))
            if counted is None:
                return None
            removed, added = counted
        change: Change = "added" if before is None else "deleted" if after is None else "modified"
        out.append(
            FileStat(path=path.decode("utf-8", "replace"), change=change, added=added, removed=removed, binary=binary)
        )
    return out


def _content(entry: Entry | None, blob: Callable[[bytes], bytes | None], new_blobs) -> bytes | None:
    if entry is None:
        return b""
    made = new_blobs.get(entry[1])
    return made[1] if made is not None else blob(entry[1])


def _binary(data: bytes) -> bool:
    return b"\0" in data[:8000]


def _split(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    else:
        lines[-1] += b"\n"  # a last line without newline differs from the same line with one (no line has "\n")
    return lines


def _lines(data: bytes) -> int:
    return len(_split(data)) if data else 0


def _line_changes(old: bytes, new: bytes) -> tuple[int, int] | None:
    """(removed, added) lines of a minimal line diff, or None past :data:`MAX_EDITS` edits."""
    a, b = _split(old) if old else [], _split(new) if new else []
    start, end_a, end_b = 0, len(a), len(b)
    while start < end_a and start < end_b and a[start] == b[start]:
        start += 1
    while end_a > start and end_b > start and a[end_a - 1] == b[end_b - 1]:
        end_a -= 1
        end_b -= 1
    a, b = a[start:end_a], b[start:end_b]
    n, m = len(a), len(b)
    if not n or not m:
        return n, m
    d = _edit_distance(a, b, MAX_EDITS)
    if d is None:
        return None
    common = (n + m - d) // 2
    return n - common, m - common


def _edit_distance(a: list[bytes], b: list[bytes], limit: int) -> int | None:
    """Myers' greedy O((N+M)·D): the fewest insertions plus deletions turning ``a`` into ``b``."""
    n, m = len(a), len(b)
    offset = limit + 1
    v = [0] * (2 * limit + 3)
    for d in range(limit + 1):
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                x = v[offset + k + 1]
            else:
                x = v[offset + k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            v[offset + k] = x
            if x >= n and y >= m:
                return d
    return None
