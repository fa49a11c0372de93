"""Per-file stats of an incremental capture, computed from the blobs it changed (no `git diff-tree`).

The counts are those of `git diff-tree --numstat`: for text, lines added and removed by a minimal
line diff of the lines xdiff keeps (see :func:`_kept`; git's Myers diff is minimal until its cost
cut-off, which a diff of fewer than :data:`MAX_EDITS` edits never reaches); for binary content (a NUL in the first 8000 bytes, as git
decides) none. What git alone can tell — possible renames (files both added and deleted), type
changes, submodules, large diffs, blobs in packs that are not Treadle's — returns None, and the caller
asks git.
"""

from __future__ import annotations

from collections import Counter
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


def _content(
    entry: Entry | None, blob: Callable[[bytes], bytes | None], new_blobs: dict[bytes, tuple[int, bytes]]
) -> bytes | None:
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
    """(removed, added) lines of git's line diff, or None past :data:`MAX_EDITS` edits."""
    a, b = _split(old) if old else [], _split(new) if new else []
    start, end_a, end_b = 0, len(a), len(b)
    while start < end_a and start < end_b and a[start] == b[start]:
        start += 1
    while end_a > start and end_b > start and a[end_a - 1] == b[end_b - 1]:
        end_a -= 1
        end_b -= 1
    n, m = end_a - start, end_b - start
    if not n or not m:
        return n, m
    kept_a, kept_b = _kept(a, b, start, end_a), _kept(b, a, start, end_b)
    d = _edit_distance(kept_a, kept_b, MAX_EDITS)
    if d is None:
        return None
    common = (len(kept_a) + len(kept_b) - d) // 2
    return n - common, m - common


def _kept(lines: list[bytes], other: list[bytes], start: int, end: int) -> list[bytes]:
    """The lines of ``lines[start:end]`` git's diff matches at all: before its Myers pass, xdiff
    (xdl_cleanup_records) drops every line the other file lacks, and a line the other file has many
    times when it sits in a run of such dropped lines; those count as changed even where a minimal diff
    would keep them (4 equal lines, 2 of them still in the new file: git counts 4 removed, not 2)."""
    counts = Counter(other)
    limit = min(_bogosqrt(len(lines)), 1024)  # XDL_MAX_EQLIMIT
    dis = {i: 0 if not (c := counts.get(lines[i], 0)) else 2 if c >= limit else 1 for i in range(start, end)}
    return [
        lines[i] for i in range(start, end) if dis[i] == 1 or (dis[i] == 2 and not _dropped(dis, i, start, end - 1))
    ]


def _bogosqrt(n: int) -> int:
    i = 1
    while n > 0:
        i <<= 1
        n >>= 2
    return i


def _dropped(dis: dict[int, int], i: int, s: int, e: int) -> bool:
    """xdl_clean_mmatch: is the many-times-matched line ``i`` in a run mostly of lines without a match?"""
    s, e = max(s, i - 100), min(e, i + 100)  # XDL_SIMSCAN_WINDOW
    before, multi_before = 0, 1
    r = 1
    while i - r >= s and dis[i - r] != 1:
        if dis[i - r] == 0:
            before += 1
        else:
            multi_before += 1
        r += 1
    if not before:
        return False
    after, multi_after = 0, 1
    r = 1
    while i + r <= e and dis[i + r] != 1:
        if dis[i + r] == 0:
            after += 1
        else:
            multi_after += 1
        r += 1
    if not after:
        return False
    multi = multi_before + multi_after
    return multi * 4 < multi + before + after  # XDL_KPDIS_RUN


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
