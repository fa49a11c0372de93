"""Per-file change stats from `git diff-tree`."""

from __future__ import annotations

from treadle.checkpoints.protocol import Change, FileStat

_CHANGES: dict[bytes, Change] = {b"A": "added", b"D": "deleted", b"R": "renamed", b"C": "added"}


def parse_diff(out: bytes) -> list[FileStat]:
    """`diff-tree -z --raw --numstat`: all raw records, then all numstat records, same order."""
    tokens = out.split(b"\0")
    i = 0
    raw: list[tuple[bytes, bytes | None, bytes]] = []  # (kind, old path of a rename or copy, path)
    while i < len(tokens) and tokens[i].startswith(b":"):
        kind = tokens[i].rsplit(b" ", 1)[1][:1]
        if kind in (b"R", b"C"):
            raw.append((kind, tokens[i + 1], tokens[i + 2]))
            i += 3
        else:
            raw.append((kind, None, tokens[i + 1]))
            i += 2
    counts: dict[bytes, tuple[int, int]] = {}
    binary: set[bytes] = set()
    while i < len(tokens) and tokens[i]:
        added, removed, path = tokens[i].split(b"\t", 2)
        if path:
            i += 1
        else:  # rename: source and destination follow as their own fields
            path = tokens[i + 2]
            i += 3
        counts[path] = (_count(added), _count(removed))
        if added == b"-":
            binary.add(path)
    return [
        FileStat(
            path=_text(new),
            change=_CHANGES.get(kind, "modified"),  # M, and T (type change)
            added=counts.get(new, (0, 0))[0],
            removed=counts.get(new, (0, 0))[1],
            old_path=_text(old) if old is not None else None,
            binary=new in binary,
        )
        for kind, old, new in raw
    ]


def _count(field: bytes) -> int:
    return 0 if field == b"-" else int(field)  # "-": binary


def _text(path: bytes) -> str:
    return path.decode("utf-8", "replace")
