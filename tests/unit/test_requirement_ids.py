"""Every requirement id cited in the repository (test names, help texts, OpenAPI summaries, comments, docs) is
defined in docs/requirements.md, so a reader who meets `L10.6` or `test_L5_5_…` can look it up."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "docs" / "requirements.md"

# `L5.5` in prose (not inside a longer word or number: `XL5`, `L5.5.` at a sentence's end is `L5.5`)
_PROSE_ID = re.compile(r"(?<![A-Za-z0-9_.])L(\d{1,2}(?:\.\d+)*)(?![A-Za-z0-9])")
# `test_L5_5_name` in a test's name: the digits after `test_L`, up to the first word
_TEST_ID = re.compile(r"\btest_L(\d{1,2}(?:_\d+)*)(?=_[A-Za-z]|\b)")
_DEFINED = re.compile(r"^(?:- \*\*L(\d+(?:\.\d+)?)\*\*|## L(\d+) )", re.MULTILINE)


def defined_ids(spec: str) -> set[str]:
    return {"L" + (item or group) for item, group in _DEFINED.findall(spec)}


def cited_ids(text: str) -> set[str]:
    prose = {"L" + digits for digits in _PROSE_ID.findall(text)}
    tests = {"L" + digits.replace("_", ".") for digits in _TEST_ID.findall(text)}
    return prose | tests


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    files = []
    for name in filter(None, listed):
        path = ROOT / name.decode()
        # a vendored third-party file (a minified library) is not ours to cite requirements in
        if path.is_file() and path.suffix not in {".png", ".lock"} and not path.name.endswith(".min.js"):
            files.append(path)
    return files


def test_the_spec_defines_every_group_and_its_requirements() -> None:
    ids = defined_ids(SPEC.read_text())
    assert {f"L{n}" for n in range(1, 13)} <= ids
    assert {"L1.1", "L2.3", "L5.5", "L9.3", "L10.6", "L12.4"} <= ids
    assert len(ids) == 12 + 52


def test_every_id_cited_in_the_repository_is_defined() -> None:
    defined = defined_ids(SPEC.read_text())
    undefined: dict[str, list[str]] = {}
    for path in _tracked_text_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for requirement in cited_ids(text) - defined:
            undefined.setdefault(requirement, []).append(str(path.relative_to(ROOT)))
    assert undefined == {}, f"ids cited but not defined in docs/requirements.md: {undefined}"


def test_an_undefined_id_in_prose_or_a_test_name_is_caught() -> None:
    L = "L"  # the undefined ids are built here, or this file would cite them
    text = f"see L5.5 and {L}13.2.\ndef test_L10_5_rolls_back(): ...\ndef test_{L}3_9_nope(): ...\nclass XL5: pass"
    assert cited_ids(text) == {"L5.5", f"{L}13.2", "L10.5", f"{L}3.9"}
    assert cited_ids(text) - defined_ids(SPEC.read_text()) == {f"{L}13.2", f"{L}3.9"}


def test_nothing_points_outside_the_repository_for_the_design() -> None:
    """The requirements and concepts live in docs/: a pointer to the old shared design folder dead-ends."""
    pointers = [
        str(path.relative_to(ROOT))
        for path in _tracked_text_files()
        if path.name != Path(__file__).name and "../shared/" in path.read_text(errors="replace")
    ]
    assert pointers == []
