"""Engram with the real opencode and the real pi (installed from npm), each against a fake chat-completions API on
127.0.0.1, beside the real Claude Code CLI, all in one temporary HOME where `engram install --agent …` wrote
Engram's plugin (opencode) and extension (pi), with the real processor capturing every agent's sessions.

What each model request carries is the proof: the digest in the first request, the bites of a prompt and the
lessons right after a tool call (neither agent lets anything reach the model before a call), the fix right after a
failed call, Engram's tools listed and answering — and, across agents, a lesson learned in one agent's session told
in the next session of another agent on the same repository, and the reverse. From the databases: every session
captured (line or event → database p90 ≤ 1 s), each knowing its agent, nothing Engram told captured back. And
uninstall gives each agent's files back byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.testbed.claude_cli import BITES_HEADER, DIGEST_HEADER, FENCE_OPEN
from bench.testbed.fake_anthropic import Reply
from tests.e2e.test_codex_and_gemini_cli import (
    CLAUDE,
    IGNORED_DIAGNOSIS,
    LINE_P90_SECONDS,
    NO_CLAUDE,
    RELEASE_DIAGNOSIS,
    call_context,
    failure_context,
    hit_ids,
    repository,
    seed_memories,
    snapshot,
)
from tests.support.agent_cli import CaptureClock, npm_cli, p90, skip_reason
from tests.support.fake_chat_completions import Turn
from tests.support.plugin_agent_cli import OPENCODE, PI, EventClock, PluginAgentWorld, pi_uuid

ENGRAM_TOOLS = {"engram_memory_recall", "engram_memory_expand", "engram_memory_remember"}


def learn_in_claude_code(world: PluginAgentWorld) -> tuple[str, str]:
    """A Claude Code session that meets two real failures and gets past each: the release script's flag, and a
    branch with no upstream. (the lessons' ids)"""
    world.ask("Release the build", [
        Reply.tool("Bash", {"command": "python3 tools/release.py", "description": "release"}),
        Reply.tool("Bash", {"command": "python3 tools/release.py --version 1.2.0", "description": "release"},
                   text=RELEASE_DIAGNOSIS),
        Reply.tool("Bash", {"command": "git push", "description": "push"}),
        Reply.tool("Bash", {"command": "git push --set-upstream origin release", "description": "push"}),
        Reply.text("Released 1.2.0."),
    ])
    return world.lesson("--version"), world.lesson("git push --set-upstream origin release")


@pytest.mark.skipif(CLAUDE is None, reason=NO_CLAUDE)
def test_opencode_and_claude_code_share_one_memory(tmp_path: Path) -> None:
    opencode = npm_cli(OPENCODE)
    if opencode is None:
        pytest.skip(skip_reason(OPENCODE))
    with PluginAgentWorld(tmp_path, claude=CLAUDE, opencode=opencode) as world:
        repository(world)
        settings = world.configure_opencode()
        before_install = snapshot(settings)
        installed = world.install("opencode")
        assert "plugin/engram.js: created" in installed, installed
        world.install("claude")
        # The processor starts before opencode ever ran here: its database appears later, and is captured.
        assert not world.opencode_db.exists()
        ids = seed_memories(world)

        # ---- opencode session A: the digest, the bites, Engram's tools, and a lesson learned (a real git failure)
        prompt_a = "How do I stage the esbuild bundle dist/app.js for the release commit?"
        with EventClock(world.opencode_db, world.engram_home / "engram.db") as clock:
            run_a = world.opencode_run(prompt_a, [
                world.after_prompt("opencode", prompt_a, Turn.call("bash", {"command": "git add dist/app.js",
                                                                             "description": "stage"})),
                Turn.call("bash", {"command": "git add -f dist/app.js", "description": "stage"},
                          text=IGNORED_DIAGNOSIS),
                Turn.call("engram_memory_recall", {"query": "esbuild bundle dist"}),
                Turn("Staged: dist/app.js is force-added."),
            ])
        assert "Staged" in run_a.stdout
        title, *requests = world.chat.requests
        # The digest is a part of the prompt's message: in the very first request (the title's) and every later one.
        assert DIGEST_HEADER in title.all_text() and f"(id: {ids['pref']})" in title.all_text()
        assert "engram_memory_expand(id)" in requests[0].all_text()
        assert BITES_HEADER not in requests[0].all_text()
        # Right after the first tool call, with its result: the prompt's bites, once.
        staged = requests[0].turn.call_ids[0]
        result = requests[1].outputs()[staged]
        assert "ignored by one of your .gitignore files" in result  # the failure was real
        assert BITES_HEADER in result and f"(id: {ids['fact']})" in result, result
        assert [r.all_text().count(BITES_HEADER) for r in requests] == [0] + [1] * (len(requests) - 1)
        # Engram's tools are listed and answer.
        assert set(requests[-1].tool_names) >= ENGRAM_TOOLS, requests[-1].tool_names
        recall = requests[2].turn.call_ids[0]
        assert ids["fact"] in hit_ids(requests[3].outputs()[recall]), requests[3].outputs()[recall]

        [session_a] = world.sessions_of("opencode")
        rows = world.query("SELECT role, text FROM messages WHERE session_id = ? ORDER BY id", (session_a,))
        assert rows == [("user", prompt_a), ("assistant", "[tool: Bash]"),
                        ("assistant", IGNORED_DIAGNOSIS + "\n[tool: Bash]"),
                        ("assistant", "[tool: mcp__engram__memory_recall]"),
                        ("assistant", "Staged: dist/app.js is force-added.")], rows
        for _, text in rows:
            assert FENCE_OPEN not in text and DIGEST_HEADER not in text and BITES_HEADER not in text
        calls = world.query("SELECT tool, target, failed FROM tool_calls WHERE session_id = ? ORDER BY rowid",
                            (session_a,))
        assert calls[:2] == [("Bash", "git add dist/app.js", 1), ("Bash", "git add -f dist/app.js", 0)], calls
        latencies = clock.latencies()
        print(f"opencode event → database: p90 {p90(latencies):.3f} s over {len(latencies)} parts")
        assert len(latencies) >= 5 and p90(latencies) <= LINE_P90_SECONDS, latencies
        lesson_1 = world.lesson("git-ignored")  # the step that finished the turn ended it: mined at once

        # ---- Claude Code session B, same repository: told the opencode lesson; learns two of its own
        world.ask("Stage the bundle", [
            world.after_recollection("Stage the bundle", Reply.tool("Bash", {"command": "git add dist/app.js",
                                                                             "description": "stage"})),
            Reply.text("It is ignored; I will force-add it."),
        ])
        told = world.server.conversation[-1].all_text()
        assert "Before this call on git add dist/app.js" in told and f"(id: {lesson_1})" in told, told[-3000:]
        lesson_2, push_fix = learn_in_claude_code(world)

        # ---- opencode session C: right after the same failures, what fixed them in Claude Code's session; and right
        # after a call, the lesson about its command
        before_c = len(world.chat.conversation)
        world.opencode_run("Release the current build", [
            Turn.call("bash", {"command": "python3 tools/release.py", "description": "release"}),
            Turn.call("bash", {"command": "git checkout -q -b hotfix", "description": "branch"}),
            Turn.call("bash", {"command": "git push", "description": "push"}),
            Turn.call("bash", {"command": "git add dist/app.js", "description": "stage"}),
            Turn("It needs a version."),
        ])
        requests = world.chat.conversation[before_c:]
        staged = requests[4].outputs()[requests[3].turn.call_ids[0]]
        print("opencode, told after `git add dist/app.js`:", staged[staged.find(FENCE_OPEN):])
        # The lesson, right after the call (a call that failed as it did then: told as what fixed it).
        assert f"(id: {lesson_1})" in call_context(staged) + failure_context(staged), staged[-2000:]
        release = requests[1].outputs()[requests[0].turn.call_ids[0]]
        assert "arguments are required: --version" in release
        fixed = failure_context(release)
        assert f"(id: {lesson_2})" in fixed, release[-2000:]
        assert f"(id: {lesson_1})" not in fixed  # a lesson about another command is not told at this call
        push = requests[3].outputs()[requests[2].turn.call_ids[0]]
        assert "has no upstream branch" in push
        fixed = failure_context(push)
        assert f"(id: {push_fix})" in fixed and "git push --set-upstream origin release" in fixed, push[-2000:]
        assert not call_context(release) or f"(id: {lesson_2})" not in call_context(release)  # told once

        # `engram status`, memory_recall and the agent of each session and memory
        status = json.loads(world.engram("status", "--json").stdout)
        assert status["sessions_by_agent"] == {"claude": 2, "opencode": 2}, status["sessions_by_agent"]
        recalled = world.engram("recall", "dist git-ignored force-added", "--project", str(world.repo)).stdout
        assert any(lesson_1 in line and "opencode" in line for line in recalled.splitlines()), recalled
        doctor = world.engram("doctor", check=False).stdout
        assert "opencode" in doctor and "plugin" in doctor, doctor

        # ---- uninstall gives opencode's files back exactly
        world.uninstall("opencode")
        assert snapshot(settings) == before_install
        for name in ("plugin/engram.js", "package.json", "package-lock.json"):
            assert not (world.opencode_config / name).exists(), name
        returncode, stderr = world.stop_processor()
    assert returncode == 0, stderr
    assert "Traceback" not in stderr, stderr


@pytest.mark.skipif(CLAUDE is None, reason=NO_CLAUDE)
def test_pi_and_claude_code_share_one_memory(tmp_path: Path) -> None:
    pi = npm_cli(PI)
    if pi is None:
        pytest.skip(skip_reason(PI))
    with PluginAgentWorld(tmp_path, claude=CLAUDE, pi=pi) as world:
        repository(world)
        pi_files = world.configure_pi()
        extension = world.pi_dir / "extensions" / "engram.ts"
        before_install = snapshot(*pi_files, extension)
        installed = world.install("pi")
        assert "extensions/engram.ts: created" in installed, installed
        world.install("claude")
        ids = seed_memories(world)
        lesson_1, push_fix = learn_in_claude_code(world)

        # ---- pi session A: the digest, the Claude Code lessons right after the same failures, the bites, Engram's
        # tools, and a lesson of its own (a real git failure)
        prompt_a = "How do I stage the esbuild bundle dist/app.js for the release commit?"
        with CaptureClock(world.engram_home / "engram.db", world.pi_sessions, pi_uuid) as clock:
            world.pi_run(prompt_a, [
                Turn.call("bash", {"command": "python3 tools/release.py"}),
                world.after_prompt("pi", prompt_a, Turn.call("bash", {"command": "git checkout -q -b hotfix"})),
                Turn.call("bash", {"command": "git push"}),
                Turn.call("bash", {"command": "git add dist/app.js"}),
                Turn.call("bash", {"command": "git add -f dist/app.js"}, text=IGNORED_DIAGNOSIS),
                Turn.call("engram_memory_recall", {"query": "esbuild bundle dist"}),
                Turn("Staged: dist/app.js is force-added."),
            ])
        requests = world.chat.conversation
        # The digest reaches the first request (a message of Engram's after the prompt).
        assert DIGEST_HEADER in requests[0].all_text() and f"(id: {ids['pref']})" in requests[0].all_text()
        assert "engram_memory_expand(id)" in requests[0].all_text()
        # Right after the failed release call, with its result: what fixed it in Claude Code's session.
        release = requests[1].outputs()[requests[0].turn.call_ids[0]]
        assert "arguments are required: --version" in release and "Command exited with code 2" in release
        assert f"(id: {lesson_1})" in failure_context(release), release[-2000:]
        push = requests[3].outputs()[requests[2].turn.call_ids[0]]
        assert "has no upstream branch" in push
        assert f"(id: {push_fix})" in failure_context(push), push[-2000:]
        # The prompt's bites, once, at the first call after the processor read the prompt (pi writes its session
        # file only once the first answer is there).
        outputs = [o for r in requests for o in r.outputs().values()]
        assert sum(o.count(BITES_HEADER) for o in set(outputs)) == 1, outputs
        assert any(f"(id: {ids['fact']})" in o for o in outputs if BITES_HEADER in o)
        assert set(requests[-1].tool_names) >= ENGRAM_TOOLS, requests[-1].tool_names
        recall = requests[5].turn.call_ids[0]
        assert ids["fact"] in hit_ids(requests[6].outputs()[recall]), requests[6].outputs()[recall]

        [session_a] = world.sessions_of("pi")
        rows = world.query("SELECT role, text FROM messages WHERE session_id = ? ORDER BY id", (session_a,))
        assert rows[0] == ("user", prompt_a) and rows[-1] == ("assistant", "Staged: dist/app.js is force-added.")
        assert ("assistant", IGNORED_DIAGNOSIS + "\n[tool: Bash]") in rows, rows
        for _, text in rows:
            assert FENCE_OPEN not in text and DIGEST_HEADER not in text
        calls = world.query("SELECT tool, target, failed, error FROM tool_calls WHERE session_id = ? ORDER BY rowid",
                            (session_a,))
        assert calls[0][:3] == ("Bash", "python3 tools/release.py", 1) and FENCE_OPEN not in calls[0][3], calls
        latencies = clock.latencies()
        print(f"pi line → database: p90 {p90(latencies):.3f} s over {len(latencies)} lines")
        assert len(latencies) >= 5 and p90(latencies) <= LINE_P90_SECONDS, latencies
        lesson_pi = world.lesson("git-ignored")  # the answer that stopped ended the turn: mined at once

        # ---- Claude Code session B: told the lesson the pi session learned, before the same command
        world.ask("Stage the bundle", [
            world.after_recollection("Stage the bundle", Reply.tool("Bash", {"command": "git add dist/app.js",
                                                                             "description": "stage"})),
            Reply.text("It is ignored; I will force-add it."),
        ])
        told = world.server.conversation[-1].all_text()
        assert "Before this call on git add dist/app.js" in told and f"(id: {lesson_pi})" in told, told[-3000:]

        # ---- pi session C: right after the same call, the lesson about its command
        before_c = len(world.chat.conversation)
        world.pi_run("Stage the bundle", [Turn.call("bash", {"command": "git add dist/app.js"}), Turn("Ignored.")])
        requests = world.chat.conversation[before_c:]
        staged = requests[1].outputs()[requests[0].turn.call_ids[0]]
        print("pi, told after `git add dist/app.js`:", staged[staged.find(FENCE_OPEN):])
        assert f"(id: {lesson_pi})" in call_context(staged) + failure_context(staged), staged[-2000:]

        status = json.loads(world.engram("status", "--json").stdout)
        assert status["sessions_by_agent"] == {"claude": 2, "pi": 2}, status["sessions_by_agent"]
        recalled = world.engram("recall", "dist git-ignored force-added", "--project", str(world.repo)).stdout
        assert any(lesson_pi in line and ", pi)" in line for line in recalled.splitlines()), recalled

        world.uninstall("pi")
        assert snapshot(*pi_files, extension) == before_install
        returncode, stderr = world.stop_processor()
    assert returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
