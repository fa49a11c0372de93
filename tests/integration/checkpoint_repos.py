"""What the workspace checkpoint tests share: real git repositories in tmp_path for them to checkpoint (a
user's repository with history, one with a submodule), the requests they send, and reading what a commit or a
directory holds."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from treadle.checkpoints.git import Workspaces
from treadle.checkpoints.protocol import Capture, RefName, Restore
from treadle.checkpoints.repo import checkpoint_gitdir

TENANT = "acme"
THREAD = "thr_1"


def git(cwd: Path, *args: str, git_dir: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="U", GIT_AUTHOR_EMAIL="u@example.com",
               GIT_COMMITTER_NAME="U", GIT_COMMITTER_EMAIL="u@example.com")  # fmt: skip
    if git_dir is not None:
        env.update(GIT_DIR=str(git_dir), GIT_WORK_TREE=str(cwd))
    # The checkpoint service hands a tenant's directories to the tenant's uid; this (root) test's git reads them.
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def checkpoint_dir(ws: Path, thread: str = THREAD) -> Path:
    """The service-owned git dir holding the checkpoints of workspace ``ws`` (``<root>/<tenant>/...``)."""
    tenant_root = next(p for p in [ws, *ws.parents] if p.name == TENANT)
    shadow = tenant_root.parent.parent / "state" / "shadow"
    return checkpoint_gitdir(shadow, TENANT, thread, ws.resolve().relative_to(tenant_root.resolve()))


def ckpt(ws: Path, *args: str, thread: str = THREAD) -> str:
    """git on the checkpoints of workspace ``ws`` (not on the user's repository)."""
    return git(ws, *args, git_dir=checkpoint_dir(ws, thread))


def capture(ordinal: int, previous: int | None, *, workspace: str = "proj", **kw) -> Capture:
    status = "baseline" if previous is None else "completed"
    return Capture(tenant=TENANT, thread=THREAD, workspace=workspace, ordinal=ordinal,
                   previous_ordinal=previous, status=kw.pop("status", status), **kw)  # fmt: skip


def restore(commit: str, restore_id: str = "rbk_1", retire: list[RefName] | None = None, workspace: str = "proj"):
    return Restore(
        tenant=TENANT, thread=THREAD, workspace=workspace, restore_id=restore_id, commit=commit, retire=retire or []
    )


def files_of(repo: Path, commit: str, git_dir: Path | None = None) -> dict[str, str]:
    """The files of checkpoint ``commit`` of workspace ``repo``."""
    git_dir = git_dir or checkpoint_dir(repo)
    names = git(repo, "ls-tree", "-r", "--name-only", commit, git_dir=git_dir).split("\n")
    return {n: git(repo, "show", f"{commit}:{n}", git_dir=git_dir) for n in names if n}


def snapshot(path: Path) -> dict[str, tuple[str, bytes]]:
    """Every file below ``path`` but .git: kind/mode and content (a symlink's target)."""
    out = {}
    for d, dirs, files in os.walk(path):
        dirs[:] = [x for x in dirs if not (Path(d) == path and x == ".git")]
        for name in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = Path(d) / name
            rel = str(p.relative_to(path))
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p).encode())
            else:
                out[rel] = (oct(st.st_mode & 0o111), p.read_bytes())
    return out


def user_repository(root: Path, committed: dict[str, str] | None = None) -> Path:
    """The workspace ``proj``: a user's repository with history (``committed`` besides README.md and app.py),
    a stash and a staged change."""
    repo = root / TENANT / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for name, text in {**(committed or {}), "README.md": "hello\n", "app.py": "print(1)\n"}.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    (repo / "app.py").write_text("print(2)\n")
    git(repo, "stash", "-q")
    (repo / "README.md").write_text("hello\nstaged\n")
    git(repo, "add", "README.md")
    return repo


def repository_with_submodule(root: Path) -> Path:
    """The workspace ``proj``, a repository with the repository ``lib`` (one file, l.txt) at vendor/lib."""
    lib = root / TENANT / "lib"
    lib.mkdir()
    git(lib, "init", "-q", "-b", "main")
    (lib / "l.txt").write_text("lib\n")
    git(lib, "add", "-A")
    git(lib, "commit", "-q", "-m", "lib")
    ws = root / TENANT / "proj"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    git(ws, "-c", "protocol.file.allow=always", "submodule", "-q", "add", str(lib), "vendor/lib")
    git(ws, "commit", "-q", "-m", "with submodule")
    return ws


@pytest.fixture
def root() -> Iterator[Path]:
    """``<base>/ws``, where ``<base>`` is reachable by other users (pytest's tmp_path is not): as root, the
    service then runs its git as the tenant's uid, as it does in a deployment."""
    base = Path(tempfile.mkdtemp(prefix="treadle-ckpt-"))
    os.chmod(base, 0o711)
    (base / "ws" / TENANT).mkdir(parents=True)
    yield base / "ws"
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def workspaces(root: Path) -> Iterator[Workspaces]:
    ws = Workspaces(root, root.parent / "state" / "shadow")
    yield ws
    ws.close()
