"""Which untracked paths git ignores, asked of one long-running `git check-ignore --stdin` per worktree.

Nearly every run that writes a file gives its capture a new untracked path to ask about; a git process per
question cost ~1.8 ms of CPU, more than the rest of an incremental capture. A long-running git keeps the
ignore rules it has read, so it may only be asked while nothing it read can have changed: the caller stops
it whenever a capture takes the `add -A` path (the watcher saw a rule file, the git dir's config or exclude
change, or lost track) and before any capture that saw a directory created or moved in (rules inside it
may have been written before it was watched). See Stager in staging.py.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time

from treadle.checkpoints.protocol import CheckpointError
from treadle.checkpoints.repo import Repo
from treadle.checkpoints.runner import GIT_CONFIG, SERVICE

# -v -n: one record per path asked (source, line, pattern, path), matched or not, so replies can be counted.
_ARGS = ("check-ignore", "--no-index", "-z", "-v", "-n", "--stdin")


class IgnoreChecker:
    """One `git check-ignore` child serving one worktree, started as its other git children are."""

    def __init__(self, repo: Repo) -> None:
        launch = repo.launch or SERVICE
        try:
            # No lock fd is passed: this git writes nothing, and must not keep the git dir locked.
            self._proc = subprocess.Popen(
                (*launch.argv, *GIT_CONFIG, *_ARGS),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=dict(repo.env, GIT_FLUSH="1"),  # a reply per path, not when git's buffer fills
                cwd=repo.worktree,
                **dict(launch.kwargs),
            )
        except OSError as e:
            raise CheckpointError("git_error", f"cannot run git: {e}") from None
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._in = self._proc.stdin.fileno()
        self._out = self._proc.stdout.fileno()
        os.set_blocking(self._in, False)
        self._busy = threading.Lock()  # held while asking; close() from another thread then only kills

    def ignored(self, paths: list[bytes], timeout: float) -> set[bytes]:
        """The ones of ``paths`` git ignores (what `check-ignore --no-index` would print); ``git_error`` (and
        the child stopped) when it fails or takes longer than ``timeout``."""
        with self._busy:
            try:
                if self._proc.returncode is not None:
                    raise CheckpointError("git_error", "stopped")
                records = self._ask(b"".join(p + b"\0" for p in paths), 4 * len(paths), timeout)
                if records[3::4] != paths:
                    raise CheckpointError("git_error", "answers for other paths")
            except (OSError, CheckpointError) as e:
                self._release()
                raise CheckpointError("git_error", f"git check-ignore failed: {e}") from None
        out = set()
        for i, path in enumerate(paths):
            source, _, pattern = records[4 * i : 4 * i + 3]
            # A negated pattern (printed with its "!") matched: the path is not ignored.
            if (source or pattern) and not pattern.startswith(b"!"):
                out.add(path)
        return out

    def _ask(self, data: bytes, fields: int, timeout: float) -> list[bytes]:
        # Written and read together: git answers while it reads, and neither pipe may fill up unread.
        got = bytearray()
        deadline = time.monotonic() + timeout
        while got.count(b"\0") < fields:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CheckpointError("git_error", f"timed out after {timeout}s")
            readable, writable, _ = select.select([self._out], [self._in] if data else [], [], left)
            if writable:
                data = data[os.write(self._in, data) :]
            if readable:
                chunk = os.read(self._out, 1 << 16)
                if not chunk:
                    raise CheckpointError("git_error", "exited")
                got += chunk
        if got.count(b"\0") != fields or not got.endswith(b"\0"):
            raise CheckpointError("git_error", "unexpected output")
        return bytes(got).split(b"\0")[:fields]

    def close(self) -> None:
        """Stop the child (from any thread); its pipes are closed here, or by the thread asking it now."""
        self._proc.kill()  # it writes nothing: nothing to finish, and it may be stuck (a fifo named .gitignore)
        if self._busy.acquire(blocking=False):
            try:
                self._release()
            finally:
                self._busy.release()

    def _release(self) -> None:
        self._proc.kill()
        self._proc.wait()
        for pipe in (self._proc.stdin, self._proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()
