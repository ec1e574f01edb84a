"""Engram in a real Claude Code session: the CLI bundled with claude-agent-sdk, run with `claude -p` in a
temporary HOME where `engram install` registered the hooks and the MCP server, against a fake Messages
API on 127.0.0.1 (tests/fake_anthropic.py), with the real processor (`engram run`) capturing the
session's transcript as Claude Code writes it.

What the model is sent is the proof: every request body the CLI posts is recorded, so the test sees
exactly what reached the model — the SessionStart digest, the PreToolUse bites (once per user message,
also with parallel tool calls), Engram's MCP tools and their results — and, from the database, that
nothing Engram injected was captured back into it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.claude_cli import (
    BITES_HEADER,
    DIGEST_HEADER,
    ENGRAM_TOOLS,
    FENCE_CLOSE,
    FENCE_OPEN,
    ClaudeCLI,
    EngramClaude,
    wait_for,
)
from tests.fake_anthropic import Reply, Request

CLI = ClaudeCLI.bundled()
pytestmark = pytest.mark.skipif(
    CLI is None,
    reason="the installed claude-agent-sdk has no bundled Claude Code CLI (claude_agent_sdk/_bundled/claude)")

TIME_LIMIT_SECONDS = 90

MEMORIES = {
    "pref": ("User prefers uv over pip for installing Python packages", "preference", "global"),
    "staging": ("shop-api staging database: PostgreSQL 16 behind pgbouncer on port 6543, reached through the "
                "bastion host", "fact", "project"),
    "flaky": ("shop-api checkout tests are flaky unless time is frozen with freezegun", "gotcha", "project"),
}
NEW_MEMORY = "shop-api laptops reach staging with ssh -J through the bastion, then psql on port 6543"
PROMPT_1 = "How do I connect to the staging database from my laptop?"
PROMPT_2 = "Why do the checkout tests fail randomly?"
ANSWER_1 = "Go through the bastion host."
ANSWER_2 = "Freeze the clock in those tests."


def bash(command: str) -> tuple[str, dict[str, str]]:
    return "Bash", {"command": command, "description": command}


def answering(requests: list[Request], tool: str) -> int:
    """Index of the request whose reply called `tool` (the next request carries its result)."""
    return next(i for i, r in enumerate(requests)
                if r.reply is not None and any(b.get("name") == tool for b in r.reply.blocks))


def tool_result(requests: list[Request], tool: str) -> str:
    i = answering(requests, tool)
    [tool_use_id] = requests[i].reply.tool_use_ids
    return requests[i + 1].tool_results()[tool_use_id]


def message_index(request: Request, needle: str) -> list[int]:
    """Indexes of the request's messages whose text holds `needle`."""
    return sorted({i for i, text in request.texts() if needle in text})


def expand_first_hit(request: Request) -> Reply:
    """The model reads memory_recall's answer and expands its best hit."""
    [result] = [text for text in request.tool_results().values() if '"hits"' in text]
    return Reply.tool("mcp__engram__memory_expand", {"id": json.loads(result)["hits"][0]["id"]})


