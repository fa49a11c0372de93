"""The last checkpoint tree of a worktree, directory by directory, as git writes trees.

It stands in for the private index between two captures of a watched worktree: changing a few
paths re-hashes only the directories above them (git's cache-tree does the same), and the new
trees are returned as objects to write. Entries are ordered as git orders them (a directory sorts
as if its name ended in "/"), so the ids are exactly those `write-tree` would give.
"""

from __future__ import annotations

from collections.abc import Iterator

from treadle.checkpoints.packs import TREE, object_id

DIR, GITLINK = b"40000", b"160000"

Entry = tuple[bytes, bytes]  # (mode as in a tree object, raw object id)


def _split(path: bytes) -> tuple[bytes, bytes]:
    head, _, name = path.rpartition(b"/")
    return head, name


def _key(name: bytes, mode: bytes) -> bytes:
    return name + b"/" if mode == DIR else name


class Trees:
    def __init__(self, root: str, dirs: dict[bytes, dict[bytes, Entry]]) -> None:
        self.root = root  # hex id of the tree these entries make
        self._dirs = dirs  # b"" is the top; b"a/b" its directory a/b
        # Each directory's entries as tree records, by sort key: a tree is then one sort of plain bytes keys.
        self._records = {
            d: {_key(n, m): m + b" " + n + b"\0" + o for n, (m, o) in es.items()} for d, es in dirs.items()
        }
        self._dirty: set[bytes] = set()
        self.journal: dict[bytes, Entry | None] = {}  # file -> its entry before the first change since cleared
        self.gitlinks = {
            (d + b"/" + n if d else n) for d, es in dirs.items() for n, (m, _) in es.items() if m == GITLINK
        }

    @classmethod
    def parse(cls, root: str, ls_tree: bytes) -> Trees:
        """From `git ls-tree -r -t -z --full-tree <root>`: "<mode> <type> <hex>\\t<path>" records."""
        dirs: dict[bytes, dict[bytes, Entry]] = {b"": {}}
        for record in ls_tree.split(b"\0"):
            if not record:
                continue
            meta, _, path = record.partition(b"\t")
            mode, _, rest = meta.partition(b" ")
            hexid = rest.partition(b" ")[2]
            mode = DIR if mode == b"040000" else mode
            head, name = _split(path)
            dirs.setdefault(head, {})[name] = (mode, bytes.fromhex(hexid.decode()))
            if mode == DIR:
                dirs.setdefault(path, {})
        return cls(root, dirs)

    def get(self, path: bytes) -> Entry | None:
        head, name = _split(path)
        entries = self._dirs.get(head)
        return entries.get(name) if entries is not None else None

    def names(self) -> Iterator[bytes]:
        for entries in self._dirs.values():
            yield from entries

    def files_under(self, path: bytes) -> list[bytes]:
        prefix = path + b"/"
        return [
            (d + b"/" + n if d else n)
            for d, es in self._dirs.items()
            if d == path or d.startswith(prefix)
            for n, (m, _) in es.items()
            if m != DIR
        ]

    def in_gitlink(self, path: bytes) -> bool:
        """Is ``path`` a submodule, or inside one (whose files git never captures)?"""
        return any(path == g or path.startswith(g + b"/") for g in self.gitlinks)

    def set(self, path: bytes, mode: bytes, oid: bytes) -> None:
        if self.get(path) == (mode, oid):
            return
        if path in self._dirs:  # a directory became a file
            self.remove(path)
        head, name = _split(path)
        self._ensure_dir(head)
        self._put(head, name, mode, oid)
        self._touch(head)

    def remove(self, path: bytes) -> None:
        """Remove a file or a whole directory (and directories left empty above it: git stores none)."""
        head, name = _split(path)
        entries = self._dirs.get(head)
        if entries is None or name not in entries:
            return
        if entries[name][0] == DIR:
            for f in self.files_under(path):
                self.journal.setdefault(f, self.get(f))
        else:
            self.journal.setdefault(path, entries[name])
        mode = entries.pop(name)[0]
        del self._records[head][_key(name, mode)]
        if mode == DIR:
            prefix = path + b"/"
            for d in [d for d in self._dirs if d == path or d.startswith(prefix)]:
                del self._dirs[d]
                del self._records[d]
                self._dirty.discard(d)
        self.gitlinks.discard(path)
        self._touch(head)
        if not entries and head:
            self.remove(head)

    def _put(self, head: bytes, name: bytes, mode: bytes, oid: bytes) -> None:
        old = self._dirs[head].get(name)
        if mode != DIR:
            self.journal.setdefault(head + b"/" + name if head else name, old)
        if old is not None and old[0] != mode:
            del self._records[head][_key(name, old[0])]
        self._dirs[head][name] = (mode, oid)
        self._records[head][_key(name, mode)] = mode + b" " + name + b"\0" + oid

    def _ensure_dir(self, path: bytes) -> None:
        if path in self._dirs:
            return
        head, name = _split(path)
        self._ensure_dir(head)
        if name in self._dirs[head]:  # a file became a directory
            self.remove(path)
            self._ensure_dir(head)  # removing the file may have removed its (now empty) parents
        self._dirs[path], self._records[path] = {}, {}
        self._put(head, name, DIR, b"\0" * 20)  # id filled in by write()

    def _touch(self, path: bytes) -> None:
        while path not in self._dirty:
            self._dirty.add(path)
            if not path:
                return
            path = _split(path)[0]

    def changes(self) -> list[tuple[bytes, Entry | None, Entry | None]]:
        """(path, before, now) of every file changed since the journal was last cleared, in git's order."""
        out = []
        for path, before in self.journal.items():
            now = self.get(path)
            now = None if now is not None and now[0] == DIR else now
            if now != before:
                out.append((path, before, now))
        return sorted(out)

    def write(self, out: dict[bytes, tuple[int, bytes]]) -> str:
        """Re-hash the directories changed since the last write (deepest first); new trees go to ``out``."""
        for path in sorted(self._dirty, key=lambda p: -p.count(b"/") - (1 if p else 0)):
            records = self._records.get(path)
            if records is None:
                continue
            body = b"".join([records[k] for k in sorted(records)])
            oid = object_id(TREE, body)
            out[oid] = (TREE, body)
            if path:
                head, name = _split(path)
                self._put(head, name, DIR, oid)
            else:
                self.root = oid.hex()
        self._dirty.clear()
        return self.root
