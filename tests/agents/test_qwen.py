"""`engram install` / `uninstall` for Qwen Code: Engram's hooks and MCP server merged into the user's own
settings.json, idempotently, removed byte for byte (the settings version Qwen stamps kept like any key); a file
that is not valid JSON left untouched with the fix, one with comments (Qwen reads them) edited around them; and
what doctor says."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from processor.config import load_settings
from processor.install import qwen
from processor.install.registration import InstallError, Registration, hook_python

PYTHON = hook_python()
USER_QWEN = {
    "security": {"auth": {"selectedType": "openai"}},
    "model": {"name": "qwen3-coder-plus"},
    "hooks": {"PreToolUse": [{"matcher": "write_file", "hooks": [{"type": "command", "command": "check-paths"}]}]},
    "mcpServers": {"github": {"command": "npx", "args": ["-y", "gh"], "env": {"GITHUB_TOKEN": "ghp_SECRET"}}},
    "$version": 4,
}


@pytest.fixture
def qwen_settings(tmp_path: Path) -> Path:
    path = tmp_path / "home" / ".qwen" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(USER_QWEN, indent=2) + "\n")
    return path


def test_qwen_install_adds_hooks_and_server_and_uninstall_restores_exactly(
        qwen_settings: Path, registration: Registration) -> None:
    original = qwen_settings.read_bytes()
    report = qwen.install(registration, path=qwen_settings)
    data = json.loads(qwen_settings.read_text())
    assert data["security"] == USER_QWEN["security"] and data["$version"] == 4
    assert data["hooks"]["PreToolUse"] == USER_QWEN["hooks"]["PreToolUse"]  # the user's, and none of Engram's
    [start] = data["hooks"]["SessionStart"][0]["hooks"]
    assert start["command"].endswith("session_start.py qwen") and start["timeout"] == 30  # seconds, Qwen's unit
    for event in ("PostToolUse", "PostToolUseFailure"):
        [group] = data["hooks"][event]
        assert group["matcher"] == "*" and group["hooks"][0]["command"].endswith("pretooluse.py qwen")
        assert group["hooks"][0]["timeout"] == 10
    assert "UserPromptSubmit" not in data["hooks"]
    assert data["mcpServers"]["engram"] == {"command": PYTHON, "args": ["-I", "-m", "mcp_tools.bridge"],
                                            "alwaysLoadTools": True}
    assert data["mcpServers"]["github"] == USER_QWEN["mcpServers"]["github"]
    assert "ghp_SECRET" not in report.describe() and '+    "engram": {' in report.describe()
    assert not qwen.install(registration, path=qwen_settings).changed
    qwen.uninstall(path=qwen_settings)
    assert qwen_settings.read_bytes() == original


def test_qwen_prompt_hook_is_user_prompt_submit(qwen_settings: Path, registration: Registration) -> None:
    qwen.install(dataclasses.replace(registration, prompt_submit=True), path=qwen_settings)
    [hook] = json.loads(qwen_settings.read_text())["hooks"]["UserPromptSubmit"][0]["hooks"]
    assert hook["command"].endswith("prompt_submit.py qwen")
    qwen.install(dataclasses.replace(registration, prompt_submit=False), path=qwen_settings)
    assert "UserPromptSubmit" not in json.loads(qwen_settings.read_text())["hooks"]


def test_qwen_settings_not_json_are_left_untouched_with_the_fix(qwen_settings: Path,
                                                                 registration: Registration) -> None:
    qwen_settings.write_text("{ not json")
    with pytest.raises(InstallError, match=r"settings.json: invalid JSON .*nothing was changed"):
        qwen.install(registration, path=qwen_settings)
    assert qwen_settings.read_text() == "{ not json"
    with pytest.raises(InstallError):
        qwen.uninstall(path=qwen_settings)
    assert qwen_settings.read_text() == "{ not json"


def test_qwen_settings_with_comments_keep_them_and_come_back_byte_for_byte(qwen_settings: Path,
                                                                             registration: Registration) -> None:
    text = '{\n\t// my model\n\t"model": {"name": "qwen3"} /* chosen in May */\n}'
    qwen_settings.write_text(text)
    qwen.install(registration, path=qwen_settings)
    installed = qwen_settings.read_text()
    assert installed.startswith('{\n\t// my model\n\t"model": {"name": "qwen3"}') and "/* chosen in May */" in installed
    assert "pretooluse.py qwen" in installed
    qwen.uninstall(path=qwen_settings)
    assert qwen_settings.read_text() == text
    assert [p.name for p in qwen_settings.parent.iterdir()] == ["settings.json"]  # its backups removed


def test_qwen_install_creates_the_file_and_uninstall_removes_it(tmp_path: Path,
                                                                           registration: Registration) -> None:
    path = tmp_path / "new" / ".qwen" / "settings.json"
    qwen.install(registration, path=path)
    assert json.loads(path.read_text())["mcpServers"]["engram"]["alwaysLoadTools"] is True
    qwen.uninstall(path=path)
    assert not path.parent.exists()  # install made the file and its folder; nothing else was put there


def test_doctor_checks_qwens_hooks_switch_and_server(qwen_settings: Path, registration: Registration,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    home = qwen_settings.parent.parent
    env = {"HOME": str(home), "PATH": ""}
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("QWEN_HOME", raising=False)
    settings = load_settings()
    [missing] = qwen.problems(settings, env)
    assert not missing.ok and "SessionStart, PostToolUse, PostToolUseFailure not registered" in missing.detail
    qwen.install(registration, path=qwen_settings)
    [good] = qwen.problems(settings, env)
    assert good.ok and "and MCP server engram registered in ~/.qwen/settings.json" in good.detail
    qwen_settings.write_text(json.dumps({**json.loads(qwen_settings.read_text()), "disableAllHooks": True}))
    [off] = qwen.problems(settings, env)
    assert not off.ok and "disableAllHooks" in off.detail
    qwen_settings.write_text("{ broken")
    [broken] = qwen.problems(settings, env)
    assert not broken.ok and "invalid JSON" in broken.detail and "engram install --agent qwen" in broken.fix
