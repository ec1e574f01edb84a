"""The Gemini CLI's chats tailed into a real SQLite file by the one tailer: what is captured (and what is injected
context), a message written again, rewinds, resumed sessions, tool errors and names, and every bad input the issue
lists."""

from __future__ import annotations

import logging
from pathlib import Path

import apsw
import pytest

from bench.testbed.agent_transcripts import Chat, shell_output
from processor.capture.tailer import Tailer
from tests.capture.conftest import ENGRAM_DIGEST, all_text, calls, rows


def gemini_session(gemini_dir: Path) -> tuple[Chat, str]:
    chat = Chat(gemini_dir, project="/tmp/shop-api", slug="shop-api")
    chat.prompt("Why does the build fail?", start_context=ENGRAM_DIGEST, agent_context="BEFORE-AGENT-CONTEXT")
    first = chat.reply("Let me run it.")
    failed = chat.tool_call("run_shell_command", {"command": "npm run build"},
                            shell_output("error TS2304: Cannot find name 'Order'.", 2), after_tool="AFTER-TOOL-CTX")
    chat.reply("Let me run it.", message_id=first, tool_calls=[failed])  # the later copy: calls and results
    chat.results([failed])
    chat.reply("Order is not imported in src/cart.ts; add the import.")
    return chat, first


def test_a_gemini_session_is_captured_without_injected_context(conn: apsw.Connection, tailer: Tailer,
                                                               gemini_dir: Path) -> None:
    chat, _ = gemini_session(gemini_dir)
    result = tailer.tail(chat.write())
    assert result.session_id == chat.session_id and result.agent == "gemini"
    assert rows(conn, chat.session_id) == [
        ("user", "Why does the build fail?"),
        ("assistant", "Let me run it.\n[tool: Bash]"),  # the last copy won
        ("assistant", "Order is not imported in src/cart.ts; add the import."),
    ]
    text = all_text(conn)
    for injected in ("session_context", "Gemini CLI", "BEFORE-AGENT", "AFTER-TOOL", "Engram memory digest",
                     "hook_context"):
        assert injected not in text
    [(tool, target, failed, error)] = calls(conn, chat.session_id)
    assert (tool, target, failed) == ("Bash", "npm run build", 1)
    assert "TS2304" in error and "Exit Code: 2" in error and "AFTER-TOOL" not in error
    # As the command printed it: not under Gemini's "Output:" label, nor with its process group's id.
    assert error.startswith("error TS2304") and "PGID" not in error, error
    assert conn.execute("SELECT agent, project FROM sessions WHERE session_id = ?",
                        (chat.session_id,)).fetchone() == ("gemini", "/tmp/shop-api")


def test_a_gemini_turn_ends_at_the_answer_that_asked_for_no_tool_call(tailer: Tailer, gemini_dir: Path) -> None:
    """Gemini writes no end-of-turn record: the answer with text and no tool call ends the turn, to count once it
    settled; the message written before its tool calls ran, and its copy with them, go on with the turn."""
    chat, first = gemini_session(gemini_dir)
    heard: list[tuple[bool, float]] = []
    tailer.listeners.append(lambda session_id, lines, finished=False, settle=0.0: heard.append((finished, settle)))
    path = chat.write(upto=4)  # header, checkpoint, prompt and its $set
    tailer.tail(path)
    assert heard == [(False, 0.0)]
    # "Let me run it." before its shell command ran: it may be the answer; only settling tells.
    path.write_text("".join(chat.lines[:6]))
    tailer.tail(path)
    assert heard[-1] == (True, 2.0)
    # Its copy with the tool call and its result: the turn goes on.
    path.write_text("".join(chat.lines[:9]))
    tailer.tail(path)
    assert heard[-1] == (False, 0.0)
    # The final answer; its $set line after it changes nothing.
    path.write_text("".join(chat.lines))
    tailer.tail(path)
    assert heard[-1] == (True, 2.0)
    assert len(heard) == 4
    # Kept with the lines: a processor killed before it built the round builds it when it starts again.
    assert tailer.conn.execute("SELECT turn_ended FROM sessions WHERE session_id = ?",
                               (chat.session_id,)).fetchone() == (1,)


def test_the_same_message_appended_three_times_is_one_row_and_the_last_copy_wins(
        conn: apsw.Connection, tailer: Tailer, gemini_dir: Path) -> None:
    chat = Chat(gemini_dir)
    chat.prompt("read the config")
    message_id = chat.reply("")
    read = chat.tool_call("read_file", {"file_path": "/tmp/project/config.toml"}, "[server]\nport = 1")
    chat.reply("Reading it.", message_id=message_id)
    chat.reply("Reading it.", message_id=message_id, tool_calls=[read])
    path = chat.write()
    for cut in (3, 5, len(chat.lines)):  # copy by copy, across tails
        path.write_text("".join(chat.lines[:cut]))
        tailer.tail(path)
    assert rows(conn, chat.session_id) == [("user", "read the config"),
                                           ("assistant", "Reading it.\n[tool: Read /tmp/project/config.toml]")]
    assert calls(conn, chat.session_id) == [("Read", "/tmp/project/config.toml", 0, None)]
    # Read again from the start (a new inode): the copies replay in order and end on the same text.
    path.unlink()
    path.write_text("".join(chat.lines))
    tailer.tail(path)
    assert rows(conn, chat.session_id)[-1] == ("assistant", "Reading it.\n[tool: Read /tmp/project/config.toml]")
    assert conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'config'").fetchone()[0] >= 1


