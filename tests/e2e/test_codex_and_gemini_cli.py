"""Engram with the real Codex CLI and the real Gemini CLI (installed from npm), each against a fake model API on
127.0.0.1, beside the real Claude Code CLI (the one claude-agent-sdk bundles), all in one temporary HOME where
`engram install --agent …` registered the hooks and the MCP server, with the real processor capturing every
agent's sessions as they are written.

What each model request carries is the proof: the digest in a CLI's first request, the bites of a prompt and
the lessons at a tool call, Engram's MCP tools listed and answering — and, across agents, a lesson learned in
one agent's session told in the next session of another agent working on the same repository, and the reverse.
From the database: every agent's session captured (line → database p90 ≤ 1 s), each knowing its agent, nothing
any hook injected captured back. And uninstall gives each agent's files back byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any, TypeVar

import pytest

from bench.testbed.claude_cli import BITES_HEADER, DIGEST_HEADER, FENCE_OPEN, ClaudeCLI, wait_for
from bench.testbed.fake_anthropic import Reply
from tests.support.agent_cli import CODEX, GEMINI, AgentWorld, CaptureClock, npm_cli, p90, skip_reason
from tests.support.fake_gemini import Turn as GeminiTurn
from tests.support.fake_openai_responses import Request as CodexRequest
from tests.support.fake_openai_responses import Turn as CodexTurn

CLAUDE = ClaudeCLI.bundled()
NO_CLAUDE = "the installed claude-agent-sdk has no bundled Claude Code CLI (claude_agent_sdk/_bundled/claude)"

PREFERENCE = "User prefers uv over pip for installing Python packages"
BUNDLE_FACT = ("shop-api bundles are built with esbuild into dist/app.js by npm run build, then staged for the "
               "release commit")
IGNORED_DIAGNOSIS = ("The `dist/` folder is git-ignored, so the generated `dist/app.js` must be force-added with "
                     "`git add -f`.")
RELEASE_DIAGNOSIS = ("`tools/release.py` requires the `--version` flag: run it as "
                     "`python3 tools/release.py --version 1.2.0`.")
RELEASE_SCRIPT = ("import argparse\nparser = argparse.ArgumentParser()\n"
                  "parser.add_argument('--version', required=True)\nprint('released', parser.parse_args().version)\n")
LINE_P90_SECONDS = 1.0


def repository(world: AgentWorld) -> None:
    """A repository with an ignored build output and a release script that needs a flag: two real failures, each
    got past by running things another way (what a lesson is about: a file it names, its command)."""
    (world.repo / ".gitignore").write_text("dist/\n")
    (world.repo / "dist").mkdir()
    (world.repo / "dist" / "app.js").write_text("console.log('shop-api')\n")
    (world.repo / "tools").mkdir()
    (world.repo / "tools" / "release.py").write_text(RELEASE_SCRIPT)
    # A branch with a remote but no upstream: a bare `git push` fails until it is set.
    remote = world.repo.parent / "remote.git"
    identity = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    for argv in (["git", "init", "-q", "--bare", str(remote)], ["git", "checkout", "-q", "-b", "release"],
                 ["git", "add", ".gitignore", "tools"], ["git", "commit", "-q", "-m", "release tooling"],
                 ["git", "remote", "add", "origin", str(remote)]):
        subprocess.run(argv, cwd=world.repo, env=identity, check=True, capture_output=True)


def seed_memories(world: AgentWorld) -> dict[str, str]:
    world.remember(PREFERENCE, kind="preference", scope="global")
    world.remember(BUNDLE_FACT, kind="fact", scope="project")
    world.start_processor()
    ids = world.wait_for_memories(PREFERENCE, BUNDLE_FACT)
    world.backdate(ids[BUNDLE_FACT], days=3)  # old and ordinary: not in the digest, so it can be a bite
    return {"pref": ids[PREFERENCE], "fact": ids[BUNDLE_FACT]}


def snapshot(*paths: Path) -> dict[str, bytes | None]:
    return {str(p): (p.read_bytes() if p.exists() else None) for p in paths}


# Engram's fence as each agent's model reads it: Gemini's has no angle brackets (Gemini HTML-escapes them).
FENCED = (r"(?:<engram-recollection>|\[engram-recollection\])\n({body})\n"
          r"(?:</engram-recollection>|\[/engram-recollection\])")


def call_context(text: str) -> str:
    """The block Engram told about a tool call (its fence's body), "" when there is none."""
    found = re.search(FENCED.format(body=r"(?:Before|About) this call on .*?"), text, re.DOTALL)
    return found.group(1) if found else ""


def failure_context(text: str) -> str:
    """The last block Engram told right after a failed call (its fence's body), "" when there is none."""
    found = re.findall(FENCED.format(body=r"This failed the same way .*?"), text, re.DOTALL)
    return found[-1] if found else ""


def hit_ids(text: str) -> list[str]:
    return re.findall(r"— ID: (ep_[0-9a-f]+)", text)


# ---------------------------------------------------------------- Codex CLI


def codex_uuid(path: Path, record: dict[str, Any]) -> str | None:
    """The message id capture stores for a rollout line (processor/capture/codex.py)."""
    payload = record.get("payload") if isinstance(record.get("payload"), dict) else {}
    if record.get("type") != "response_item" or payload.get("type") not in ("message", "function_call"):
        return None
    session = re.search(r"([0-9a-f-]{36})\.jsonl$", path.name)
    return f"{session.group(1)}:{payload.get('id') or payload.get('call_id')}" if session else None


def developer_texts(request: CodexRequest) -> str:
    return "\n".join(request.messages("developer"))


T = TypeVar("T", CodexTurn, GeminiTurn)


def after_recollection(world: AgentWorld, agent: str, prompt: str, turn: T) -> T:
    """`turn` (a Codex or Gemini turn), once the processor has written the recollection for `prompt` in the
    agent's session (a real model takes seconds)."""
    def wait(request: Any) -> T:
        def ready() -> bool:
            rows = world.query("SELECT m.session_id, m.uuid FROM messages m JOIN sessions s USING (session_id) "
                               "WHERE s.agent = ? AND m.role = 'user' AND m.text = ? ORDER BY m.id DESC",
                               (agent, prompt))
            return bool(rows) and (world.recollection(rows[0][0]) or {}).get("messageUuid") == rows[0][1]
        try:
            wait_for(ready, 30, f"recollection for {prompt!r}")
        except AssertionError as exc:
            world.failures.append(str(exc))
        return turn
    return type(turn).from_request(wait)


@pytest.mark.skipif(CLAUDE is None, reason=NO_CLAUDE)
def test_codex_and_claude_code_share_one_memory(tmp_path: Path) -> None:
    codex = npm_cli(CODEX)
    if codex is None:
        pytest.skip(skip_reason(CODEX))
    with AgentWorld(tmp_path, claude=CLAUDE, codex=codex) as world:
        repository(world)
        world.configure_codex()
        codex_files = (world.codex_home / "config.toml", world.codex_home / "hooks.json")
        before_install = snapshot(*codex_files)
        installed = world.install("codex")
        assert "trust of Engram's 3 hooks is recorded" in installed
        world.install("claude")
        # The processor starts before Codex ever ran here: its sessions folder appears later, and is captured.
        assert not (world.codex_home / "sessions").exists()
        ids = seed_memories(world)

        # ---- Codex session A: the digest, the bites, MCP tools, and a lesson learned (a real git failure)
        prompt_a = "How do I stage the esbuild bundle dist/app.js for the release commit?"
        rollouts = lambda: sorted((world.codex_home / "sessions").rglob("rollout-*.jsonl"))  # noqa: E731
        with CaptureClock(world.engram_home / "engram.db", rollouts, codex_uuid) as clock:
            run_a = world.codex_run(prompt_a, [
                after_recollection(world, "codex", prompt_a, CodexTurn.call("exec_command",
                                                                         {"cmd": "git add dist/app.js"})),
                CodexTurn.call("exec_command", {"cmd": "git add -f dist/app.js"}, text=IGNORED_DIAGNOSIS),
                CodexTurn.call("memory_recall", {"query": "esbuild bundle dist"}, namespace="mcp__engram"),
                CodexTurn.text("Staged: dist/app.js is force-added."),
            ])
        assert "Staged" in run_a.stdout
        requests = world.responses.requests
        first, after_call = requests[0], requests[1]
        # The digest is in the very first request (Codex hands a hook's context over as a developer message).
        assert DIGEST_HEADER in developer_texts(first) and f"(id: {ids['pref']})" in developer_texts(first)
        assert "mcp__engram__memory_expand(id)" in developer_texts(first)
        assert BITES_HEADER not in first.all_text()
        # The prompt's bites, at its first tool call, once.
        assert BITES_HEADER in developer_texts(after_call) and f"(id: {ids['fact']})" in developer_texts(after_call)
        assert [r.all_text().count(BITES_HEADER) for r in requests] == [0] + [1] * (len(requests) - 1)
        # The git failure was real: Codex ran the command and saw it fail.
        failed_call = requests[0].turn.call_ids[0]
        assert "ignored by one of your .gitignore files" in after_call.outputs()[failed_call]
        # Engram's MCP tools are listed and answer.
        assert {"mcp__engram__memory_recall", "mcp__engram__memory_expand", "mcp__engram__memory_remember"} <= set(
            requests[-1].tool_names)
        recall_call = requests[2].turn.call_ids[0]
        assert ids["fact"] in hit_ids(requests[3].outputs()[recall_call]), requests[3].outputs()[recall_call]

        [session_a] = world.sessions_of("codex")
        rows = world.query("SELECT role, text FROM messages WHERE session_id = ? ORDER BY id", (session_a,))
        # One row per model response (its message and its calls), as Claude Code's parts of one message are.
        assert rows == [("user", prompt_a), ("assistant", "[tool: Bash]"),
                        ("assistant", IGNORED_DIAGNOSIS + "\n[tool: Bash]"),
                        ("assistant", "[tool: mcp__engram__memory_recall]"),
                        ("assistant", "Staged: dist/app.js is force-added.")], rows
        for _, text in rows:
            assert FENCE_OPEN not in text and "environment_context" not in text and DIGEST_HEADER not in text
        latencies = clock.latencies()
        print(f"Codex line → database: p90 {p90(latencies):.3f} s over {len(latencies)} lines")
        assert len(latencies) >= 5 and p90(latencies) <= LINE_P90_SECONDS, latencies
        lesson_1 = world.lesson("git-ignored")  # task_complete ended the turn: its lesson is mined at once

        # ---- Claude Code session B, same repository: told the Codex lesson; learns one of its own
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
        claude_requests = world.server.conversation
        told = claude_requests[1].all_text()
        assert "Before this call on git add dist/app.js" in told and f"(id: {lesson_1})" in told, told[-3000:]
        assert "the following arguments are required: --version" in claude_requests[2].all_text()  # real failure
        lesson_2 = world.lesson("--version")
        assert "has no upstream branch" in claude_requests[4].all_text()  # a real failure, then the fix
        push_fix = world.lesson("git push --set-upstream origin release")

        # ---- Codex session C: told the lesson Claude Code learned, at the same command
        before_c = len(world.responses.requests)
        prompt_c = "Release the current build"
        world.codex_run(prompt_c, [
            after_recollection(world, "codex", prompt_c, CodexTurn.call("exec_command",
                                                                     {"cmd": "python3 tools/release.py"})),
            CodexTurn.call("exec_command", {"cmd": "git checkout -q -b hotfix"}),
            CodexTurn.call("exec_command", {"cmd": "git push"}),
            CodexTurn.text("It needs a version."),
        ])
        # Met once, in session B: told right after the same failure (Codex's PostToolUse; the rollout says the call
        # failed), not before the call (that waits until the failure recurs in a second session).
        after_release = world.responses.requests[before_c + 1]
        assert "arguments are required: --version" in "\n".join(after_release.outputs().values())
        fixed = failure_context(developer_texts(after_release))
        assert f"(id: {lesson_2})" in fixed, developer_texts(after_release)[-2000:]
        assert f"(id: {lesson_1})" not in fixed  # a lesson about another command is not told at this call
        after_push = world.responses.requests[before_c + 3]
        assert "has no upstream branch" in "\n".join(after_push.outputs().values())
        fixed = failure_context(developer_texts(after_push))
        assert f"(id: {push_fix})" in fixed and "git push --set-upstream origin release" in fixed, fixed

        # memory_recall, `engram status` and the agent of each session and memory
        status = json.loads(world.engram("status", "--json").stdout)
        assert status["sessions_by_agent"] == {"claude": 1, "codex": 2}
        recalled = world.engram("recall", "dist git-ignored force-added", "--project", str(world.repo)).stdout
        assert any(lesson_1 in line and "Codex" in line for line in recalled.splitlines()), recalled

        # ---- uninstall gives Codex's files back exactly
        world.uninstall("codex")
        assert snapshot(*codex_files) == before_install
        returncode, stderr = world.stop_processor()
    assert returncode == 0, stderr
    assert "Traceback" not in stderr, stderr


# ---------------------------------------------------------------- Gemini CLI


def gemini_uuid(path: Path, record: dict[str, Any]) -> str | None:
    """The message id capture stores for a chat line (processor/capture/gemini.py)."""
    if not isinstance(record.get("id"), str) or record.get("type") not in ("user", "gemini"):
        return None
    with open(path, "rb") as f:
        header = json.loads(f.readline())
    return f"{header['sessionId']}:{record['id']}"


@pytest.mark.skipif(CLAUDE is None, reason=NO_CLAUDE)
def test_gemini_cli_and_claude_code_share_one_memory(tmp_path: Path) -> None:
    """With Engram's default settings: Gemini's chats mark no end of turn, and its session's lesson is still
    told in a Codex session started 30 s after it ended."""
    gemini, codex = npm_cli(GEMINI), npm_cli(CODEX)
    if gemini is None or codex is None:
        pytest.skip(skip_reason(GEMINI if gemini is None else CODEX))
    with AgentWorld(tmp_path, claude=CLAUDE, gemini=gemini, codex=codex) as world:
        repository(world)
        world.configure_gemini()
        world.configure_codex()
        settings = world.gemini_dir / "settings.json"
        before_install = snapshot(settings)
        world.install("gemini")
        world.install("claude")
        world.install("codex")
        ids = seed_memories(world)

        # ---- Claude Code session A learns a lesson first (the reverse direction comes second)
        world.ask("Release the build", [
            Reply.tool("Bash", {"command": "python3 tools/release.py", "description": "release"}),
            Reply.tool("Bash", {"command": "python3 tools/release.py --version 1.2.0", "description": "release"},
                       text=RELEASE_DIAGNOSIS),
            Reply.text("Released 1.2.0."),
        ])
        lesson_claude = world.lesson("--version")

        # ---- Gemini session B: the digest, the bites, the Claude Code lesson, MCP tools, a lesson of its own
        prompt_b = "How do I stage the esbuild bundle dist/app.js for the release commit?"
        chats = lambda: sorted((world.gemini_dir / "tmp").glob("*/chats/session-*.jsonl"))  # noqa: E731
        with CaptureClock(world.engram_home / "engram.db", chats, gemini_uuid) as clock:
            world.gemini_run(prompt_b, [
                after_recollection(world, "gemini", prompt_b, GeminiTurn.call(
                    "run_shell_command", {"command": "python3 tools/release.py"})),
                GeminiTurn.call("run_shell_command", {"command": "git add dist/app.js"}),
                GeminiTurn.call("run_shell_command", {"command": "git add -f dist/app.js"}, text=IGNORED_DIAGNOSIS),
                GeminiTurn.call("mcp_engram_memory_recall", {"query": "esbuild bundle dist"}),
                GeminiTurn.text("Staged: dist/app.js is force-added."),
            ])
        gemini_ended = time.monotonic()
        requests = world.gemini_api.conversation
        first = requests[0]
        # The digest reaches the first request (SessionStart's context, prepended to the prompt).
        assert DIGEST_HEADER in first.all_text() and f"(id: {ids['pref']})" in first.all_text()
        assert "mcp_engram_memory_expand(id)" in first.all_text()
        # At the first tool call (AfterTool, with its result): the prompt's bites and the Claude Code lesson.
        result = requests[1].responses()["run_shell_command"]
        assert BITES_HEADER in result and f"(id: {ids['fact']})" in result, result
        assert "Exit Code: 2" in result  # the failure was real: what fixed it in session A comes with it
        # Gemini HTML-escapes a hook's context: Engram's fence for it has no angle brackets, and arrives as sent.
        output = json.loads(result)["output"]
        assert "[engram-recollection]" in output and "&lt;" not in output, output
        assert f"(id: {lesson_claude})" in failure_context(output), result
        told_fix = failure_context(output)
        assert told_fix.lower().count("what fixed it") == 1 and "Output:" not in told_fix, told_fix
        assert all("engram-recollection&gt;" not in r.all_text() for r in requests)
        assert {"mcp_engram_memory_recall", "mcp_engram_memory_expand"} <= set(requests[-1].tool_names)
        assert ids["fact"] in hit_ids(requests[-1].responses()["mcp_engram_memory_recall"])

        [session_b] = world.sessions_of("gemini")
        rows = world.query("SELECT role, text FROM messages WHERE session_id = ? ORDER BY id", (session_b,))
        assert rows[0] == ("user", prompt_b), rows
        assert ("assistant", IGNORED_DIAGNOSIS + "\n[tool: Bash]") in rows, rows
        for _, text in rows:
            assert FENCE_OPEN not in text and "hook_context" not in text and "session_context" not in text
        calls = world.query("SELECT tool, target, failed FROM tool_calls WHERE session_id = ? ORDER BY rowid",
                            (session_b,))
        assert ("Bash", "git add dist/app.js", 1) in calls and ("Bash", "git add -f dist/app.js", 0) in calls
        latencies = clock.latencies()
        print(f"Gemini line → database: p90 {p90(latencies):.3f} s over {len(latencies)} lines")
        assert len(latencies) >= 4 and p90(latencies) <= LINE_P90_SECONDS, latencies

        # Gemini marks no end of turn: its answer that asked for no tool call ended it, seconds ago.
        lesson_gemini = world.lesson("git-ignored", timeout=30)

        # ---- Codex session D, started 30 s after the Gemini session ended: told the Gemini lesson
        time.sleep(max(0.0, 30 - (time.monotonic() - gemini_ended)))
        before_d = len(world.responses.requests)
        prompt_d = "Stage the bundle for the release"
        world.codex_run(prompt_d, [
            after_recollection(world, "codex", prompt_d, CodexTurn.call("exec_command",
                                                                     {"cmd": "git add dist/app.js"})),
            CodexTurn.text("It is ignored; I will leave it."),
        ])
        told_d = developer_texts(world.responses.requests[before_d + 1])
        assert f"(id: {lesson_gemini})" in told_d, told_d[-3000:]

        # ---- Claude Code session C: told the lesson the Gemini session learned
        before = len(world.server.conversation)
        world.ask("Stage the bundle", [
            world.after_recollection("Stage the bundle", Reply.tool("Bash", {"command": "git add dist/app.js",
                                                                             "description": "stage"})),
            Reply.text("It is ignored; I will leave it."),
        ])
        told = world.server.conversation[before + 1].all_text()
        assert "Before this call on git add dist/app.js" in told and f"(id: {lesson_gemini})" in told, told[-3000:]

        world.uninstall("gemini")
        assert snapshot(settings) == before_install
        returncode, stderr = world.stop_processor()
    assert returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
