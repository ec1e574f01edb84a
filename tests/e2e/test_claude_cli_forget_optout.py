"""Forget and opt out inside a real Claude Code session: the CLI bundled with claude-agent-sdk, Engram installed
into a temporary HOME, the real processor, a fake Messages API on 127.0.0.1 (bench/testbed/claude_cli.py).

The request bodies the CLI sends are the proof: after the model calls memory_forget the memory is gone from
the bites and the next session's digest; after the user types ``[engram off]`` (or starts Claude Code with
``ENGRAM_OFF``) no digest and no bites reach the model, and ``ENGRAM_OFF=record`` keeps the session out of
the database altogether.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bench.testbed.claude_cli import BITES_HEADER, DIGEST_HEADER, ClaudeCLI, EngramClaude, wait_for
from bench.testbed.fake_anthropic import Reply, Request

CLI = ClaudeCLI.bundled()
pytestmark = pytest.mark.skipif(
    CLI is None,
    reason="the installed claude-agent-sdk has no bundled Claude Code CLI (claude_agent_sdk/_bundled/claude)")

TIME_LIMIT_SECONDS = 90
STAGING = ("shop-api staging database: PostgreSQL 16 behind pgbouncer on port 6543, reached through the "
           "bastion host")
FLAKY = "shop-api checkout tests are flaky unless time is frozen with freezegun"
PROMPT = "How do I connect to the staging database from my laptop?"
FORGET = "mcp__engram__memory_forget"


def bash(command: str) -> Reply:
    return Reply.tool("Bash", {"command": command, "description": command})


def started(tmp_path: Path) -> tuple[EngramClaude, dict[str, str]]:
    assert CLI is not None
    world = EngramClaude(tmp_path, CLI).__enter__()
    world.install()
    world.remember(STAGING, kind="fact", scope="project")
    world.remember(FLAKY, kind="gotcha", scope="project")
    world.start_processor()
    stored = world.wait_for_memories(STAGING, FLAKY)
    return world, {"staging": stored[STAGING], "flaky": stored[FLAKY]}


def finish(world: EngramClaude, began: float) -> None:
    try:
        returncode, stderr = world.stop_processor()
    finally:
        world.__exit__(None, None, None)
    assert returncode == 0 and "Traceback" not in stderr, stderr
    elapsed = time.monotonic() - began
    assert elapsed < TIME_LIMIT_SECONDS, f"took {elapsed:.1f} s"


def bites_in(requests: list[Request]) -> list[str]:
    return [text for r in requests for _, text in r.texts() if BITES_HEADER in text]


def test_memory_forget_and_the_typed_marker_in_a_real_session(tmp_path: Path) -> None:
    began = time.monotonic()
    world, ids = started(tmp_path)
    try:
        # ---- the model is shown the staging memory, and forgets it when the user asks
        forget_turn = world.once_tools_announced(Reply.tool("ToolSearch", {"query": f"select:{FORGET}"}),
                                                 tools=(FORGET,))
        run = world.ask(PROMPT + " Also, forget what you know about staging: it is outdated.", [
            world.after_recollection(PROMPT + " Also, forget what you know about staging: it is outdated.",
                                     bash("echo one")),
            forget_turn,
            Reply.tool(FORGET, {"id": ids["staging"], "reason": "the user says it is outdated"}),
            Reply.text("Forgotten."),
        ])
        first = list(world.server.conversation)
        # Shown once, by the digest or a bite (bites leave out what the session's digest showed).
        assert any(f"(id: {ids['staging']})" in text for r in first for _, text in r.texts())
        call = next(i for i, r in enumerate(first) if r.reply and FORGET in [b.get("name") for b in r.reply.blocks])
        [tool_use_id] = first[call].reply.tool_use_ids
        answer = first[call + 1].tool_results()[tool_use_id]
        assert f"Forgot {ids['staging']}" in answer and "not be recalled or injected again" in answer
        assert world.query("SELECT status, full_content FROM episodes WHERE id = ?", (ids["staging"],)) == [
            ("forgotten", "")]
        assert ids["staging"] not in json.dumps(world.recollection(run.session_id) or {})

        # ---- a new session: the digest no longer shows it; "[engram off]" ends digests and bites
        marked = "[engram off] " + PROMPT

        def after_opt_out(reply: Reply) -> Reply:
            def wait(request: Request) -> Reply:
                off = world.engram_home / "recollections" / f"{request.session_id}.off"
                try:
                    wait_for(off.exists, 20, "the opt-out recorded by the processor")
                except AssertionError as exc:
                    world.failures.append(str(exc))
                return reply
            return Reply.from_request(wait)

        run_2 = world.ask(marked, [after_opt_out(bash("echo two")), Reply.text("Without memory.")])
        second = world.server.conversation[len(first):]
        opening = second[0].all_text()
        assert DIGEST_HEADER in opening  # the session started before the marker was typed
        assert f"(id: {ids['staging']})" not in opening and f"(id: {ids['flaky']})" in opening
        assert not bites_in(second), bites_in(second)
        assert world.query("SELECT opt_out FROM sessions WHERE session_id = ?", (run_2.session_id,)) == [("memory",)]

        # Resumed: no digest (SessionStart "resume"), no bites, while capture goes on.
        run_3 = world.ask("Why do the checkout tests fail randomly?", [bash("echo three"), Reply.text("Clock.")],
                          resume=run_2.session_id)
        third = world.server.conversation[len(first) + len(second):]
        assert run_3.session_id == run_2.session_id
        assert not any(DIGEST_HEADER in text for r in third for _, text in r.texts()
                       if text not in {t for r2 in second for _, t in r2.texts()})
        assert not bites_in(third)
        wait_for(lambda: "Clock." in world.captured_texts(), 30, "the resumed session still captured")
        assert not world.failures, world.failures
    finally:
        finish(world, began)


def test_engram_off_in_claude_codes_environment(tmp_path: Path) -> None:
    began = time.monotonic()
    world, ids = started(tmp_path)
    try:
        # ENGRAM_OFF=1: the processor (which cannot see Claude Code's environment) still writes the
        # recollection; the hooks, which can, inject nothing. Capture continues.
        run = world.ask(PROMPT, [world.after_recollection(PROMPT, bash("echo one")), Reply.text("Bastion.")],
                        env={"ENGRAM_OFF": "1"})
        requests = list(world.server.conversation)
        assert ids['staging'] in json.dumps(world.recollection(run.session_id))
        assert not any(DIGEST_HEADER in text for r in requests for _, text in r.texts())
        assert not bites_in(requests)
        wait_for(lambda: "Bastion." in world.captured_texts(), 30, "the session captured")

        # ENGRAM_OFF=record: nothing of the session reaches the database.
        secret_prompt = "Our unreleased pricing plan is 42 euros; how do I connect to staging?"
        run_2 = world.ask(secret_prompt, [bash("echo two"), Reply.text("Confidential answer.")],
                          env={"ENGRAM_OFF": "record"})
        later = world.server.conversation[len(requests):]
        assert not any(DIGEST_HEADER in text or BITES_HEADER in text for r in later for _, text in r.texts())
        wait_for(lambda: world.query("SELECT opt_out FROM sessions WHERE session_id = ?",
                                     (run_2.session_id,)) == [("record",)], 30, "the session marked off the record")
        time.sleep(1.0)  # whatever the processor would still capture of it, it would have by now
        assert world.query("SELECT count(*) FROM messages WHERE session_id = ?", (run_2.session_id,)) == [(0,)]
        assert not any("pricing plan" in text or "Confidential" in text for text in world.captured_texts())
        assert not world.failures, world.failures
    finally:
        finish(world, began)
