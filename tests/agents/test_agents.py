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
    assert agents.chosen("codex", env) == ["codex"] and agents.chosen("all", env) == list(agents.AGENTS)
    assert agents.chosen(None, {"HOME": str(tmp_path / "nobody"), "PATH": ""}, uninstall=True) == list(agents.AGENTS)


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
    for path in (".claude/settings.json", ".claude/.claude.json", ".codex/hooks.json", ".gemini/settings.json"):
        assert "recall_hook/" in (home / path).read_text() or "mcp_tools.bridge" in (home / path).read_text(), path
    assert all(outcome.report is not None and outcome.report.changed
               for outcome in agents.uninstall(list(agents.AGENTS), env=env, dry_run=True))
    agents.uninstall(list(agents.AGENTS), env=env)
    assert not any("recall_hook/" in (home / path).read_text()
                   for path in (".claude/settings.json", ".gemini/settings.json"))
