"""`engram install` / `uninstall` for the GitHub Copilot CLI: Engram's hooks in a file of its own in Claude Code's
shape, its MCP server merged into the user's mcp-config.json, idempotently, removed byte for byte; a file that is
not valid JSON left untouched, with the fix; and what doctor says."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from processor.config import load_settings
from processor.install import copilot
from processor.install.registration import InstallError, Registration, hook_python

PYTHON = hook_python()
USER_MCP = {"mcpServers": {"github": {"type": "local", "command": "npx", "args": ["-y", "gh"],
                                      "env": {"GITHUB_TOKEN": "ghp_SECRET"}, "tools": ["*"]}}}
USER_HOOKS = {"version": 1, "hooks": {"preToolUse": [{"type": "command", "bash": "./check.sh", "timeoutSec": 5}]}}


@pytest.fixture
def copilot_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "home" / ".copilot"
    (folder / "hooks").mkdir(parents=True)
    (folder / "mcp-config.json").write_text(json.dumps(USER_MCP, indent=2) + "\n")
    (folder / "hooks" / "mine.json").write_text(json.dumps(USER_HOOKS, indent=2) + "\n")
    return folder


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_copilot_install_adds_hooks_and_server_and_uninstall_restores_exactly(
        copilot_dir: Path, registration: Registration) -> None:
    original = files(copilot_dir)
    report = copilot.install(registration, copilot_dir=copilot_dir)
    hooks = json.loads((copilot_dir / "hooks" / "engram.json").read_text())
    assert hooks["version"] == 1
    assert set(hooks["hooks"]) == {"SessionStart", "PostToolUse", "PostToolUseFailure"}  # Claude Code's shape
    [start] = hooks["hooks"]["SessionStart"][0]["hooks"]
    assert start["command"].endswith("session_start.py copilot") and start["timeout"] == 30
    for event in ("PostToolUse", "PostToolUseFailure"):
        [group] = hooks["hooks"][event]
        assert group["matcher"] == "*" and group["hooks"][0]["command"].endswith("pretooluse.py copilot")
    mcp = json.loads((copilot_dir / "mcp-config.json").read_text())
    assert mcp["mcpServers"]["engram"] == {"command": PYTHON, "args": ["-I", "-m", "mcp_tools.bridge"]}
    assert mcp["mcpServers"]["github"] == USER_MCP["mcpServers"]["github"]
    assert (copilot_dir / "hooks" / "mine.json").read_bytes() == original["hooks/mine.json"]
    assert "ghp_SECRET" not in report.describe() and "engram" in report.describe()
    assert not copilot.install(registration, copilot_dir=copilot_dir).changed
    copilot.uninstall(copilot_dir=copilot_dir)
    after = {name: data for name, data in files(copilot_dir).items() if ".engram-backup-" not in name}
    assert after == original


def test_copilot_files_install_made_are_gone_after_uninstall(tmp_path: Path, registration: Registration) -> None:
    folder = tmp_path / "fresh" / ".copilot"
    copilot.install(dataclasses.replace(registration, prompt_submit=True), copilot_dir=folder)
    hooks = json.loads((folder / "hooks" / "engram.json").read_text())["hooks"]
    assert hooks["UserPromptSubmit"][0]["hooks"][0]["command"].endswith("prompt_submit.py copilot")
    report = copilot.uninstall(copilot_dir=folder)
    assert not (folder / "hooks").exists() and not (folder / "mcp-config.json").exists()
    assert report.describe().count("removed (Engram created it; nothing else is in it)") == 2
    assert not copilot.uninstall(copilot_dir=folder).changed  # nothing there: nothing made


def test_a_copilot_mcp_file_that_is_not_json_is_left_untouched_with_the_fix(copilot_dir: Path,
                                                                           registration: Registration) -> None:
    (copilot_dir / "mcp-config.json").write_text("{ broken")
    before = files(copilot_dir)
    with pytest.raises(InstallError, match=r"mcp-config.json: invalid JSON at line 1 .*fix or move the file aside"):
        copilot.install(registration, copilot_dir=copilot_dir)
    assert files(copilot_dir) == before  # not even Engram's own hooks file: both files are read first


def test_a_server_named_engram_that_is_not_engrams_is_an_error(copilot_dir: Path,
                                                              registration: Registration) -> None:
    (copilot_dir / "mcp-config.json").write_text(json.dumps({"mcpServers": {"engram": {"command": "other"}}}))
    with pytest.raises(InstallError, match="already registered and is not Engram's"):
        copilot.install(registration, copilot_dir=copilot_dir)


def test_doctor_checks_copilots_hooks_switch_and_server(copilot_dir: Path, registration: Registration,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COPILOT_HOME", str(copilot_dir))
    env = {"HOME": str(copilot_dir.parent), "PATH": "", "COPILOT_HOME": str(copilot_dir)}
    settings = load_settings()
    [missing] = copilot.problems(settings, env)
    assert not missing.ok and "Engram's hooks are not registered" in missing.detail
    assert missing.fix == "engram install --agent copilot"
    copilot.install(registration, copilot_dir=copilot_dir)
    [good] = copilot.problems(settings, env)
    assert good.ok and "SessionStart, PostToolUse, PostToolUseFailure registered" in good.detail
    (copilot_dir / "settings.json").write_text(json.dumps({"disableAllHooks": True}))
    [off] = copilot.problems(settings, env)
    assert not off.ok and "disableAllHooks" in off.detail
    (copilot_dir / "settings.json").unlink()
    (copilot_dir / "mcp-config.json").write_text(json.dumps(USER_MCP))
    [no_server] = copilot.problems(settings, env)
    assert not no_server.ok and "no engram MCP server" in no_server.detail
    nowhere = {"HOME": "/nowhere", "PATH": "", "COPILOT_HOME": "/nowhere/.copilot"}
    [absent] = copilot.problems(load_settings(nowhere), nowhere)
    assert absent.ok and "not installed here" in absent.detail
