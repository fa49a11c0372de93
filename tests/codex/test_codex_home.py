"""The private CODEX_HOME: where it may live and what its config keeps (no codex process needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from treadle.providers.codex import CodexSettings
from treadle.providers.codex.home import prepare_home


def test_a_codex_home_under_tmp_is_refused(tmp_path: Path):
    assert tmp_path.resolve().is_relative_to("/tmp")
    with pytest.raises(ValueError, match="/tmp"):
        prepare_home(tmp_path, "acme", CodexSettings())
    assert not (tmp_path / "acme").exists()


def test_the_config_turns_phoning_home_off_and_keeps_codex_own_project_entries(homes_root: Path):
    settings = CodexSettings(base_url="http://127.0.0.1:9/v1", model="gpt-5.5")
    home = prepare_home(homes_root / "unit", "acme", settings)
    config = (home / "config.toml").read_text()
    for line in (
        "plugins = false",
        "apps = false",
        "remote_plugin = false",
        "unbounded_connection_retries = false",
        'base_url = "http://127.0.0.1:9/v1"',
        "enabled = false",
    ):
        assert line in config
    trusted = '\n[projects."/srv/ws"]\ntrust_level = "trusted"\n'
    (home / "config.toml").write_text(config + trusted)
    prepare_home(homes_root / "unit", "acme", CodexSettings(base_url="http://127.0.0.1:10/v1"))
    refreshed = (home / "config.toml").read_text()
    assert 'base_url = "http://127.0.0.1:10/v1"' in refreshed and refreshed.endswith(trusted)
