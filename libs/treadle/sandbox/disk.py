"""What a tenant's directories hold on disk, measured by a bounded walk (see ``treadle.core.disk``).

Allocated blocks (``st_blocks``), not sizes: a sparse file counts what it really takes, a dense one all of it.
Every entry counts as a file (an inode each, which a tenant making millions of empty files would exhaust), and
the walk stops once it has counted more entries than ``max_files``: its cost is bounded by the budget, not by
what the tenant made. A file with several links is counted once. Symbolic links are never followed, and a
directory that vanishes or cannot be read mid-walk is skipped.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from treadle.core.disk import DiskUsage


def measure(roots: Iterable[Path], max_files: int = 0) -> DiskUsage:
    """Usage under ``roots`` (those inside another are counted once); ``max_files`` 0: walk everything."""
    tops = sorted({os.path.normpath(os.fspath(r)) for r in roots})
    tops = [t for t in tops if not any(t != o and t.startswith(o.rstrip("/") + "/") for o in tops)]
    blocks = files = 0
    linked: set[tuple[int, int]] = set()
    stack: list[str] = []
    for top in tops:
        try:
            st = os.lstat(top)
        except OSError:
            continue
        blocks += st.st_blocks
        if stat.S_ISDIR(st.st_mode):
            stack.append(top)
    while stack:
        path = stack.pop()
        try:
            entries = os.scandir(path)
        except OSError:
            continue
        with entries:
            for entry in entries:
                files += 1
                if max_files and files > max_files:
                    return DiskUsage(bytes=blocks * 512, files=files, complete=False)
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                    if (st.st_dev, st.st_ino) in linked:
                        continue
                    linked.add((st.st_dev, st.st_ino))
                blocks += st.st_blocks
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
    return DiskUsage(bytes=blocks * 512, files=files)
