"""The hooks as opencode's plugin and pi's extension run them: the commands install writes into them (the agent
named after the script), the events they make of their agent's (after a call, a call that threw), each agent's
tool names, and what is told after a call: the bites, the call's lessons, the fix of a failure. And Engram's opencode
plugin as install writes it, run under Node with opencode's hook inputs and outputs (the real CLI runs it in
tests/e2e/test_opencode_and_pi_cli.py)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from processor.hook_kit import hook_io
from processor.hook_kit.failure_keys import signature
from processor.install import opencode
from processor.install.opencode import hook_specs as opencode_hooks
from processor.install.pi import hook_specs as pi_hooks
from processor.install.registration import Registration
from processor.recall.digest import header
from tests.hooks.test_codex_and_gemini import BITE, LESSON, run

SESSION = "ses_ddf44e531ffegh4nsLDG3f0U4G"
RELEASE_ERROR = ("usage: release.py [-h] --version VERSION\n"
                 "release.py: error: the following arguments are required: --version")
FIX = {"id": "ep_f1f1f1f1f1f1f1f1", "bite": "tools/release.py needs --version", "date": "2026-11-26",
       "importance": "normal", "session": "another-session", "sig": signature(RELEASE_ERROR),
       "fix": "python3 tools/release.py --version 1.2.0"}
READ_ERROR = "File not found: /repo/config/settings.toml"
READ_FIX = {"id": "ep_5e77195e77195e77", "bite": "the settings live in config/settings.example.toml",
            "date": "2026-11-25", "importance": "normal", "session": "another-session", "sig": signature(READ_ERROR),
            "fix": "cp config/settings.example.toml config/settings.toml"}


def test_opencode_and_pi_are_told_the_tool_names_they_show_their_model() -> None:
    for agent in ("opencode", "pi"):
        assert "engram_memory_expand(id)" in hook_io.format_context(["- x"], agent)
        assert "engram_memory_recall(query)" in header(agent) and "mcp__" not in header(agent)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "engram-home"
    (root / "recollections" / "lessons").mkdir(parents=True, mode=0o700)
    (root / "recollections" / f"{SESSION}.json").write_text(json.dumps(
        {"messageUuid": f"{SESSION}:prt_1", "timestamp": 1, "bites": [BITE], "lessons": "shop.index",
         "root": "/repo"}))
    lines = [json.dumps({"project": "/repo"}), json.dumps("cmd:git add") + "\t" + json.dumps([LESSON]),
             json.dumps("fail:python") + "\t" + json.dumps([FIX]),
             json.dumps("fail:tool:Read") + "\t" + json.dumps([READ_FIX])]
    (root / "recollections" / "lessons" / "shop.index").write_text("\n".join(lines) + "\n")
    return root


def command(specs: list, event: str, script: str) -> str:
    [spec] = [spec for spec, _ in specs if spec.event == event and script in spec.command]
    return spec.command


def context(answer: dict) -> str:
    return answer.get("hookSpecificOutput", {}).get("additionalContext", "")


def test_after_an_opencode_call_the_bites_and_the_calls_lessons_are_told(registration: Registration, home: Path,
                                                                         tmp_path: Path) -> None:
    hook = command(opencode_hooks(registration), "tool.execute.after", "pretooluse.py")
    assert hook.endswith(" opencode")
    event = {"session_id": SESSION, "cwd": "/repo", "hook_event_name": "tool.execute.after", "tool_name": "bash",
             "tool_input": {"command": "git add dist/app.js", "description": "stage"}, "tool_use_id": "call_1",
             "tool_response": {"output": "The following paths are ignored by one of your .gitignore files",
                               "exit": 1}, "created": False}
    told = context(run(hook, event, home, tmp_path))
    assert "You have memories related to this conversation" in told and BITE["id"] in told
    assert "About this call on git add dist/app.js" in told and LESSON["id"] in told
    assert "engram_memory_expand(id)" in told and "mcp__engram__" not in told
    # Told once a session: the same call again hears nothing new.
    assert run(hook, event, home, tmp_path) == {}


def test_after_an_opencode_shell_command_that_exited_non_zero_the_fix_is_told(registration: Registration,
                                                                              home: Path, tmp_path: Path) -> None:
    hook = command(opencode_hooks(registration), "tool.execute.after", "pretooluse.py")
    event = {"session_id": SESSION, "cwd": "/repo", "hook_event_name": "tool.execute.after", "tool_name": "bash",
             "tool_input": {"command": "python3 tools/release.py"}, "tool_use_id": "call_2",
             "tool_response": {"output": RELEASE_ERROR + "\n", "exit": 2}}
    told = context(run(hook, event, home, tmp_path))
    assert "This failed the same way in an earlier session" in told and FIX["id"] in told and FIX["fix"] in told
    # Exit 0 is no failure: nothing is told of the fix.
    (home / "recollections" / f"{SESSION}.shown").unlink()
    event = {**event, "tool_response": {"output": RELEASE_ERROR, "exit": 0}}
    assert FIX["id"] not in context(run(hook, event, home, tmp_path))


def test_an_opencode_tool_that_threw_gets_the_fix_appended_to_its_error(registration: Registration, home: Path,
                                                                        tmp_path: Path) -> None:
    hook = command(opencode_hooks(registration), "experimental.chat.messages.transform", "tool_failure.py")
    event = {"session_id": SESSION, "cwd": "/repo", "hook_event_name": "experimental.chat.messages.transform",
             "tool_name": "read", "tool_input": {"filePath": "/repo/config/settings.toml"}, "tool_use_id": "call_3",
             "error": READ_ERROR}
    told = context(run(hook, event, home, tmp_path))
    assert READ_FIX["id"] in told and READ_FIX["fix"] in told and "engram_memory_expand(id)" in told


def test_after_a_pi_call_marked_is_error_the_fix_is_told(registration: Registration, home: Path,
                                                         tmp_path: Path) -> None:
    hook = command(pi_hooks(registration), "tool_result", "pretooluse.py")
    assert hook.endswith(" pi")
    event = {"session_id": SESSION, "cwd": "/repo", "hook_event_name": "tool_result", "tool_name": "bash",
             "tool_input": {"command": "python3 tools/release.py"}, "tool_use_id": "call_4",
             "tool_response": {"output": RELEASE_ERROR + "\n\n\nCommand exited with code 2", "is_error": True},
             "created": False}
    told = context(run(hook, event, home, tmp_path))
    assert FIX["id"] in told and BITE["id"] in told
    read = {**event, "tool_name": "read", "tool_input": {"path": "/repo/config/settings.toml"},
            "tool_response": {"output": READ_ERROR, "is_error": True}}
    assert READ_FIX["id"] in context(run(hook, read, home, tmp_path))


def test_a_file_the_plugin_saw_created_is_not_told_about(registration: Registration, home: Path,
                                                         tmp_path: Path) -> None:
    index = home / "recollections" / "lessons" / "shop.index"
    index.write_text(index.read_text() + json.dumps("file:src/new.ts") + "\t" + json.dumps([LESSON]) + "\n")
    state = {"lastInjectedMessageUuid": f"{SESSION}:prt_1"}  # the message's bites were told
    (home / "recollections" / f"{SESSION}.state").write_text(json.dumps(state))
    for specs, event_name, tool, key in ((opencode_hooks(registration), "tool.execute.after", "write", "filePath"),
                                         (pi_hooks(registration), "tool_result", "write", "path")):
        hook = command(specs, event_name, "pretooluse.py")
        event = {"session_id": SESSION, "cwd": "/repo", "hook_event_name": event_name, "tool_name": tool,
                 "tool_input": {key: "/repo/src/new.ts", "content": "x"},
                 "tool_response": {"output": "Wrote file successfully."}, "created": True}
        assert LESSON["id"] in context(run(hook, {**event, "created": False}, home, tmp_path))  # it was there
        (home / "recollections" / f"{SESSION}.shown").unlink()
        assert run(hook, event, home, tmp_path) == {}  # the agent made it: nobody left anything on it
        assert run(hook, {**event, "created": False}, home, tmp_path) == {}  # its own file, now and later
        (home / "recollections" / f"{SESSION}.shown").unlink()


def test_the_kit_reads_each_plugin_event() -> None:
    bash = {"hook_event_name": "tool.execute.after", "tool_name": "bash", "tool_input": {"command": "ls"},
            "tool_response": {"output": "no such file", "exit": 2}}
    assert hook_io.failed_call(bash) == ("Bash", "no such file") and hook_io.after_call(bash)
    assert hook_io.failed_call({**bash, "tool_response": {"output": "x", "exit": 0}}) is None
    assert hook_io.failed_call({**bash, "tool_response": {"output": "x", "exit": True}}) is None
    pi = {"hook_event_name": "tool_result", "tool_name": "read", "tool_input": {"path": "a"},
          "tool_response": {"output": "ENOENT", "is_error": True}}
    assert hook_io.failed_call(pi) == ("Read", "ENOENT") and hook_io.may_have_failed(pi)
    assert hook_io.failed_call({**pi, "tool_response": {"output": "ok", "is_error": False}}) is None
    thrown = {"hook_event_name": "experimental.chat.messages.transform", "tool_name": "read", "error": "gone"}
    assert hook_io.failed_call(thrown) == ("Read", "gone")
    assert hook_io.call_of({"tool_name": "read", "tool_input": {"filePath": "/r/a.py"}}) == (
        "Read", {"filePath": "/r/a.py", "file_path": "/r/a.py"})
    assert not hook_io.after_call({"hook_event_name": "PreToolUse"})


# ---------------------------------------------------------------- the opencode plugin under Node

NODE = shutil.which("node")
HARNESS = """
const { EngramMemory } = await import(process.argv[2])
const hooks = await EngramMemory({ directory: process.argv[3], client: null })
const out = {}
const bash = { tool: "bash", sessionID: "%(session)s", callID: "call_1", args: { command: "python3 tools/release.py" } }
const result = { title: "", output: %(release)s, metadata: { output: %(release)s, exit: 2 } }
await hooks["tool.execute.after"](bash, result)
out.afterTool = result.output
const mcp = { output: { content: [{ type: "text", text: "hits" }] }, metadata: {} }
await hooks["tool.execute.after"]({ ...bash, tool: "engram_memory_recall", callID: "call_2", args: {} }, mcp)
out.mcp = mcp.output
const thrown = () => ({ messages: [
  { info: { role: "user", sessionID: "%(session)s" }, parts: [{ type: "text", text: "hi" }] },
  { info: { role: "assistant", sessionID: "%(session)s" }, parts: [{ type: "tool", callID: "call_3", tool: "read",
    sessionID: "%(session)s", state: { status: "error", input: { filePath: "/repo/config/settings.toml" },
    error: %(read)s } }] }] })
