"""A provider's resume state (issue 35): chosen files under a runtime's home (``NativeFiles``), read without
following a link, and put back (the host keeps them as segments, ``native_manifest``; ``pack`` and
``members`` write and read the single gzipped tar an earlier release kept). The runtime is hostile and owns
its home: reading never follows a link (every step opens the next name under its parent's descriptor with
O_NOFOLLOW), and a restore writes only regular files and directories inside the target, refusing a member
that names a link, a device, an absolute path or ``..``. Sizes are bounded both ways, so neither a grown home
nor a crafted archive can fill a disk or the store."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import stat
import tarfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MAX_BYTES = 64 * 1024 * 1024  # what one provider thread may keep off the node, unpacked
MAX_MEMBERS = 10_000
COMPRESS_LEVEL = 3  # a 10 MB JSONL: 1.3 MB in 0.1 s here (level 9: 1.0 MB in 3 s, after every turn)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NativeStateRefused(ValueError):
    """The state cannot be packed (too large) or an archive cannot be restored (a hostile or broken member):
    nothing was written, and the resume takes the replacement path."""


@dataclass(frozen=True, slots=True)
class NativeFiles:
    """What a runtime needs to resume a provider thread natively: ``files`` (relative to ``root``)."""

    root: Path
    files: tuple[str, ...]


def _parts(relative: str) -> tuple[str, ...]:
    path = PurePosixPath(relative)
    if not relative or path.is_absolute() or any(p in ("", ".", "..") for p in relative.split("/")):
        raise NativeStateRefused(f"{relative!r} is not a plain relative path")
    return path.parts


def check_name(relative: str) -> None:
    """Refuses a name that is not a plain relative path (absolute, empty steps, ``.`` or ``..``)."""
    _parts(relative)


def _open_dir(root_fd: int, parts: Iterable[str], create: bool = False) -> int:
    """The directory ``parts`` under ``root_fd``, each step opened without following a link."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            try:
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                step = os.open(part, _DIR_FLAGS, dir_fd=fd)  # a link here fails (ELOOP), as a file does
            except OSError as exc:
                raise NativeStateRefused(f"{part!r} is not a directory here: {exc}") from None
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(root_fd: int, relative: str) -> int | None:
    """A read descriptor of the regular file ``relative`` under ``root_fd``, no step through a link; None when
    it is gone, a link, or not a regular file (the caller closes it)."""
    parts = _parts(relative)
    try:
        parent = _open_dir(root_fd, parts[:-1])
    except NativeStateRefused:
        return None
    try:
        fd = os.open(parts[-1], _READ_FLAGS, dir_fd=parent)
    except OSError:
        return None  # a link (ELOOP), gone, or unreadable
    finally:
        os.close(parent)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def open_root(root: Path) -> int:
    return os.open(root, _DIR_FLAGS)


def walk(root: Path) -> list[str]:
    """The relative paths of the regular files under ``root`` (links and special files are not listed, and a
    linked directory is not entered)."""
    found: list[str] = []

    def visit(fd: int, prefix: str) -> None:
        with os.scandir(fd) as entries:
            names = sorted(e.name for e in entries)
        for name in names:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                found.append(prefix + name)
            elif stat.S_ISDIR(st.st_mode):
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue  # swapped for a link since it was listed
                try:
                    visit(sub, f"{prefix}{name}/")
                finally:
                    os.close(sub)
            if len(found) > MAX_MEMBERS:
                raise NativeStateRefused(f"more than {MAX_MEMBERS} files under {root}")

    try:
        root_fd = os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        return []
    try:
        visit(root_fd, "")
    finally:
        os.close(root_fd)
    return found


def pack(root: Path, files: Iterable[str], max_bytes: int = MAX_BYTES) -> bytes:
    """``files`` (relative to ``root``) as a gzipped tar. The same contents give the same bytes (no times,
    owners or modes are kept), so a digest says whether anything changed. A name that is a link or not a
    regular file when opened is left out."""
    out = io.BytesIO()
    total = 0
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for relative in sorted(set(files)):
                parts = _parts(relative)
                try:
                    parent = _open_dir(root_fd, parts[:-1])
                except NativeStateRefused:
                    continue
                try:
                    fd = os.open(parts[-1], _READ_FLAGS, dir_fd=parent)
                except OSError:
                    continue  # a link (ELOOP), gone, or unreadable: not kept
                finally:
                    os.close(parent)
                with os.fdopen(fd, "rb") as handle:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        continue
                    data = handle.read(max_bytes - total + 1)
                total += len(data)
                if total > max_bytes:
                    raise NativeStateRefused(f"the native state under {root} is over {max_bytes} bytes")
                info = tarfile.TarInfo(relative)
                info.size, info.mode, info.mtime = len(data), 0o600, 0
                tar.addfile(info, io.BytesIO(data))
    finally:
        os.close(root_fd)
    return gzip.compress(out.getvalue(), compresslevel=COMPRESS_LEVEL, mtime=0)


def members(data: bytes, max_bytes: int = MAX_BYTES) -> dict[str, bytes]:
    """The files of a packed state, every member checked: only regular files with plain relative names, at
    most ``max_bytes`` unpacked (a decompression bomb stops there)."""
    inflate = zlib.decompressobj(wbits=31)
    try:
        raw = inflate.decompress(data, max_bytes + 1024 * 1024)  # tar headers on top of the contents
    except zlib.error as exc:
        raise NativeStateRefused(f"not a packed native state: {exc}") from None
    if inflate.unconsumed_tail:
        raise NativeStateRefused(f"the packed native state is over {max_bytes} bytes")
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            for member in tar:
                _parts(member.name)
                if not member.isreg():
                    raise NativeStateRefused(f"member {member.name!r} is not a regular file")
                if len(files) >= MAX_MEMBERS:
                    raise NativeStateRefused(f"more than {MAX_MEMBERS} members")
                handle = tar.extractfile(member)
                assert handle is not None  # a regular file
                files[member.name] = handle.read()
    except tarfile.TarError as exc:
        raise NativeStateRefused(f"not a packed native state: {exc}") from None
    if sum(len(v) for v in files.values()) > max_bytes:
        raise NativeStateRefused(f"the packed native state is over {max_bytes} bytes")
    return files


def restore(target: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` (checked by ``members``) under ``target``: directories made as needed without following a
    link, each file written beside its place and renamed over it. A path through a link or a file is refused."""
    for relative in files:
        _parts(relative)
    target.mkdir(parents=True, exist_ok=True)
    root_fd = os.open(target, _DIR_FLAGS)
    try:
        for relative, content in files.items():
            parts = _parts(relative)
            parent = _open_dir(root_fd, parts[:-1], create=True)
            try:
                staging = f".{parts[-1]}.restoring"
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(staging, dir_fd=parent)
                fd = os.open(staging, _WRITE_FLAGS, 0o600, dir_fd=parent)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(content)
                os.rename(staging, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
            except OSError as exc:
                raise NativeStateRefused(f"cannot restore {relative!r}: {exc}") from None
            finally:
                os.close(parent)
    finally:
        os.close(root_fd)