def test_a_rewind_removes_what_was_rewound(conn: apsw.Connection, tailer: Tailer, gemini_dir: Path) -> None:
    chat = Chat(gemini_dir)
    chat.prompt("first question")
    chat.reply("first answer")
    second = chat.prompt("a question the user took back")
    chat.reply("an answer to it")
    tailer.tail(chat.write())
    conn.execute("UPDATE sessions SET episodized_through = 1000 WHERE session_id = ?", (chat.session_id,))
    chat.rewind(second)
    chat.prompt("the question asked instead")
    chat.append(*chat.lines[-3:])
    result = tailer.tail(chat.path)
    assert result.rewound == 2
    assert [t for _, t in rows(conn, chat.session_id)] == ["first question", "first answer",
                                                           "the question asked instead"]
    first_rewound = conn.execute("SELECT max(id) FROM messages WHERE session_id = ?",
                                 (chat.session_id,)).fetchone()[0]
    through = conn.execute("SELECT episodized_through FROM sessions WHERE session_id = ?",
                           (chat.session_id,)).fetchone()[0]
    assert through < first_rewound  # the new message is not taken as already episodized
    assert [c.text for c in result.captured] == ["the question asked instead"]


def test_a_rewind_to_an_id_not_seen_removes_nothing_and_says_so(
        conn: apsw.Connection, tailer: Tailer, gemini_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    chat = Chat(gemini_dir)
    chat.prompt("keep me")
    chat.rewind("0f0f0f0f-never-seen")
    chat.reply("and me")
    with caplog.at_level(logging.WARNING):
        result = tailer.tail(chat.write())
    assert [t for _, t in rows(conn, chat.session_id)] == ["keep me", "and me"]
    assert result.problems == 1
    assert any("never captured" in r.message and "0f0f0f0f-never-seen" in r.message for r in caplog.records)


def test_a_resumed_gemini_session_appends_a_header_and_a_checkpoint(conn: apsw.Connection, tailer: Tailer,
                                                                    gemini_dir: Path) -> None:
    chat = Chat(gemini_dir)
    chat.prompt("before resume")
    chat.reply("ok")
    chat.header()  # --resume: a header again, then a checkpoint of the model's history
    chat.add({"$set": {"messages": [{"id": "x", "type": "user", "content": [{"text": "before resume"}]}]}})
    chat.prompt("after resume")
    tailer.tail(chat.write())
    assert [t for _, t in rows(conn, chat.session_id)] == ["before resume", "ok", "after resume"]


def test_gemini_tool_errors_and_names(conn: apsw.Connection, tailer: Tailer, gemini_dir: Path) -> None:
    chat = Chat(gemini_dir)
    chat.prompt("fix it")
    reply = chat.reply("")
    missing = chat.tool_call("read_file", {"file_path": "/tmp/project/missing.txt"}, "", status="error",
                             error="File not found: /tmp/project/missing.txt")
    wrote = chat.tool_call("write_file", {"file_path": "/tmp/project/new.txt", "content": "x"},
                           "Successfully created and wrote to new file: /tmp/project/new.txt.")
    grep = chat.tool_call("grep_search", {"pattern": "TODO", "dir_path": "src"}, "Found 2 matches")
    mcp = chat.tool_call("mcp_engram_memory_recall", {"query": "build"}, "No memories found.")
    chat.reply("", message_id=reply, tool_calls=[missing, wrote, grep, mcp])
    tailer.tail(chat.write())
    assert calls(conn, chat.session_id) == [
        ("Read", "/tmp/project/missing.txt", 1, "File not found: /tmp/project/missing.txt"),
        ("Write", "/tmp/project/new.txt", 0, None), ("Grep", "src", 0, None),  # as Claude Code's Grep: its path
        ("mcp_engram_memory_recall", "build", 0, None)]


def test_a_subagent_chat_and_a_header_less_file(conn: apsw.Connection, tailer: Tailer, gemini_dir: Path) -> None:
    sub = Chat(gemini_dir, kind="subagent")
    sub.prompt("a subagent's task")
    assert tailer.tail(sub.write()).skipped
    odd = gemini_dir / "tmp" / "project" / "chats" / "session-2026-11-27T06-00-deadbeef.jsonl"
    odd.write_text('{"id":"m1","timestamp":"2026-11-27T06:00:00.000Z","type":"user","content":"no header"}\n')
    result = tailer.tail(odd)
    assert result.session_id == "gemini-session-2026-11-27T06-00-deadbeef"
    assert [c.text for c in result.captured] == ["no header"]


def test_a_gemini_session_run_in_engrams_own_work_dir_is_not_captured(conn: apsw.Connection, tailer: Tailer,
                                                                       gemini_dir: Path, tmp_path: Path) -> None:
    own = Chat(gemini_dir, project=str(tmp_path / "engram-home" / "agent-work"), slug="agent-work")
    own.prompt("Extract memories from this transcript")
    result = tailer.tail(own.write())
    assert result.captured == [] and result.skipped == "a session Engram's own LLM jobs ran"
    assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0


def test_gemini_write_todos_is_the_todo_list_as_claude_codes() -> None:
    from processor.capture.captured import tool_target
    from processor.capture.gemini import gemini_tool

    tool, tool_input = gemini_tool("write_todos", {"todos": [
        {"description": "Fix the flaky import test", "status": "in_progress"},
        {"description": "Update docs", "status": "someday"}, "not a todo"]})
    assert tool == "TodoWrite"
    assert tool_target(tool_input) == "in_progress: Fix the flaky import test\npending: Update docs"
    assert gemini_tool("write_todos", None) == ("TodoWrite", {"todos": []})
