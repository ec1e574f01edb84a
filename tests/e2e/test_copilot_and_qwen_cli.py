"""Engram with the real GitHub Copilot CLI and the real Qwen Code (installed from npm), each against a fake chat
completions API on 127.0.0.1, beside the real Claude Code CLI (the one claude-agent-sdk bundles), all in one
temporary HOME where `engram install --agent …` registered the hooks and the MCP server, with the real processor
capturing every agent's sessions as they are written.

What each model request carries is the proof: the digest in a CLI's first request, the bites of a prompt and
the lessons at a tool call — after the call, the nearest moment either CLI has —, the fix right after a failed
call, Engram's MCP tools listed and answering; and, across agents, a lesson learned in one agent's session told in
the next session of another agent working on the same repository, and the reverse. From the database: every
session captured (line → database p90 ≤ 1 s), each knowing its agent, nothing any hook injected captured back.
And uninstall gives each agent's files back byte for byte.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench.testbed.claude_cli import BITES_HEADER, DIGEST_HEADER, FENCE_OPEN, ClaudeCLI
from bench.testbed.fake_anthropic import Reply
from tests.e2e.test_codex_and_gemini_cli import (
    IGNORED_DIAGNOSIS,
    LINE_P90_SECONDS,
    RELEASE_DIAGNOSIS,
    after_recollection,
    failure_context,
    hit_ids,
    repository,
    seed_memories,
    snapshot,
)
from tests.support.agent_cli import COPILOT, QWEN, CaptureClock, npm_cli, p90, skip_reason
from tests.support.copilot_qwen_cli import CopilotQwenWorld, qwen_cli
from tests.support.fake_chat_completions import Request, Turn

CLAUDE = ClaudeCLI.bundled()
NO_CLAUDE = "the installed claude-agent-sdk has no bundled Claude Code CLI (claude_agent_sdk/_bundled/claude)"
COPILOT_RECALL = "engram-memory_recall"  # Copilot shows an MCP tool as <server>-<tool>
QWEN_RECALL = "mcp__engram__memory_recall"


def unescaped(text: str) -> str:
    """A hook's context as Qwen hands it to the model, `<` and `>` HTML-escaped, read back."""
    return text.replace("&lt;", "<").replace("&gt;", ">")


def told_about_call(text: str) -> str:
    """The block Engram told with a call's result about the call's file or command, "" when there is none."""
    found = re.search(r"<engram-recollection>\n(About this call on .*?)\n</engram-recollection>", text, re.DOTALL)
    return found.group(1) if found else ""


def output_of(request: Request, turn: Turn) -> str:
    """What the model got back for `turn`'s call, in `request` (the next one)."""
    [call_id] = turn.call_ids
    return request.outputs()[call_id]


def message_uuid(path: Path, record: dict[str, Any]) -> str | None:
    """The message id capture stores for a session line: Copilot's events (processor/capture/copilot.py) and
    Qwen's records (processor/capture/qwen.py) are both namespaced by the session."""
    if path.name == "events.jsonl":
        kind = record.get("type")
        if kind not in ("user.message", "assistant.message") or "agentId" in record:
            return None
        return f"{path.parent.name}:{record['id']}"
    if record.get("type") not in ("user", "assistant") or record.get("provenance") not in ("real_user",
                                                                                            "assistant_output"):
        return None
    return f"{path.stem}:{record['uuid']}"


# ---------------------------------------------------------------- GitHub Copilot CLI


