"""The private CODEX_HOME: where it may live and what its config keeps (no codex process needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from treadle.providers.codex import CodexSettings
from treadle.providers.codex.home import home_root, prepare_home


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


def test_the_home_root_setting_is_named_when_a_home_would_be_under_tmp(tmp_path: Path):
    with pytest.raises(ValueError, match="set TREADLE_CODEX_HOME_ROOT to a directory outside /tmp"):
        prepare_home(tmp_path, "acme", CodexSettings())


def test_a_state_dir_under_tmp_puts_the_codex_homes_under_the_users_cache_dir(
    tmp_path: Path, homes_root: Path, monkeypatch
):
    """Issue 25: ``treadle up --state-dir /tmp/x`` gets homes Codex accepts without TREADLE_CODEX_HOME_ROOT."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(homes_root / "cache"))
    beside = tmp_path / "provider-runtimes" / "host-1" / "codex-homes"
    root = home_root(CodexSettings(), beside)
    assert not root.resolve().is_relative_to("/tmp") and root.is_relative_to(homes_root / "cache" / "treadle")
    assert home_root(CodexSettings(), tmp_path / "other" / "codex-homes") != root  # one root per stack
    assert (prepare_home(root, "acme", CodexSettings()) / "config.toml").is_file()
    set_root = homes_root / "configured"
    assert home_root(CodexSettings(home_root=set_root), beside) == set_root  # the setting always wins
    assert home_root(CodexSettings(), homes_root / "beside") == homes_root / "beside"  # not under /tmp: as before