const first = thrown(); await hooks["experimental.chat.messages.transform"]({}, first)
const second = thrown(); await hooks["experimental.chat.messages.transform"]({}, second)
out.thrown = [first.messages[1].parts[0].state.error, second.messages[1].parts[0].state.error]
console.log(JSON.stringify(out))
"""


@pytest.mark.skipif(NODE is None, reason="node is not installed: the plugin cannot be run outside opencode")
def test_the_plugin_tells_after_calls_and_after_a_tool_that_threw(tmp_path: Path, registration: Registration,
                                                                 home: Path) -> None:
    folder = tmp_path / "opencode"
    (folder).mkdir()
    opencode.install(registration, folder=folder)
    # Node reads a .js file as CommonJS: the same module under .mjs, as Bun reads it in opencode.
    module = tmp_path / "engram.mjs"
    module.write_text((folder / "plugin" / "engram.js").read_text())
    script = tmp_path / "harness.mjs"
    script.write_text(HARNESS % {"session": SESSION, "release": json.dumps(RELEASE_ERROR),
                                 "read": json.dumps(READ_ERROR)})
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ENGRAM_HOME": str(home), "ENGRAM_SHOW_INJECTED": "0"}
    done = subprocess.run([NODE, str(script), module.as_uri(), str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["afterTool"].startswith(RELEASE_ERROR)  # the result first, then what is told
    assert BITE["id"] in out["afterTool"] and FIX["id"] in out["afterTool"] and FIX["fix"] in out["afterTool"]
    assert LESSON["id"] not in out["afterTool"]  # a lesson about another command
    assert out["mcp"] == {"content": [{"type": "text", "text": "hits"}]}  # an MCP result is left alone
    first, second = out["thrown"]
    assert first.startswith(READ_ERROR) and READ_FIX["id"] in first and READ_FIX["fix"] in first
    assert second == first  # asked once, re-applied to the next request's copy of the messages


@pytest.mark.skipif(NODE is None, reason="node is not installed: the plugin cannot be run outside opencode")
def test_a_hook_that_cannot_run_leaves_opencode_as_it_was(tmp_path: Path, registration: Registration) -> None:
    folder = tmp_path / "opencode"
    folder.mkdir()
    opencode.install(dataclasses.replace(registration, hook_python=str(tmp_path / "gone" / "python")),
                     folder=folder)
    module = tmp_path / "engram.mjs"
    module.write_text((folder / "plugin" / "engram.js").read_text())
    script = tmp_path / "harness.mjs"
    script.write_text(HARNESS % {"session": SESSION, "release": json.dumps(RELEASE_ERROR),
                                 "read": json.dumps(READ_ERROR)})
    done = subprocess.run([NODE, str(script), module.as_uri(), str(tmp_path)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["afterTool"] == RELEASE_ERROR and out["thrown"] == [READ_ERROR, READ_ERROR]
