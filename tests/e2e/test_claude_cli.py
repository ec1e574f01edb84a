"""Engram in a real Claude Code session: the CLI bundled with claude-agent-sdk, run with `claude -p` in a
temporary HOME where `engram install` registered the hooks and the MCP server, against a fake Messages
API on 127.0.0.1 (bench/testbed/fake_anthropic.py), with the real processor (`engram run`) capturing the
session's transcript as Claude Code writes it.

What the model is sent is the proof: every request body the CLI posts is recorded, so the test sees
exactly what reached the model — the SessionStart digest, the PreToolUse bites (once per user message,
also with parallel tool calls), Engram's MCP tools and their results — and, from the database, that
nothing Engram injected was captured back into it; what the user is shown (the hooks' one-line
`systemMessage`, from the transcript and the stream-json events); and that the plugin folder `engram plugin`
writes is a local marketplace the CLI installs from.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from bench.testbed.claude_cli import (
    BITES_HEADER,
    DIGEST_HEADER,
    ENGRAM_TOOLS,
    FENCE_CLOSE,
    FENCE_OPEN,
    ClaudeCLI,
    EngramClaude,
    wait_for,
)
from bench.testbed.fake_anthropic import Reply, Request
from processor.hook_kit.hook_io import injected_line

CLI = ClaudeCLI.bundled()
pytestmark = pytest.mark.skipif(
    CLI is None,
    reason="the installed claude-agent-sdk has no bundled Claude Code CLI (claude_agent_sdk/_bundled/claude)")

TIME_LIMIT_SECONDS = 90

MEMORIES = {
    "pref": ("User prefers uv over pip for installing Python packages", "preference", "global"),
    "staging": ("shop-api staging database: PostgreSQL 16 behind pgbouncer on port 6543, reached through the "
                "bastion host", "fact", "project"),
    # A fact, not a gotcha: gotchas are digest material (lessons and rules first), and this one must be a bite.
    "flaky": ("shop-api checkout tests are flaky unless time is frozen with freezegun", "fact", "project"),
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
    """The model reads memory_recall's answer and expands its best memory."""
    [result] = [text for text in request.tool_results().values() if "— ID: " in text]
    return Reply.tool("mcp__engram__memory_expand", {"id": next(i for i in hit_ids(result) if i.startswith("ep_"))})


