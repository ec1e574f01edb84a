"""`engram install` / `uninstall` for opencode: Engram's plugin written into its config folder with this
registration's commands, the MCP server merged into the user's opencode.json, the folder pre-seeded against
opencode's npm step only where it holds nothing of the user's; all of it idempotent and removed byte for byte; a
file that cannot be used left untouched, with one clear error and the fix; doctor's check."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from processor.config import load_settings
from processor.install import opencode
from processor.install.registration import InstallError, Registration, hook_python

PYTHON = hook_python()
USER_CONFIG = {
    "$schema": "https://opencode.ai/config.json",
    "provider": {"anthropic": {"options": {"apiKey": "sk-ant-SECRET"}}},
    "mcp": {"github": {"type": "remote", "url": "https://api.githubcopilot.com/mcp/"}},
    "model": "anthropic/claude-sonnet-4-5",
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "home" / ".config" / "opencode"
    path.mkdir(parents=True)
    (path / "opencode.json").write_text(json.dumps(USER_CONFIG, indent=2) + "\n")
    return path


def files(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*")) if ".engram-backup-" not in p.name}


def test_install_writes_the_plugin_and_the_server_and_uninstall_gives_everything_back(
        folder: Path, registration: Registration) -> None:
    before = files(folder)
    report = opencode.install(registration, folder=folder)
    data = json.loads((folder / "opencode.json").read_text())
    assert data["provider"] == USER_CONFIG["provider"] and data["mcp"]["github"] == USER_CONFIG["mcp"]["github"]
    assert data["mcp"]["engram"] == {"type": "local", "command": [PYTHON, "-I", "-m", "mcp_tools.bridge"],
                                     "enabled": True}
    plugin = (folder / "plugin" / "engram.js").read_text()
    assert plugin.startswith("// Engram's plugin for opencode")
    config = opencode.plugin(folder).config()
    assert config["hooks"]["sessionStart"][-2:] == [str(registration.hook_script.with_name("session_start.py")),
                                                    "opencode"]
    assert config["hooks"]["afterTool"][-1] == "opencode" and config["hooks"]["toolError"][-1] == "opencode"
    assert "prompt" not in config["hooks"] and config["timeouts"]["afterTool"] == 10_000
    assert "sk-ant-SECRET" not in report.describe()
    assert json.loads((folder / "package-lock.json").read_text())["packages"][""]["dependencies"] == {
        "@opencode-ai/plugin": "*"}
    assert (folder / "node_modules").is_dir()
    assert not opencode.install(registration, folder=folder).changed  # twice changes nothing
    opencode.uninstall(folder=folder)
    # Byte for byte as before, the plugin folder it made gone, and no backup left (the file is back as it was).
    assert files(folder) == before and not list(folder.glob("*.engram-backup-*"))


def test_a_folder_with_packages_of_the_users_own_is_not_seeded(folder: Path, registration: Registration) -> None:
    (folder / "package.json").write_text('{"dependencies": {"opencode-wakatime": "1.0.0"}}\n')
    opencode.install(registration, folder=folder)
    assert not (folder / "package-lock.json").exists() and not (folder / "node_modules").exists()
    opencode.uninstall(folder=folder)
    assert (folder / "package.json").read_text() == '{"dependencies": {"opencode-wakatime": "1.0.0"}}\n'


def test_what_opencode_changed_in_the_seeded_files_is_kept(folder: Path, registration: Registration) -> None:
    opencode.install(registration, folder=folder)
    (folder / "package.json").write_text('{"dependencies": {"@opencode-ai/plugin": "1.18.33", "x": "1"}}\n')
    (folder / "node_modules" / "x").mkdir()
    opencode.uninstall(folder=folder)
    assert (folder / "package.json").exists() and (folder / "node_modules" / "x").is_dir()


def test_the_prompt_hook_is_added_kept_and_removed_as_asked(folder: Path, registration: Registration) -> None:
    opencode.install(dataclasses.replace(registration, prompt_submit=True), folder=folder)
    assert opencode.plugin(folder).config()["hooks"]["prompt"][-2:] == [
        str(registration.hook_script.with_name("prompt_submit.py")), "opencode"]
    opencode.install(registration, folder=folder)  # not said: kept
    assert "prompt" in opencode.plugin(folder).config()["hooks"]
    opencode.install(dataclasses.replace(registration, prompt_submit=False), folder=folder)
    assert "prompt" not in opencode.plugin(folder).config()["hooks"]


@pytest.mark.parametrize(("name", "text", "message"), [
    ("opencode.json", '{"model": "x",}\n', "opencode.json: invalid JSON at line 1 column 15"),
    ("opencode.json", '{"mcp": []}\n', '"mcp" is a list, expected an object'),
    ("opencode.json", '{"mcp": {"engram": {"type": "remote", "url": "https://x"}}}\n',
     "an MCP server named 'engram' is already configured and is not Engram's"),
    ("plugin/engram.js", "export const Mine = async () => ({})\n", "engram.js exists and is not Engram's"),
])
def test_a_file_engram_cannot_use_is_left_untouched_with_one_error(folder: Path, registration: Registration,
                                                                  name: str, text: str, message: str) -> None:
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    before = files(folder)
    with pytest.raises(InstallError, match=message):
        opencode.install(registration, folder=folder)
    assert files(folder) == before


def test_a_commented_config_alone_is_an_error_naming_the_fix(tmp_path: Path, registration: Registration) -> None:
    folder = tmp_path / "opencode"
    folder.mkdir()
    (folder / "opencode.jsonc").write_text('{\n  // mine\n  "model": "x"\n}\n')
    with pytest.raises(InstallError, match=r"opencode.jsonc: .*JSON with comments.*--agent opencode --print"):
        opencode.install(registration, folder=folder)
    assert sorted(p.name for p in folder.iterdir()) == ["opencode.jsonc"]


def test_doctor_finds_what_is_missing_and_what_is_right(folder: Path, registration: Registration,
                                                        tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home"), "PATH": ""}
    settings = load_settings(env={**env, "ENGRAM_HOME": str(tmp_path / "engram")})
    [check] = opencode.problems(settings, env)
    assert not check.ok and "plugin/engram.js does not exist" in check.detail and check.fix == opencode.FIX
    opencode.install(registration, folder=folder)
    [check] = opencode.problems(settings, env)
    assert check.ok and "tool.execute.after" in check.detail and "MCP server engram" in check.detail, check
    config = json.loads((folder / "opencode.json").read_text())
    del config["mcp"]["engram"]
    (folder / "opencode.json").write_text(json.dumps(config))
    [check] = opencode.problems(settings, env)
    assert not check.ok and "no engram MCP server" in check.detail
    [check] = opencode.problems(settings, {"HOME": str(tmp_path / "nobody"), "PATH": ""})
    assert check.ok and "not installed here" in check.detail