def test_a_real_claude_code_session_gets_engrams_memories(tmp_path: Path) -> None:
    assert CLI is not None
    started = time.monotonic()
    with EngramClaude(tmp_path, CLI) as world:
        # Engram installed into the temporary HOME, exactly as a user would.
        world.install()
        hooks = json.loads((world.home / ".claude" / "settings.json").read_text())["hooks"]
        assert {"PreToolUse", "SessionStart"} <= set(hooks)
        assert "engram" in json.loads((world.home / ".claude.json").read_text())["mcpServers"]
        world.record_hook_inputs("SessionStart", "PreToolUse")  # a hook of the user's own, next to Engram's
        for text, kind, scope in MEMORIES.values():
            world.remember(text, kind=kind, scope=scope)
        world.start_processor()
        stored = world.wait_for_memories(*(text for text, _, _ in MEMORIES.values()))
        ids = {key: stored[text] for key, (text, _, _) in MEMORIES.items()}

        # ---- first user message: parallel tool calls, then Engram's MCP tools
        run_1 = world.ask(PROMPT_1, [
            world.after_recollection(PROMPT_1, Reply.tools(bash("echo one"), bash("echo two"))),
            world.once_tools_announced(Reply.tool("ToolSearch", {"query": "select:" + ",".join(ENGRAM_TOOLS)})),
            Reply.tool("mcp__engram__memory_recall", {"query": "staging database port"}),
            Reply.from_request(expand_first_hit),
            Reply.tool("mcp__engram__memory_remember", {"text": NEW_MEMORY, "kind": "fact"}),
            Reply.text(ANSWER_1),
        ])
        assert run_1.text == ANSWER_1
        session = run_1.session_id
        first_message = world.server.conversation
        assert all(r.session_id == session for r in first_message)

        # The SessionStart digest is in the very first request: the global preference and this project's
        # memories, once.
        opening = first_message[0].all_text()
        assert opening.count(DIGEST_HEADER) == 1, opening[-3000:]
        for key in ("pref", "staging", "flaky"):
            assert f"(id: {ids[key]})" in opening
        assert BITES_HEADER not in opening  # no tool call yet, so no bites

        # The bites: after the first (parallel) tool calls, once, in a message after their results; every
        # later tool call of the same user message adds nothing.
        counts = [r.all_text().count(BITES_HEADER) for r in first_message]
        assert counts == [0] + [1] * (len(first_message) - 1), counts
        after_tools = first_message[1]
        [bites_at] = message_index(after_tools, BITES_HEADER)
        [bites] = [text for i, text in after_tools.texts() if i == bites_at and BITES_HEADER in text]
        bites = bites[bites.index(FENCE_OPEN):bites.index(FENCE_CLOSE) + len(FENCE_CLOSE)]
        assert f"(id: {ids['staging']})" in bites and "PostgreSQL 16" in bites
        parallel = first_message[0].reply.tool_use_ids
        assert len(parallel) == 2 and set(parallel) <= set(after_tools.tool_results())
        assert bites_at > max(after_tools.result_index(tool_use_id) for tool_use_id in parallel)

        # Engram's MCP tools: announced (Claude Code defers MCP tools behind ToolSearch), loaded, callable.
        search = answering(first_message, "ToolSearch")
        for request in first_message[search + 1:]:
            assert set(ENGRAM_TOOLS) <= set(request.tool_names), request.tool_names
        schema = next(t for t in first_message[-1].body["tools"] if t["name"] == "mcp__engram__memory_recall")
        assert "query" in schema["input_schema"]["properties"]
        recalled = json.loads(tool_result(first_message, "mcp__engram__memory_recall"))
        assert recalled["hits"][0]["id"] == ids["staging"]
        assert recalled["project"] == str(world.repo)
        expanded = tool_result(first_message, "mcp__engram__memory_expand")
        assert ids["staging"] in expanded and MEMORIES["staging"][0] in expanded
        remembered = json.loads(tool_result(first_message, "mcp__engram__memory_remember"))
        assert remembered["queued"] is True and remembered["project"] == str(world.repo)
        new_id = world.wait_for_memories(NEW_MEMORY)[NEW_MEMORY]

        # ---- second user message, same session (--resume), as stream-json
        run_2 = world.ask(PROMPT_2, [
            world.after_recollection(PROMPT_2, Reply.tool(*bash("echo three"))),
            Reply.tools(bash("echo four"), bash("echo five")),
            Reply.text(ANSWER_2),
        ], resume=session, output_format="stream-json")
        assert run_2.text == ANSWER_2 and run_2.session_id == session
        second_message = world.server.conversation[len(first_message):]
        assert len(second_message) == 3

        # The resumed session gets a fresh digest (SessionStart, source "resume") that shows the memory stored
        # through memory_remember a moment ago.
        assert any(f"(id: {new_id})" in text for _, text in second_message[0].texts() if DIGEST_HEADER in text)
        # This message's bites come after its first tool call, once; the earlier ones stay in the history.
        counts = [r.all_text().count(BITES_HEADER) for r in second_message]
        assert counts == [1, 2, 2], counts
        assert f"(id: {ids['flaky']})" not in "".join(t for _, t in second_message[0].texts() if BITES_HEADER in t)
        assert any(f"(id: {ids['flaky']})" in t for _, t in second_message[1].texts() if BITES_HEADER in t)
        assert not world.server.unscripted

        # The hook input fields Engram relies on, as this Claude Code sends them.
        transcript = str(world.transcript(session))
        starts = world.hook_inputs("SessionStart")
        assert [e["source"] for e in starts] == ["startup", "resume"]
        for event in starts:
            assert (event["session_id"], event["transcript_path"], event["cwd"]) == (session, transcript,
                                                                                       str(world.repo))
        pre = world.hook_inputs("PreToolUse")
        assert len(pre) == sum(len(r.reply.tool_use_ids) for r in world.server.conversation if r.reply)
        for event in pre:
            assert (event["session_id"], event["transcript_path"]) == (session, transcript)
            assert event["tool_use_id"].startswith("toolu_") and isinstance(event["tool_input"], dict)

        # ---- nothing Engram injected was captured back into its database
        wait_for(lambda: ANSWER_2 in world.captured_texts(), 30, "the second answer captured")
        rows = world.query("SELECT role, text FROM messages ORDER BY id")
        # The user's side is exactly the two prompts: tool results and every hook's context are left out.
        assert [text for role, text in rows if role == "user"] == [PROMPT_1, PROMPT_2], rows
        # The assistant's side is its answers and one note per tool call.
        said = [text for role, text in rows if role == "assistant"]
        assert ANSWER_1 in said and ANSWER_2 in said, rows
        for text in said:
            assert text in (ANSWER_1, ANSWER_2) or all(
                line.startswith("[tool: ") and line.endswith("]") for line in text.splitlines()), rows
        injected = (FENCE_OPEN, FENCE_CLOSE, DIGEST_HEADER, BITES_HEADER, "memory_expand(id)",
                    "hook additional context", NEW_MEMORY, *(text[:40] for text, _, _ in MEMORIES.values()))
        for _, text in rows:
            for marker in injected:
                assert marker not in text, (marker, text)
        for (content,) in world.query("SELECT full_content FROM episodes"):
            assert FENCE_OPEN not in content and DIGEST_HEADER not in content

        returncode, stderr = world.stop_processor()
    assert returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    elapsed = time.monotonic() - started
    assert elapsed < TIME_LIMIT_SECONDS, f"took {elapsed:.1f} s"
