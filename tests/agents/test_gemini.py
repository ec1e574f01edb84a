"""`engram install` / `uninstall` for the Gemini CLI: Engram's hooks and MCP server merged into the user's own
settings.json, idempotently, removed byte for byte; a settings file with comments left untouched, with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from processor.install import gemini, json_file
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
    assert "ghp_SECRET" not in report.describe() and '+    "engram": {' in report.describe()
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


def test_gemini_settings_with_comments_keep_them_and_come_back_byte_for_byte(gemini_settings: Path,
                                                                           registration: Registration) -> None:
    """The Gemini CLI reads settings.json with comments (strip-json-comments): so does install, which keeps them."""
    text = ('{\n  // my theme (see https://example.com/themes)\n  "ui": {"theme": "GitHub"}, /* inline */\n'
            '  "general": {"vimMode": true} // last\n}\n')
    gemini_settings.write_text(text)
    report = gemini.install(registration, path=gemini_settings)
    installed = gemini_settings.read_text()
    assert "// my theme (see https://example.com/themes)" in installed and "/* inline */" in installed
    assert "// last" in installed and json_file.read_object(gemini_settings, comments=True)[0]["hooks"]
    assert "line 4: a comma added at its end" in report.describe()
    gemini.uninstall(path=gemini_settings)
    assert gemini_settings.read_text() == text
    assert list(gemini_settings.parent.glob("*.engram-backup-*")) == []


def test_a_truncated_gemini_settings_file_is_not_blamed_on_comments(gemini_settings: Path,
                                                                    registration: Registration) -> None:
    gemini_settings.write_text('{\n  "mcpServers": {"docs": {"url": "https://example.com/mcp"}},\n  "ui": {')
    before = gemini_settings.read_bytes()
    with pytest.raises(InstallError) as raised:
        gemini.install(registration, path=gemini_settings)
    assert "invalid JSON at line 3" in str(raised.value) and "comment" not in str(raised.value), raised.value
    assert gemini_settings.read_bytes() == before


# ---------------------------------------------------------------- which agents
