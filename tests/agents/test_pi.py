"""`engram install` / `uninstall` for pi: Engram's extension written into pi's agent folder with this registration's
commands and Engram's memory tools (as its MCP server lists them), idempotent, removed exactly; another file of
that name left untouched with the fix; doctor's check."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from processor.config import load_settings
from processor.install import pi
from processor.install.registration import InstallError, Registration, hook_python

PYTHON = hook_python()


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "home" / ".pi" / "agent"
    folder.mkdir(parents=True)
    (folder / "settings.json").write_text('{"defaultProvider": "anthropic"}\n')
    return folder


def test_install_writes_the_extension_and_uninstall_removes_it(agent_dir: Path, registration: Registration) -> None:
    before = sorted(p.name for p in agent_dir.iterdir())
    report = pi.install(registration, folder=agent_dir)
    assert "extensions/engram.ts: created" in report.describe()
    text = (agent_dir / "extensions" / "engram.ts").read_text()
    assert text.startswith("// Engram's extension for pi") and "const ENGRAM: any = {" in text
    config = pi.extension(agent_dir).config()
    assert config["hooks"]["sessionStart"][-1] == "pi" and config["hooks"]["afterTool"][-2:] == [
        str(registration.hook_script), "pi"]
    assert config["mcp"] == [PYTHON, "-I", "-m", "mcp_tools.bridge"]
    tools = {tool["name"]: tool for tool in config["tools"]}
    assert {"memory_recall", "memory_expand", "memory_remember", "memory_forget"} <= set(tools)
    assert tools["memory_recall"]["inputSchema"]["required"] == ["query"] and config["protocolVersion"]
    assert not pi.install(registration, folder=agent_dir).changed
    pi.install(dataclasses.replace(registration, prompt_submit=True), folder=agent_dir)
    assert pi.extension(agent_dir).config()["hooks"]["prompt"][-1] == "pi"
    pi.uninstall(folder=agent_dir)
    assert sorted(p.name for p in agent_dir.iterdir()) == before  # the extensions folder it made is gone too
    assert not pi.uninstall(folder=agent_dir).changed  # nothing of Engram's left: nothing to do


def test_an_extension_of_that_name_that_is_not_engrams_is_left_untouched(agent_dir: Path,
                                                                         registration: Registration) -> None:
    mine = agent_dir / "extensions" / "engram.ts"
    mine.parent.mkdir()
    mine.write_text("export default function (pi: any) {}\n")
    with pytest.raises(InstallError, match="engram.ts exists and is not Engram's; move it aside"):
        pi.install(registration, folder=agent_dir)
    with pytest.raises(InstallError, match="not Engram's"):
        pi.uninstall(folder=agent_dir)
    assert mine.read_text() == "export default function (pi: any) {}\n"


def test_doctor_finds_the_extension_and_the_programs_it_runs(agent_dir: Path, registration: Registration,
                                                            tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home"), "PATH": ""}
    settings = load_settings(env={**env, "ENGRAM_HOME": str(tmp_path / "engram")})
    [check] = pi.problems(settings, env)
    assert not check.ok and "engram.ts does not exist" in check.detail
    pi.install(registration, folder=agent_dir)
    [check] = pi.problems(settings, env)
    assert check.ok and "tool_result" in check.detail, check
    gone = dataclasses.replace(registration, hook_python=str(tmp_path / "deleted-venv" / "python"))
    pi.install(gone, folder=agent_dir)
    [check] = pi.problems(settings, env)
    assert not check.ok and "deleted-venv" in check.detail and check.fix == pi.FIX