@pytest.mark.skipif(CLAUDE is None, reason=NO_CLAUDE)
def test_copilot_cli_and_claude_code_share_one_memory(tmp_path: Path) -> None:
    copilot = npm_cli(COPILOT)
    if copilot is None:
        pytest.skip(skip_reason(COPILOT))
    with CopilotQwenWorld(tmp_path, claude=CLAUDE, copilot=copilot) as world:
        repository(world)
        copilot_files = world.configure_copilot()
        before_install = snapshot(*copilot_files)
        installed = world.install("copilot")
        assert "hooks/engram.json: created" in installed and "mcp-config.json: created" in installed
        world.install("claude")
        # The processor starts before Copilot ever ran here: its sessions folder appears later, and is captured.
        assert not (world.copilot_dir / "session-state").exists()
        ids = seed_memories(world)

        # ---- Copilot session A: the digest, the bites, MCP tools, and a lesson learned (a real git failure)
        prompt_a = "How do I stage the esbuild bundle dist/app.js for the release commit?"
        stage = Turn.call("bash", {"command": "git add dist/app.js", "description": "stage"})
        recall = Turn.call(COPILOT_RECALL, {"query": "esbuild bundle dist"})
        with CaptureClock(world.engram_home / "engram.db", world.copilot_sessions, message_uuid) as clock:
            world.copilot_run(prompt_a, [
                after_recollection(world, "copilot", prompt_a, stage),
                Turn.call("bash", {"command": "git add -f dist/app.js", "description": "stage"},
                          text=IGNORED_DIAGNOSIS),
                recall,
                Turn.text_only("Staged: dist/app.js is force-added."),
            ])
        requests = world.chat_api.conversation
        first = requests[0]
        # The digest is in the very first request (sessionStart's context: a message before the prompt).
        assert DIGEST_HEADER in first.all_text() and f"(id: {ids['pref']})" in first.all_text()
        assert "engram-memory_expand(id)" in first.all_text() and "mcp__engram__" not in first.all_text()
        assert BITES_HEADER not in first.all_text()
        # The prompt's bites come with its first call's result (PostToolUse: Copilot has no earlier moment), once.
        result = output_of(requests[1], stage)
        assert "ignored by one of your .gitignore files" in result  # the git failure was real
        assert BITES_HEADER in result and f"(id: {ids['fact']})" in result, result
        assert [r.all_text().count(BITES_HEADER) for r in requests] == [0] + [1] * (len(requests) - 1)
        # Engram's MCP tools are listed and answer.
        assert {COPILOT_RECALL, "engram-memory_expand", "engram-memory_remember"} <= set(requests[-1].tool_names)
        assert ids["fact"] in hit_ids(output_of(requests[3], recall)), output_of(requests[3], recall)

        [session_a] = world.sessions_of("copilot")
        rows = world.query("SELECT role, text FROM messages WHERE session_id = ? ORDER BY id", (session_a,))
        assert rows == [("user", prompt_a), ("assistant", "[tool: Bash]"),
                        ("assistant", IGNORED_DIAGNOSIS + "\n[tool: Bash]"),
                        ("assistant", "[tool: mcp__engram__memory_recall]"),
                        ("assistant", "Staged: dist/app.js is force-added.")], rows
        for _, text in rows:
            assert FENCE_OPEN not in text and DIGEST_HEADER not in text and "system_reminder" not in text
        calls = world.query("SELECT tool, target, failed FROM tool_calls WHERE session_id = ? ORDER BY rowid",
                            (session_a,))
        assert calls[:2] == [("Bash", "git add dist/app.js", 1), ("Bash", "git add -f dist/app.js", 0)], calls
        latencies = clock.latencies()
        print(f"Copilot line → database: p90 {p90(latencies):.3f} s over {len(latencies)} lines")
        assert len(latencies) >= 5 and p90(latencies) <= LINE_P90_SECONDS, latencies
        lesson_1 = world.lesson("git-ignored")  # the answer without a call ended the turn: mined at once

        # ---- Claude Code session B, same repository: told the Copilot lesson; learns one of its own
        prompt_b = "Stage the bundle and release it"
        world.ask(prompt_b, [
            world.after_recollection(prompt_b, Reply.tool("Bash", {"command": "git add dist/app.js",
                                                                   "description": "stage"})),
            Reply.tool("Bash", {"command": "python3 tools/release.py", "description": "release"}),
            Reply.tool("Bash", {"command": "python3 tools/release.py --version 1.2.0", "description": "release"},
                       text=RELEASE_DIAGNOSIS),
            Reply.tool("Bash", {"command": "git push", "description": "push"}),
            Reply.tool("Bash", {"command": "git push --set-upstream origin release", "description": "push"}),
            Reply.text("Released 1.2.0."),
        ])
        told = world.server.conversation[1].all_text()
        assert "Before this call on git add dist/app.js" in told and f"(id: {lesson_1})" in told, told[-3000:]
        lesson_2 = world.lesson("--version")
        push_fix = world.lesson("git push --set-upstream origin release")

        # ---- Copilot session C: a lesson about the file it reads, with the read's result; right after each
        # failure, what fixed it in Claude Code's session
        before_c = len(world.chat_api.conversation)
        prompt_c = "Release the current build"
        view = Turn.call("view", {"path": str(world.repo / "dist" / "app.js")})
        release = Turn.call("bash", {"command": "python3 tools/release.py", "description": "release"})
        push = Turn.call("bash", {"command": "git push", "description": "push"})
        world.copilot_run(prompt_c, [
            after_recollection(world, "copilot", prompt_c, view),
            release,
            Turn.call("bash", {"command": "git checkout -q -b hotfix", "description": "branch"}),
            push,
            Turn.text_only("It needs a version."),
        ])
        # Copilot reads no context before a call: what session A left about dist/app.js comes with the result.
        after_view = output_of(world.chat_api.conversation[before_c + 1], view)
        assert "console.log('shop-api')" in after_view
        assert f"(id: {lesson_1})" in told_about_call(after_view), after_view
        # A non-zero exit is a successful call to Copilot: its PostToolUse hook reads the exit code, and tells
        # the fix with the result (the command exited 2, yet Copilot says the tool succeeded).
        after_release = output_of(world.chat_api.conversation[before_c + 2], release)
        assert "arguments are required: --version" in after_release
        fixed = failure_context(after_release)
        assert f"(id: {lesson_2})" in fixed, after_release[-2000:]
        assert f"(id: {lesson_1})" not in fixed  # a lesson about another command is not told at this call
        after_push = output_of(world.chat_api.conversation[before_c + 4], push)
        assert "has no upstream branch" in after_push
        fixed = failure_context(after_push)
        assert f"(id: {push_fix})" in fixed and "git push --set-upstream origin release" in fixed, after_push

        # memory_recall, `engram status` and the agent of each session and memory
        status = json.loads(world.engram("status", "--json").stdout)
        assert status["sessions_by_agent"] == {"claude": 1, "copilot": 2}
        recalled = world.engram("recall", "dist git-ignored force-added", "--project", str(world.repo)).stdout
        assert any(lesson_1 in line and "Copilot CLI" in line for line in recalled.splitlines()), recalled

        # ---- uninstall gives Copilot's files back exactly (its own hooks file and MCP file: gone)
        world.uninstall("copilot")
        assert snapshot(*copilot_files) == before_install
        returncode, stderr = world.stop_processor()
    assert returncode == 0, stderr
    assert "Traceback" not in stderr, stderr


