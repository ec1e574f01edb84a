"""The hooks as the GitHub Copilot CLI and Qwen Code run them: the registered commands (the agent named after the
script), their Claude-shaped events after a call (PostToolUse, PostToolUseFailure: neither agent reads a context
before a call), each agent's tool names and failures, and the answer's shape (Copilot reads it at the top level)."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from processor.hook_kit import hook_io
from processor.hook_kit.failure_keys import signature
from processor.install.copilot import hook_specs as copilot_hooks
from processor.install.qwen import hook_specs as qwen_hooks
from processor.install.registration import Registration, hook_python
from processor.recall.digest import header

REPO = Path(__file__).resolve().parents[2]
SESSION = "a29bf4cc-7296-43e4-8e74-357d75f2501c"
LESSON = {"id": "ep_1e55011e55011e55", "bite": "`dist/` is git-ignored, so `dist/app.js` must be force-added with "
                                               "`git add -f`.", "date": "2026-11-27", "importance": "normal",
          "kind": "gotcha", "session": "another-session"}
BITE = {"id": "ep_b17eb17eb17eb17e", "bite": "shop-api bundles are built with esbuild into dist/app.js",
        "date": "2026-11-24", "importance": "normal"}
IGNORED = ("The following paths are ignored by one of your .gitignore files:\ndist\n"
           "hint: Use -f if you really want to add them.")
FIX = {"id": "ep_f1f1f1f1f1f1f1f1", "bite": "git add of an ignored file fails; force it", "date": "2026-11-26",
       "importance": "normal", "session": "another-session", "sig": signature(IGNORED), "fix": "git add -f dist/app.js"}
MISSING = "File not found: /repo/src/missing.ts"
READ_FIX = {"id": "ep_4ead4ead4ead4ead", "bite": "src/missing.ts moved to src/lib/", "date": "2026-11-25",
            "importance": "normal", "session": "another-session", "sig": signature(MISSING),
            "fix": "read src/lib/missing.ts"}


def test_each_agent_is_told_the_tool_names_it_shows_its_model() -> None:
    assert "engram-memory_expand(id)" in hook_io.format_context(["- x"], "copilot")
    assert "engram-memory_recall(query)" in header("copilot")
    assert "mcp__engram__memory_expand(id)" in hook_io.format_context(["- x"], "qwen")  # Qwen: as Claude Code


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
    lines = [json.dumps({"project": "/repo"}), json.dumps("cmd:git add") + "\t" + json.dumps([LESSON]),
             json.dumps("fail:git") + "\t" + json.dumps([FIX]), json.dumps("fail:tool:Read") + "\t" + json.dumps(
                 [READ_FIX]), json.dumps("file:src/new.ts") + "\t" + json.dumps([LESSON])]
    (root / "recollections" / "lessons" / "shop.index").write_text("\n".join(lines) + "\n")
    return root


def run(command: str, event: dict, home: Path, tmp_path: Path) -> dict:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ENGRAM_HOME": str(home), "ENGRAM_SHOW_INJECTED": "0"}
    done = subprocess.run(shlex.split(command), input=json.dumps(event).encode(), capture_output=True, env=env,
                          timeout=10)
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    return json.loads(done.stdout) if done.stdout else {}


def spec_of(specs: list, event: str) -> str:
    [command] = [spec.command for spec, _ in specs if spec.event == event]
    return command


def test_copilots_shell_call_that_exited_non_zero_is_told_its_lessons_and_its_fix(
        registration: Registration, home: Path, tmp_path: Path) -> None:
    """A non-zero exit is a successful call to Copilot (PostToolUse); the hook reads the failure from the result's
    closing ``<shellId: …>`` line, and answers in both shapes Copilot reads."""
    command = spec_of(copilot_hooks(registration), "PostToolUse")
    assert command.endswith("pretooluse.py copilot")
    event = {"hook_event_name": "PostToolUse", "session_id": SESSION, "cwd": "/repo", "tool_name": "Bash",
             "tool_input": {"command": "git add dist/app.js", "description": "stage"},
             "tool_result": {"result_type": "success",
                             "text_result_for_llm": f"{IGNORED}\n<shellId: 0 completed with exit code 1>"}}
    output = run(command, event, home, tmp_path)
    context = output["additionalContext"]
    assert output["hookSpecificOutput"] == {"hookEventName": "PostToolUse", "additionalContext": context}
    assert "You have memories related to this conversation" in context and BITE["id"] in context
    assert "About this call on git add dist/app.js" in context and LESSON["id"] in context  # after, not before
    assert "This failed the same way" in context and "git add -f dist/app.js" in context and FIX["id"] in context
    assert "engram-memory_expand(id)" in context and "mcp__engram__" not in context
    assert "decision" not in output and "permissionDecision" not in json.dumps(output)
    # The same call once more: every memory was told once this session; nothing is said again.
    assert run(command, event, home, tmp_path) == {}


def test_copilots_shell_call_that_exited_0_gets_no_fix(registration: Registration, home: Path,
                                                       tmp_path: Path) -> None:
    event = {"hook_event_name": "PostToolUse", "session_id": SESSION, "cwd": "/repo", "tool_name": "Bash",
             "tool_input": {"command": "git add -f dist/app.js"},
             "tool_result": {"result_type": "success",
                             "text_result_for_llm": "<shellId: 1 completed with exit code 0>"}}
    context = run(spec_of(copilot_hooks(registration), "PostToolUse"), event, home, tmp_path)["additionalContext"]
    assert "This failed the same way" not in context and FIX["id"] not in context


def test_copilots_failed_tool_gets_its_fix_at_post_tool_use_failure(registration: Registration, home: Path,
                                                                   tmp_path: Path) -> None:
    event = {"hook_event_name": "PostToolUseFailure", "session_id": SESSION, "cwd": "/repo", "tool_name": "view",
             "tool_input": {"path": "/repo/src/missing.ts"}, "error": MISSING}
    output = run(spec_of(copilot_hooks(registration), "PostToolUseFailure"), event, home, tmp_path)
    assert output["hookSpecificOutput"]["hookEventName"] == "PostToolUseFailure"
    assert READ_FIX["id"] in output["additionalContext"] and "read src/lib/missing.ts" in output["additionalContext"]


def test_a_file_copilot_just_created_is_not_told_about(registration: Registration, home: Path,
                                                       tmp_path: Path) -> None:
    (home / "recollections" / f"{SESSION}.state").write_text(json.dumps({"lastInjectedMessageUuid": f"{SESSION}:m1"}))
    event = {"hook_event_name": "PostToolUse", "session_id": SESSION, "cwd": "/repo", "tool_name": "Write",
             "tool_input": {"path": "/repo/src/new.ts", "file_text": "x"},
             "tool_result": {"result_type": "success",
                             "text_result_for_llm": "Created file /repo/src/new.ts with 1 characters"}}
    assert run(spec_of(copilot_hooks(registration), "PostToolUse"), event, home, tmp_path) == {}


def test_qwens_failed_shell_call_is_told_its_lessons_and_its_fix(registration: Registration, home: Path,
                                                                 tmp_path: Path) -> None:
    """Qwen reports a non-zero exit as a failed call (PostToolUseFailure) whose error is its ``Command: …`` block:
    the fix is found by the command's own output, and the answer is in hookSpecificOutput only."""
    command = spec_of(qwen_hooks(registration), "PostToolUseFailure")
    assert command.endswith("pretooluse.py qwen")
    block = (f"Command: git add dist/app.js\nDirectory: (root)\nOutput: {IGNORED}\nError: (none)\nExit Code: 1\n"
             "Signal: (none)\nProcess Group PGID: (none)")
    event = {"session_id": SESSION, "transcript_path": "/nowhere.jsonl", "cwd": "/repo",
             "hook_event_name": "PostToolUseFailure", "tool_name": "run_shell_command",
             "tool_input": {"command": "git add dist/app.js"}, "tool_use_id": "toolu_1", "error": block,
             "is_interrupt": False}
    output = run(command, event, home, tmp_path)
    assert set(output) == {"hookSpecificOutput"}
    context = output["hookSpecificOutput"]["additionalContext"]
    assert output["hookSpecificOutput"]["hookEventName"] == "PostToolUseFailure"
    assert BITE["id"] in context and "About this call on git add dist/app.js" in context and LESSON["id"] in context
    assert FIX["id"] in context and "mcp__engram__memory_expand(id)" in context


