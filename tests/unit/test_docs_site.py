"""The documentation stays whole: the site builds strictly (a broken link, a missing page or a page outside the
site fails), the configuration reference is the one the settings classes generate, and the README's links lead
to files that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from treadle.cli import config_reference
from treadle.cli.config_notes import DIRECT, NOTES

ROOT = Path(__file__).resolve().parents[2]
_LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)#\s]+)(?:#[^)\s]*)?\)")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-d", str(tmp_path / "doctrees")]
        + [str(ROOT / "docs"), str(tmp_path / "html")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    pages = {path.stem for path in (ROOT / "docs").glob("*.md")}
    built = {path.stem for path in (tmp_path / "html").glob("*.html")}
    assert pages <= built


def test_the_configuration_reference_is_the_generated_one() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == config_reference.render(), "docs/configuration.md is stale: run `make docs`"


def test_every_note_names_a_setting_and_every_direct_variable_is_read_by_the_code() -> None:
    assert sorted(set(NOTES) - config_reference.variables()) == []
    sources = [path for top in ("libs", "services") for path in (ROOT / top).rglob("*.py")]
    code = "\n".join(path.read_text() for path in sources if path.name != "config_notes.py")
    unread = [variable for variable in DIRECT if f'"{variable}"' not in code]
    assert unread == []


def test_the_readme_links_lead_to_files_in_the_repository() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = _LINK.findall(readme)
    assert "docs/index.md" in targets
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert missing == []


def test_the_readme_stays_short() -> None:
    """One or two screens: what goes deeper belongs in a page under docs/."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 120
