"""`treadle up` ends by saying how to call the CLI from another shell: a new shell has no venv on its PATH, so
the hint names `.venv/bin/treadle` unless that shell's PATH would find this very command."""

from __future__ import annotations

from pathlib import Path

from treadle.cli.up import cli_command


def test_a_venv_outside_the_path_is_named_by_its_path_relative_to_the_working_directory(tmp_path: Path) -> None:
    python = tmp_path / ".venv" / "bin" / "python"
    assert cli_command(python, None, tmp_path) == ".venv/bin/treadle"
    assert cli_command(python, "/usr/local/bin/treadle", tmp_path) == ".venv/bin/treadle"  # another treadle


def test_the_bare_name_when_the_path_finds_this_one(tmp_path: Path) -> None:
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "treadle").write_text("#!/bin/sh\n")
    assert cli_command(bin_ / "python", str(bin_ / "treadle"), tmp_path) == "treadle"


def test_a_venv_elsewhere_is_named_by_its_absolute_path(tmp_path: Path) -> None:
    python = tmp_path / "elsewhere" / "bin" / "python"
    assert cli_command(python, None, tmp_path / "project") == str(tmp_path / "elsewhere" / "bin" / "treadle")
