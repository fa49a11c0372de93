"""The client file methods an ACP agent may call (``fs/read_text_file``, ``fs/write_text_file``), served
inside the tenant's workspace only.

ACP paths are absolute. A path is refused unless it lies under the workspace without a ``..`` segment, and
it is opened one component at a time from the workspace's own descriptor with ``O_NOFOLLOW``: a symbolic
link anywhere on the way (planted by the agent, pointing out of the workspace or not) is refused rather than
followed, so a check and a later use can never see different files. Files the host writes are given to the
tenant's uid, as if the sandboxed agent had written them.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path, PurePosixPath
from typing import Any

MAX_BYTES = 16 * 1024 * 1024  # one file read or written through the protocol


class FileRefused(Exception):
    """A request for a path outside the workspace, through a link, or otherwise unservable (JSON-RPC error)."""


class WorkspaceFiles:
    def __init__(self, workspace: Path, owner: tuple[int, int] | None = None) -> None:
        self.root = Path(os.path.realpath(workspace))
        self.named = Path(os.path.abspath(workspace))  # as the agent was told it (its cwd)
        self.owner = owner  # (uid, gid) new files get; None: the host's

    def _parts(self, raw: object) -> list[str]:
        if not isinstance(raw, str) or not raw or "\0" in raw or len(raw) > 4096:
            raise FileRefused("path must be a non-empty string")
        path = PurePosixPath(raw)
        if not path.is_absolute():
            raise FileRefused(f"path {raw!r} is not absolute")
        if ".." in path.parts:
            raise FileRefused(f"path {raw!r} has a '..' segment")
        for root in (self.named, self.root):
            if path.is_relative_to(root):
                inside = path.relative_to(root)
                break
        else:
            raise FileRefused(f"path {raw!r} is outside the workspace")
        parts = [p for p in inside.parts if p not in ("", ".")]
        if not parts:
            raise FileRefused(f"path {raw!r} is the workspace itself, not a file")
        return parts

    def _open_dir(self, parts: list[str], create: bool) -> int:
        """A descriptor of the directory holding ``parts[-1]``, reached without following any link."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for name in parts[:-1]:
                try:
                    nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(name, 0o755, dir_fd=fd)
                    if self.owner is not None:
                        os.chown(name, *self.owner, dir_fd=fd, follow_symlinks=False)
                    nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except OSError as exc:
            os.close(fd)
            raise _refused(exc, parts) from None
        return fd

    def read(self, params: dict[str, Any]) -> dict[str, Any]:
        parts = self._parts(params.get("path"))
        line, limit = params.get("line"), params.get("limit")
        for value, what in ((line, "line"), (limit, "limit")):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise FileRefused(f"{what} must be a positive integer")
        dir_fd = self._open_dir(parts, create=False)
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError as exc:
            raise _refused(exc, parts) from None
        finally:
            os.close(dir_fd)
        with os.fdopen(fd, "rb") as f:
            if not _regular(f.fileno()):
                raise FileRefused(f"{'/'.join(parts)} is not a regular file")
            data = f.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise FileRefused(f"{'/'.join(parts)} is larger than {MAX_BYTES} bytes")
        text = data.decode("utf-8", errors="replace")
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = (line or 1) - 1
            text = "".join(lines[start : start + limit if limit is not None else None])
        return {"content": text}

    def write(self, params: dict[str, Any]) -> None:
        parts = self._parts(params.get("path"))
        content = params.get("content")
        if not isinstance(content, str):
            raise FileRefused("content must be a string")
        data = content.encode()
        if len(data) > MAX_BYTES:
            raise FileRefused(f"content is larger than {MAX_BYTES} bytes")
        dir_fd = self._open_dir(parts, create=True)
        try:
            fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            raise _refused(exc, parts) from None
        finally:
            os.close(dir_fd)
        with os.fdopen(fd, "wb") as f:
            if not _regular(f.fileno()):
                raise FileRefused(f"{'/'.join(parts)} is not a regular file")
            f.truncate(0)
            f.write(data)
            if self.owner is not None:
                with contextlib.suppress(PermissionError):
                    os.fchown(f.fileno(), *self.owner)


def _regular(fd: int) -> bool:
    import stat

    return stat.S_ISREG(os.fstat(fd).st_mode)


def _refused(exc: OSError, parts: list[str]) -> FileRefused:
    where = "/".join(parts)
    if exc.errno in (errno.ELOOP, errno.ENOTDIR) or (exc.errno == errno.EMLINK):
        return FileRefused(f"{where}: a symbolic link is on the way (not followed)")
    if exc.errno == errno.ENOENT:
        return FileRefused(f"{where}: no such file")
    return FileRefused(f"{where}: {exc.strerror}")