# ---------------------------------------------------------------- Qwen Code


@pytest.mark.skipif(CLAUDE is None, reason=NO_CLAUDE)
def test_qwen_code_and_claude_code_share_one_memory(tmp_path: Path) -> None:
    qwen = qwen_cli()
    if qwen is None:
        pytest.skip(skip_reason(QWEN))
    with CopilotQwenWorld(tmp_path, claude=CLAUDE, qwen=qwen) as world:
        repository(world)
        settings = world.configure_qwen()
        before_install = snapshot(settings)
        world.install("qwen")
        world.install("claude")
        ids = seed_memories(world)

        # ---- Claude Code session A learns a lesson first (the reverse direction comes second)
        world.ask("Release the build", [
            Reply.tool("Bash", {"command": "python3 tools/release.py", "description": "release"}),
            Reply.tool("Bash", {"command": "python3 tools/release.py --version 1.2.0", "description": "release"},
                       text=RELEASE_DIAGNOSIS),
            Reply.text("Released 1.2.0."),
        ])
        lesson_claude = world.lesson("--version")

        # ---- Qwen session B: the digest, the bites, the Claude Code lesson, MCP tools, a lesson of its own
        prompt_b = "How do I stage the esbuild bundle dist/app.js for the release commit?"
        release = Turn.call("run_shell_command", {"command": "python3 tools/release.py"})
        stage = Turn.call("run_shell_command", {"command": "git add dist/app.js"})
        recall = Turn.call(QWEN_RECALL, {"query": "esbuild bundle dist"})
        with CaptureClock(world.engram_home / "engram.db", world.qwen_chats, message_uuid) as clock:
            world.qwen_run(prompt_b, [
                after_recollection(world, "qwen", prompt_b, release),
                stage,
                Turn.call("run_shell_command", {"command": "git add -f dist/app.js"}, text=IGNORED_DIAGNOSIS),
                recall,
                Turn.text_only("Staged: dist/app.js is force-added."),
            ])
        requests = world.chat_api.conversation
        first = requests[0]
        # The digest reaches the first request (SessionStart's context, at the end of the system prompt).
        assert DIGEST_HEADER in first.all_text() and f"(id: {ids['pref']})" in first.all_text()
        assert "mcp__engram__memory_expand(id)" in first.all_text()
        # With the first call's result (PostToolUseFailure: a non-zero exit fails the call in Qwen): the prompt's
        # bites, and what fixed the same failure in Claude Code's session.
        result = unescaped(output_of(requests[1], release))
        assert "arguments are required: --version" in result  # the failure was real
        assert BITES_HEADER in result and f"(id: {ids['fact']})" in result, result
        assert f"(id: {lesson_claude})" in failure_context(result), result
        assert QWEN_RECALL in requests[-1].tool_names  # declared upfront (alwaysLoadTools), not behind tool_search
        assert ids["fact"] in hit_ids(output_of(requests[4], recall)), output_of(requests[4], recall)

        [session_b] = world.sessions_of("qwen")
        rows = world.query("SELECT role, text FROM messages WHERE session_id = ? ORDER BY id", (session_b,))
        assert rows[0] == ("user", prompt_b), rows
        assert ("assistant", IGNORED_DIAGNOSIS + "\n[tool: Bash]") in rows, rows
        for _, text in rows:
            assert "engram-recollection" not in text and "qwen:" not in text and DIGEST_HEADER not in text
        calls = world.query("SELECT tool, target, failed, error FROM tool_calls WHERE session_id = ? ORDER BY rowid",
                            (session_b,))
        assert ("Bash", "git add -f dist/app.js", 0, None) in calls, calls
        [(_, _, _, ignored)] = [c for c in calls if c[1] == "git add dist/app.js"]
        assert "engram-recollection" not in ignored
        # As Qwen recorded it: under load Qwen once lost git's stderr itself (its chat and the model both read
        # "Output: (empty)"); what it did record is what Engram keeps.
        recorded = "".join(path.read_text() for path in world.qwen_chats())
        if "ignored by one of your .gitignore files" not in recorded:
            # Nothing failed in what Qwen kept, so there is no lesson to learn from this session: the rest of the
            # story (told in session C) cannot happen. Said, not hidden.
            pytest.skip("Qwen lost git's stderr under load (its chat reads 'Output: (empty)')")
        assert "ignored by one of your .gitignore files" in ignored, ignored
        latencies = clock.latencies()
        print(f"Qwen line → database: p90 {p90(latencies):.3f} s over {len(latencies)} lines")
        assert len(latencies) >= 5 and p90(latencies) <= LINE_P90_SECONDS, latencies
        lesson_qwen = world.lesson("git-ignored")  # the answer without a call ended the turn: mined at once

        # ---- Claude Code session C: told the lesson the Qwen session learned
        before = len(world.server.conversation)
        world.ask("Stage the bundle", [
            world.after_recollection("Stage the bundle", Reply.tool("Bash", {"command": "git add dist/app.js",
                                                                             "description": "stage"})),
            Reply.text("It is ignored; I will leave it."),
        ])
        told = world.server.conversation[before + 1].all_text()
        assert "Before this call on git add dist/app.js" in told and f"(id: {lesson_qwen})" in told, told[-3000:]

        # ---- Qwen session D: what session B left about the file it reads, with the read's result (Qwen drops a
        # context given before a call)
        before_d = len(world.chat_api.conversation)
        read = Turn.call("read_file", {"file_path": str(world.repo / "dist" / "app.js")})
        world.qwen_run("Show me the bundle", [read, Turn.text_only("It logs shop-api.")])
        after_read = unescaped(output_of(world.chat_api.conversation[before_d + 1], read))
        assert "console.log('shop-api')" in after_read
        assert f"(id: {lesson_qwen})" in told_about_call(after_read), after_read

        status = json.loads(world.engram("status", "--json").stdout)
        assert status["sessions_by_agent"] == {"claude": 2, "qwen": 2}
        world.uninstall("qwen")
        assert snapshot(settings) == before_install
        returncode, stderr = world.stop_processor()
    assert returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
