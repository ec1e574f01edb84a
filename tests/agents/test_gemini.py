"""`engram install` / `uninstall` for the Gemini CLI: Engram's hooks and MCP server merged into the user's own
settings.json, idempotently, removed byte for byte; a settings file with comments left untouched, with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from processor.install import gemini
from processor.install.registration import InstallError, Registration, hook_python

PYTHON = hook_python()

USER_GEMINI = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "ui": {"theme": "GitHub"},
    "hooks": {"BeforeTool": [{"matcher": "write_file", "hooks": [{"type": "command", "command": "check-paths"}]}]},
    "mcpServers": {"github": {"command": "npx", "args": ["-y", "gh"], "env": {"GITHUB_TOKEN": "ghp_SECRET"}}},
}


@pytest.fixture
def gemini_settings(tmp_path: Path) -> Path:
    path = tmp_path / "gemini" / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(USER_GEMINI, indent=2) + "\n")
    return path


def test_gemini_install_adds_hooks_and_server_and_uninstall_restores_exactly(
        gemini_settings: Path, registration: Registration) -> None:
    original = gemini_settings.read_bytes()
    report = gemini.install(registration, path=gemini_settings)
    data = json.loads(gemini_settings.read_text())
    assert data["security"] == USER_GEMINI["security"] and data["ui"] == USER_GEMINI["ui"]
    assert data["hooks"]["BeforeTool"] == USER_GEMINI["hooks"]["BeforeTool"]
    [start] = data["hooks"]["SessionStart"][0]["hooks"]
    [after] = data["hooks"]["AfterTool"][0]["hooks"]
    assert start["command"].endswith("session_start.py gemini") and start["timeout"] == 30_000
    assert after["command"].endswith("pretooluse.py gemini") and after["timeout"] == 10_000
    assert data["hooks"]["AfterTool"][0]["matcher"] == ".*"
    assert "BeforeAgent" not in data["hooks"]
    assert data["mcpServers"]["engram"] == {"command": PYTHON, "args": ["-I", "-m", "mcp_tools.bridge"]}
    assert data["mcpServers"]["github"] == USER_GEMINI["mcpServers"]["github"]
    assert "ghp_SECRET" not in report.describe() and "mcpServers" in report.describe()
    assert not gemini.install(registration, path=gemini_settings).changed
    gemini.uninstall(path=gemini_settings)
    assert gemini_settings.read_bytes() == original


def test_gemini_prompt_hook_is_before_agent(gemini_settings: Path, registration: Registration) -> None:
    import dataclasses

    gemini.install(dataclasses.replace(registration, prompt_submit=True), path=gemini_settings)
    [hook] = json.loads(gemini_settings.read_text())["hooks"]["BeforeAgent"][0]["hooks"]
    assert hook["command"].endswith("prompt_submit.py gemini")
    gemini.install(dataclasses.replace(registration, prompt_submit=False), path=gemini_settings)
    assert "BeforeAgent" not in json.loads(gemini_settings.read_text())["hooks"]


def test_gemini_settings_with_comments_are_left_untouched_with_the_fix(gemini_settings: Path,
                                                                      registration: Registration) -> None:
    gemini_settings.write_text('{\n  // my theme\n  "ui": {"theme": "GitHub"}\n}\n')
    before = gemini_settings.read_bytes()
    with pytest.raises(InstallError, match="reads settings.json with comments.*--agent gemini --print"):
        gemini.install(registration, path=gemini_settings)
    assert gemini_settings.read_bytes() == before


# ---------------------------------------------------------------- which agents
