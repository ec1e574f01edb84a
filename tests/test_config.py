"""Configuration: defaults, config.toml, environment overrides, private directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.config import OPTIONS, ConfigError, ensure_home, load_settings


def test_defaults_and_locations(tmp_path: Path) -> None:
    settings = load_settings(env={"ENGRAM_HOME": str(tmp_path / "h"), "CLAUDE_CONFIG_DIR": str(tmp_path / "c")})
    assert settings.recent_days == 7.0
    assert settings.db_path == tmp_path / "h" / "engram.db"
    assert settings.transcripts_root == tmp_path / "c" / "projects"
    assert {o.name for o in OPTIONS} >= {"projects_dir", "recent_days"}


def test_file_then_environment_then_overrides(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.toml").write_text('recent_days = 14\nprojects_dir = "/from/file"\n')
    env = {"ENGRAM_HOME": str(home)}
    assert load_settings(env=env).recent_days == 14.0
    assert load_settings(env={**env, "ENGRAM_RECENT_DAYS": "3"}).recent_days == 3.0
    settings = load_settings(env=env, overrides={"projects_dir": "/cli"})
    assert settings.transcripts_root == Path("/cli")


def test_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.toml").write_text("recent_days = 7\nthis is not toml\n")
    with pytest.raises(ConfigError, match=r"config.toml: .*line 2"):
        load_settings(env={"ENGRAM_HOME": str(home)})


def test_unknown_key_and_bad_value_are_named(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.toml").write_text("recnet_days = 7\n")
    with pytest.raises(ConfigError, match="recnet_days"):
        load_settings(env={"ENGRAM_HOME": str(home)})
    with pytest.raises(ConfigError, match="ENGRAM_RECENT_DAYS"):
        load_settings(env={"ENGRAM_HOME": str(tmp_path / "x"), "ENGRAM_RECENT_DAYS": "soon"})


def test_data_dirs_are_private(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    settings = load_settings(env={"ENGRAM_HOME": str(home)})
    ensure_home(settings)
    for path in (home, settings.logs_dir, settings.run_dir, settings.recollections_dir, settings.queue_dir):
        assert path.stat().st_mode & 0o777 == 0o700, path


def test_every_option_is_typed_by_its_default(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.toml").write_text("recent_days = 3\nrecollection_bites = 2\nprompt_submit_enabled = true\n")
    settings = load_settings(env={"ENGRAM_HOME": str(home)})
    for option in OPTIONS:
        assert isinstance(settings.values[option.name], type(option.default)), option.name
    assert settings.recent_days == 3.0 and isinstance(settings.recent_days, float)
    assert settings.recollection_bites == 2 and settings.prompt_submit_enabled is True


def test_the_agents_setting_names_known_agents_only(tmp_path: Path) -> None:
    from processor.capture.agents import captured_agents

    env = {"HOME": str(tmp_path), "ENGRAM_HOME": str(tmp_path / "h"), "ENGRAM_AGENTS": "Codex, claude"}
    assert captured_agents(load_settings(env=env)) == ("claude", "codex")
    with pytest.raises(ConfigError, match="unknown agent.*cursor.*known: claude, codex, gemini"):
        load_settings(env={**env, "ENGRAM_AGENTS": "claude,cursor"})
    settings = load_settings(env={**env, "CODEX_HOME": str(tmp_path / "cx"), "GEMINI_CLI_HOME": str(tmp_path / "g")})
    assert settings.codex_dir == tmp_path / "cx" and settings.gemini_dir == tmp_path / "g" / ".gemini"


def test_the_copilot_cli_and_qwen_code_folders_follow_their_own_variables(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "ENGRAM_HOME": str(tmp_path / "h")}
    settings = load_settings(env=env)
    assert settings.copilot_dir == tmp_path / ".copilot" and settings.qwen_dir == tmp_path / ".qwen"
    moved = load_settings(env={**env, "COPILOT_HOME": str(tmp_path / "cp"), "QWEN_HOME": str(tmp_path / "qw")})
    assert moved.copilot_dir == tmp_path / "cp" and moved.qwen_dir == tmp_path / "qw"
    # Qwen writes its sessions under $QWEN_RUNTIME_DIR when that is set; `qwen_home` overrides both.
    assert load_settings(env={**env, "QWEN_RUNTIME_DIR": str(tmp_path / "rt")}).qwen_dir == tmp_path / "rt"
    assert load_settings(env={**env, "ENGRAM_QWEN_HOME": str(tmp_path / "q2")}).qwen_dir == tmp_path / "q2"