def hit_ids(recall_text: str) -> list[str]:
    """The ids of memory_recall's compact text answer (`[1] (date, importance) bite — ID: ep_…`), best first."""
    return [line.rpartition("— ID: ")[2] for line in recall_text.splitlines() if "— ID: " in line]


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
        # Three days old and ordinary: left out of the digest, so they can be bites (a bite never
        # repeats what the session's digest showed).
        for key in ("staging", "flaky"):
            world.backdate(ids[key], days=3)

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
        # The finished turn (end_turn on its last line) becomes a memory at once, not on the 5-minute idle
        # timer: a decision of a one-shot `claude -p` session is recallable from the next session.
        wait_for(lambda: any(ANSWER_1 in content for (content,) in world.query(
            "SELECT full_content FROM episodes WHERE session_id = ?", (run_1.session_id,))), 20,
            "the finished round stored as a memory")
        first_message = world.server.conversation
        assert all(r.session_id == session for r in first_message)

        # The SessionStart digest is in the very first request: the global preference, once; the two old,
        # ordinary memories are not digest material.
        opening = first_message[0].all_text()
        assert opening.count(DIGEST_HEADER) == 1, opening[-3000:]
        assert f"(id: {ids['pref']})" in opening
        assert f"(id: {ids['staging']})" not in opening and f"(id: {ids['flaky']})" not in opening
        assert "mcp__engram__memory_expand(id)" in opening  # the name ToolSearch finds the tool by
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
        assert f"(id: {ids['pref']})" not in bites  # the digest showed it already
        parallel = first_message[0].reply.tool_use_ids
        assert len(parallel) == 2 and set(parallel) <= set(after_tools.tool_results())
        assert bites_at > max(after_tools.result_index(tool_use_id) for tool_use_id in parallel)

        # Engram's MCP tools: announced (Claude Code defers MCP tools behind ToolSearch), loaded, callable.
        search = answering(first_message, "ToolSearch")
        for request in first_message[search + 1:]:
            assert set(ENGRAM_TOOLS) <= set(request.tool_names), request.tool_names
        schema = next(t for t in first_message[-1].body["tools"] if t["name"] == "mcp__engram__memory_recall")
        assert "query" in schema["input_schema"]["properties"]
        # The model reads Engram's compact text, not a JSON copy of it (structuredContent).
        recalled = tool_result(first_message, "mcp__engram__memory_recall")
        assert not recalled.lstrip().startswith("{") and recalled.splitlines()[0].startswith("[1] ("), recalled
        # memory_recall knows the calling session: this session's own prompt, not yet in any memory, is
        # found beside the memories (same-session search through MCP).
        assert any(re.match(r"\[\d\] \(", line) and "(this session, user)" in line and PROMPT_1 in line
                   for line in recalled.splitlines()), recalled
        assert [i for i in hit_ids(recalled) if i.startswith("ep_")][0] == ids["staging"], recalled
        expanded = tool_result(first_message, "mcp__engram__memory_expand")
        assert ids["staging"] in expanded and MEMORIES["staging"][0] in expanded
        assert expanded.startswith(f"## Memory {ids['staging']}")
        remembered = tool_result(first_message, "mcp__engram__memory_remember")
        assert remembered.startswith("Queued; the Engram processor stores it"), remembered
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

        # The user sees one line per injection naming what was injected (the hooks' systemMessage): in the
        # transcript as a hook_system_message attachment, in stream-json as an informational system event;
        # the model never gets it.
        shown = [(entry["attachment"]["hookName"], entry["attachment"]["content"])
                 for entry in map(json.loads, world.transcript(session).read_text().splitlines())
                 if entry.get("attachment", {}).get("type") == "hook_system_message"]
        assert shown[0] == ("SessionStart:startup", f"Engram: 1 memory — {ids['pref']}"), shown
        assert ("PreToolUse:Bash", f"Engram: 1 memory — {ids['staging']}") in shown, shown
        resumed = [text for _, text in second_message[0].texts() if DIGEST_HEADER in text][-1]  # the newest
        resumed = resumed[resumed.rindex(DIGEST_HEADER):]
        resumed_ids = re.findall(r"\(id: ([^)]+)\)", resumed[:resumed.index(FENCE_CLOSE)])
        assert ids["pref"] in resumed_ids and new_id in resumed_ids, resumed
        assert ("SessionStart:resume", injected_line(resumed_ids)) in shown, shown
        notices = [e["content"] for e in run_2.events
                   if e.get("type") == "system" and e.get("subtype") == "informational"]
        assert f"PreToolUse:Bash says: Engram: 1 memory — {ids['flaky']}" in notices, notices
        assert not any("Engram: 1 memory" in text for r in world.server.conversation for _, text in r.texts())

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
        injected = (FENCE_OPEN, FENCE_CLOSE, DIGEST_HEADER, BITES_HEADER, "memory_expand(id)", "Engram: ",
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


def test_the_plugin_folder_is_a_marketplace_the_real_cli_installs_offline(tmp_path: Path) -> None:
    """`engram plugin --out DIR`, then the CLI's own `plugin marketplace add DIR` and `plugin install`."""
    assert CLI is not None
    from processor.install.plugin import MARKETPLACE_NAME, PLUGIN_NAME, write_plugin

    folder = tmp_path / "engram-plugin"
    write_plugin(folder)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}

    def claude(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(CLI.path), "plugin", *args], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    claude("marketplace", "add", str(folder))
    claude("install", f"{PLUGIN_NAME}@{MARKETPLACE_NAME}")
    listed = claude("list").stdout
    assert f"{PLUGIN_NAME}@{MARKETPLACE_NAME}" in listed and "enabled" in listed, listed
    installed = json.loads((home / ".claude" / "plugins" / "installed_plugins.json").read_text())
    assert f"{PLUGIN_NAME}@{MARKETPLACE_NAME}" in json.dumps(installed)
