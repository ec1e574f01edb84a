"""Every agent behind one registry: which agents are found on the machine, install and uninstall across them (one
agent's bad file never stops the others), the registration checked once, and the same face for each."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from processor.config import AGENTS
from processor.install import agents
from processor.install.registration import Registration


def test_install_registers_with_the_agents_found_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": str(tmp_path / "bin")}
    assert agents.found_agents(env) == ["claude"]  # none found: Claude Code, as before
    (home / ".codex").mkdir()
    assert agents.found_agents(env) == ["codex"]
    (tmp_path / "bin").mkdir()
    gemini_bin = tmp_path / "bin" / "gemini"
    gemini_bin.write_text("#!/bin/sh\n")
    os.chmod(gemini_bin, 0o755)
    assert agents.found_agents(env) == ["codex", "gemini"]
    (home / ".claude").mkdir()
    assert agents.chosen(None, env) == ["claude", "codex", "gemini"]
    assert agents.chosen("codex", env) == ["codex"] and agents.chosen("all", env) == ["claude", "codex", "gemini"]
    assert agents.chosen(None, {"HOME": str(tmp_path / "nobody"), "PATH": ""}, uninstall=True) == list(agents.AGENTS)
    # `--agent all` installs with the agents installed here only: nothing is created for one that is not.
    assert agents.chosen("all", {"HOME": str(tmp_path / "nobody"), "PATH": ""}) == []
    assert agents.chosen("all", {"HOME": str(tmp_path / "nobody"), "PATH": ""}, uninstall=True) == list(agents.AGENTS)


def test_one_agents_bad_file_does_not_stop_the_others(tmp_path: Path, registration: Registration,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text("{ not json")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    monkeypatch.delenv("GEMINI_CLI_HOME", raising=False)
    outcomes = agents.install(["codex", "gemini"], registration, check=False)
    assert outcomes[0].error is None and (home / ".codex" / "hooks.json").exists()
    assert outcomes[1].error is not None and "settings.json: invalid JSON" in outcomes[1].error
    assert (home / ".gemini" / "settings.json").read_text() == "{ not json"
    assert "not changed" in outcomes[1].describe()


def test_every_agent_engram_knows_is_registered_through_one_face() -> None:
    assert list(agents.AGENTS) == list(AGENTS)  # the settings' and the CLI's agents: one line each to add one
    for name, agent in agents.AGENTS.items():
        assert name == agent.NAME and agent.TITLE
        for part in ("found", "hook_specs", "install", "uninstall", "problems"):
            assert callable(getattr(agent, part)), (name, part)


def test_install_checks_the_registration_once_for_every_agent(tmp_path: Path, registration: Registration,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[Registration] = []
    monkeypatch.setattr(agents, "check_registration", checked.append)
    monkeypatch.setattr(agents, "run_hook", lambda *args, **kwargs: None)
    home = tmp_path / "home"
    env = {"HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude"), "CODEX_HOME": str(home / ".codex"),
           "GEMINI_CLI_HOME": str(home)}
    outcomes = agents.install(list(agents.AGENTS), registration, env=env)
    assert checked == [registration]
    assert [outcome.error for outcome in outcomes] == [None] * len(agents.AGENTS)
    for path in (".config/opencode/plugin/engram.js", ".pi/agent/extensions/engram.ts"):
        assert "recall_hook/" in (home / path).read_text(), path
    for path in (".claude/settings.json", ".claude/.claude.json", ".codex/hooks.json", ".gemini/settings.json",
                 ".copilot/hooks/engram.json", ".copilot/mcp-config.json", ".qwen/settings.json",
                 ".config/opencode/opencode.json"):
        assert "recall_hook/" in (home / path).read_text() or "mcp_tools.bridge" in (home / path).read_text(), path
    assert all(outcome.report is not None and outcome.report.changed
               for outcome in agents.uninstall(list(agents.AGENTS), env=env, dry_run=True))
    agents.uninstall(list(agents.AGENTS), env=env)
    # Install created every file and folder here: uninstall leaves none of them (no `{}`, no backup), so a later
    # `engram install` finds no agent that was never installed.
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []
    assert [name for name, agent in agents.AGENTS.items() if agent.found({**env, "PATH": ""})] == []


def test_engram_install_all_says_an_agents_error_once_and_writes_nothing_for_an_agent_not_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`engram install --agent all` where only Gemini is installed, its settings.json truncated: the error is
    printed once (stderr), blamed on the JSON (not on comments), and nothing is created for Claude Code or Codex
    (so a later install does not find them)."""
    from processor import cli

    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    truncated = '{\n  "ui": {"theme": "GitHub"},\n  "general": {'
    (home / ".gemini" / "settings.json").write_text(truncated)
    for name, value in {"HOME": str(home), "PATH": "", "CODEX_HOME": str(home / ".codex")}.items():
        monkeypatch.setenv(name, value)
    for name in ("CLAUDE_CONFIG_DIR", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["install", "--agent", "all"]) == 1
    out, err = capsys.readouterr()
    assert (out + err).count("invalid JSON at line 3") == 1 and "invalid JSON at line 3" in err, (out, err)
    assert "comment" not in out + err
    assert "Claude Code: not installed here" in out and "Codex: not installed here" in out, out
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == [".gemini", ".gemini/settings.json"]
    assert (home / ".gemini" / "settings.json").read_text() == truncated
    assert agents.found_agents() == ["gemini"]