def test_qwens_interrupted_call_and_successful_call(registration: Registration, home: Path, tmp_path: Path) -> None:
    (home / "recollections" / f"{SESSION}.state").write_text(json.dumps({"lastInjectedMessageUuid": f"{SESSION}:m1"}))
    base = {"session_id": SESSION, "cwd": "/repo", "tool_name": "read_file",
            "tool_input": {"file_path": "/repo/src/missing.ts"}}
    interrupted = {**base, "hook_event_name": "PostToolUseFailure", "error": MISSING, "is_interrupt": True}
    assert run(spec_of(qwen_hooks(registration), "PostToolUseFailure"), interrupted, home, tmp_path) == {}
    success = {**base, "hook_event_name": "PostToolUse", "tool_response": {"llmContent": "export {}"}}
    assert run(spec_of(qwen_hooks(registration), "PostToolUse"), success, home, tmp_path) == {}


def test_qwens_prompt_hook_answers_once_a_prompt(registration: Registration, home: Path, tmp_path: Path) -> None:
    """Qwen runs UserPromptSubmit before every model request; only the first carries the prompt."""
    import dataclasses

    command = spec_of(qwen_hooks(dataclasses.replace(registration, prompt_submit=True)), "UserPromptSubmit")
    (home / "config.toml").write_text("prompt_submit_enabled = true\n")
    (home / "recollections" / f"{SESSION}.json").write_text(json.dumps(
        {"messageUuid": f"{SESSION}:m2", "timestamp": 4102444800000, "bites": [BITE]}))
    event = {"session_id": SESSION, "cwd": "/repo", "hook_event_name": "UserPromptSubmit", "prompt_id": "p#0",
             "prompt": "How do I build the bundle?", "transcript_path": "/nowhere.jsonl"}
    specific = run(command, event, home, tmp_path)["hookSpecificOutput"]
    assert specific["hookEventName"] == "UserPromptSubmit" and BITE["id"] in specific["additionalContext"]
    assert run(command, {**event, "prompt": ""}, home, tmp_path) == {}  # the next model request of the same turn
