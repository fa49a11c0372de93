"""The docs' runnable examples run: every fenced block marked ``<!-- docs-test: run -->`` in the README or a page
under docs/ is run against a live stack, as a reader would run it from a shell where `make run` printed its
hints: ``TREADLE_API_URL`` and ``TREADLE_TOKEN`` set, the venv's ``bin`` first on the PATH. A shell block runs
with ``bash -euo pipefail`` (every command must succeed), a Python block with the venv's interpreter."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.provider_http import tenant_token

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- docs-test: run -->"
_MARKS = re.compile("^" + re.escape(MARK) + "$", re.MULTILINE)  # alone on its line: a mention in prose is not one
_BLOCK = re.compile("^" + re.escape(MARK) + r"\n```(?P<lang>\w+)[^\n]*\n(?P<code>.*?)\n```", re.DOTALL | re.MULTILINE)
RUNNERS = {"sh": ["bash", "-euo", "pipefail", "-c"], "bash": ["bash", "-euo", "pipefail", "-c"]}


def runnable_blocks() -> list[tuple[str, str, str]]:
    """(where, language, code) of every marked block, where being ``file:line``."""
    blocks = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        assert len(_MARKS.findall(text)) == len(_BLOCK.findall(text)), (
            f"{path.name}: a mark not followed by a fenced block"
        )
        for found in _BLOCK.finditer(text):
            line = text.count("\n", 0, found.start()) + 2
            blocks.append((f"{path.relative_to(ROOT)}:{line}", found["lang"], found["code"]))
    return blocks


BLOCKS = runnable_blocks()


def test_the_readme_tour_is_among_the_runnable_blocks() -> None:
    assert {lang for where, lang, _ in BLOCKS if where.startswith("README.md")} == {"sh", "python"}


@pytest.mark.parametrize(("where", "lang", "code"), BLOCKS, ids=[where for where, _, _ in BLOCKS])
async def test_a_runnable_block_runs(stack, tenant: str, tmp_path: Path, where: str, lang: str, code: str) -> None:
    token = await tenant_token(stack, tenant)
    bin_ = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("TREADLE_")}
    env |= {"TREADLE_API_URL": stack.api_url, "TREADLE_TOKEN": token, "PATH": f"{bin_}{os.pathsep}{env['PATH']}"}
    runner = [sys.executable, "-c"] if lang == "python" else RUNNERS[lang]
    done = subprocess.run(
        [*runner, code], cwd=tmp_path, env=env | {"COLUMNS": "200"}, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, f"{where} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
