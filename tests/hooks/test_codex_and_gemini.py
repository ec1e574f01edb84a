"""The hooks as the Codex CLI and the Gemini CLI run them: the registered commands (the agent named after the
script), each agent's event and tool names, and the output shape."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from processor.hook_kit import hook_io
from processor.install.codex import hook_specs as codex_hooks
from processor.install.gemini import hook_specs as gemini_hooks
from processor.install.registration import Registration, hook_python
from processor.recall.digest import header

REPO = Path(__file__).resolve().parents[2]
SESSION = "65ee1762-6168-4b24-bdb7-7a52ae4fdcd5"
LESSON = {"id": "ep_1e55011e55011e55", "bite": "`dist/` is git-ignored, so `dist/app.js` must be force-added with "
                                               "`git add -f`.", "date": "2026-11-27", "importance": "normal",
          "kind": "gotcha", "session": "another-session"}
BITE = {"id": "ep_b17eb17eb17eb17e", "bite": "shop-api bundles are built with esbuild into dist/app.js",
        "date": "2026-11-24", "importance": "normal"}


def test_each_agent_is_told_the_tool_names_it_shows_its_model() -> None:
    assert "mcp__engram__memory_expand(id)" in hook_io.format_context(["- x"], "codex")
    assert "mcp_engram_memory_expand(id)" in hook_io.format_context(["- x"], "gemini")
    assert "mcp_engram_memory_recall(query)" in header("gemini") and "mcp__engram__memory_recall" in header("claude")


@pytest.fixture
def registration() -> Registration:
    python = hook_python()
    return Registration(hook_python=python, engram_python=python, hook_script=REPO / "recall_hook" / "pretooluse.py")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "engram-home"
    (root / "recollections" / "lessons").mkdir(parents=True, mode=0o700)
    (root / "recollections" / f"{SESSION}.json").write_text(json.dumps(
        {"messageUuid": f"{SESSION}:m1", "timestamp": 1, "bites": [BITE], "lessons": "shop.index",
         "root": "/repo"}))
    (root / "recollections" / "lessons" / "shop.index").write_text(
        json.dumps({"project": "/repo"}) + "\n" + json.dumps("cmd:git add") + "\t" + json.dumps([LESSON]) + "\n")
    return root


def run(command: str, event: dict, home: Path, tmp_path: Path) -> dict:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ENGRAM_HOME": str(home), "ENGRAM_SHOW_INJECTED": "0"}
    done = subprocess.run(shlex.split(command), input=json.dumps(event).encode(), capture_output=True, env=env,
                          timeout=10)
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    return json.loads(done.stdout) if done.stdout else {}


def test_geminis_after_tool_hook_answers_in_its_own_event(registration: Registration, home: Path,
                                                         tmp_path: Path) -> None:
    [after_tool] = [spec for spec, _ in gemini_hooks(registration) if spec.event == "AfterTool"]
    event = {"session_id": SESSION, "cwd": "/repo", "hook_event_name": "AfterTool", "tool_name": "run_shell_command",
             "tool_input": {"command": "git add dist/app.js"},
             "tool_response": {"llmContent": "Output: The following paths are ignored\nExit Code: 1"}}
    output = run(after_tool.command, event, home, tmp_path)
    specific = output["hookSpecificOutput"]
    assert specific["hookEventName"] == "AfterTool"
    context = specific["additionalContext"]
    assert "You have memories related to this conversation" in context and BITE["id"] in context
    assert "About this call on git add dist/app.js" in context and LESSON["id"] in context
    assert "mcp_engram_memory_expand(id)" in context and "mcp__engram__" not in context
    assert "decision" not in output and "permissionDecision" not in json.dumps(output)


def test_a_file_gemini_just_created_is_not_told_about(registration: Registration, home: Path,
                                                      tmp_path: Path) -> None:
    index = home / "recollections" / "lessons" / "shop.index"
    index.write_text(index.read_text() + json.dumps("file:src/new.ts") + "\t" + json.dumps([LESSON]) + "\n")
    (home / "recollections" / f"{SESSION}.state").write_text(json.dumps({"lastInjectedMessageUuid": f"{SESSION}:m1"}))
    [after_tool] = [spec for spec, _ in gemini_hooks(registration) if spec.event == "AfterTool"]
    event = {"session_id": SESSION, "hook_event_name": "AfterTool", "tool_name": "write_file",
             "tool_input": {"file_path": "/repo/src/new.ts", "content": "x"},
             "tool_response": {"llmContent": "Successfully created and wrote to new file: /repo/src/new.ts."}}
    assert run(after_tool.command, event, home, tmp_path) == {}


def test_codexs_pretooluse_hook_answers_as_claude_codes_does(registration: Registration, home: Path,
                                                            tmp_path: Path) -> None:
    [pre] = [spec for spec, _ in codex_hooks(registration) if spec.event == "PreToolUse"]
    assert pre.command.endswith(" codex")
    event = {"session_id": SESSION, "turn_id": "t1", "cwd": "/repo", "hook_event_name": "PreToolUse",
             "model": "gpt-5-fake", "tool_name": "Bash", "tool_input": {"command": "git add dist/app.js"},
             "tool_use_id": "call_2"}
    specific = run(pre.command, event, home, tmp_path)["hookSpecificOutput"]
    assert specific["hookEventName"] == "PreToolUse"
    assert "Before this call on git add dist/app.js" in specific["additionalContext"]
    assert "mcp__engram__memory_expand(id)" in specific["additionalContext"]


def test_the_prompt_hook_answers_geminis_before_agent(registration: Registration, home: Path,
                                                      tmp_path: Path) -> None:
    import dataclasses

    [before_agent] = [spec for spec, _ in gemini_hooks(dataclasses.replace(registration, prompt_submit=True))
                      if spec.event == "BeforeAgent"]
    (home / "config.toml").write_text("prompt_submit_enabled = true\n")
    (home / "recollections" / f"{SESSION}.json").write_text(json.dumps(
        {"messageUuid": f"{SESSION}:m2", "timestamp": 4102444800000, "bites": [BITE]}))
    event = {"session_id": SESSION, "cwd": "/repo", "hook_event_name": "BeforeAgent",
             "prompt": "How do I build the bundle?", "transcript_path": "/nowhere.jsonl"}
    specific = run(before_agent.command, event, home, tmp_path)["hookSpecificOutput"]
    assert specific["hookEventName"] == "BeforeAgent" and BITE["id"] in specific["additionalContext"]
