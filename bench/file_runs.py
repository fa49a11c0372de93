"""Scenario D: runs that change files. Each thread's workspace holds ``files`` files before its first run
and every run writes one small new file, so every run ends with a real checkpoint capture (and its diff
stats) on a 10,000-file tree; compare its CPU per run with B's (the target: ≤ 6 ms)."""

from __future__ import annotations

from pathlib import Path

from harness import TENANT, Env, log
from scenarios import run_scenario


def populate(root: Path, files: int) -> None:
    """``files`` small source files in 100 directories, as a repository's worth of text."""
    for i in range(files):
        d = root / f"pkg_{i % 100:02d}"
        if i < 100:
            d.mkdir(parents=True, exist_ok=True)
        (d / f"mod_{i}.py").write_text(f"# module {i}\nVALUE = {i}\n\n\ndef f():\n    return VALUE\n")


async def file_runs(env: Env, threads: int, seconds: float, files: int) -> dict:
    root = env.stack.state_dir / "workspaces" / TENANT  # the stack's default workspace root
    names = [f"bench-d-{i}" for i in range(threads)]
    log(f"scenario D: {threads} workspaces of {files} files")
    for name in names:
        populate(root / name, files)

    def script(i: int) -> dict:
        return {
            "steps": [
                {"type": "write_file", "path": f"out/run_{i}.txt", "content": f"run {i}\n"},
                {"type": "text", "text": "wrote one file"},
            ]
        }

    out = await run_scenario(env, "D", threads, seconds, workspaces=names, script=script)
    out["workspace_files"] = files
    return out
