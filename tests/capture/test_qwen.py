"""Qwen Code's chats tailed into a real SQLite file by the one tailer: what is captured (and what is injected
context, HTML-escaped as Qwen files it), the end of a turn, tool failures (a shell command that exited non-zero is
one) and names, MCP calls through Qwen's bridge, rewinds, and the bad input the issue lists."""

from __future__ import annotations

import logging
from pathlib import Path

import apsw
import pytest

from bench.testbed.qwen_chats import QwenChat
from processor.capture.formats import unknown_records
from processor.capture.qwen import QwenFormat
from processor.capture.tailer import Tailer
from processor.hook_kit.hook_io import fence
from tests.capture.conftest import all_text, calls, rows

FIX_TOLD = fence("This failed the same way in an earlier session of this project:\n- use `npm ci` first")


@pytest.fixture
def qwen_dir(tmp_path: Path) -> Path:
    return tmp_path / "qwen-home" / ".qwen"


@pytest.fixture
def tailer(conn: apsw.Connection, qwen_dir: Path, tmp_path: Path) -> Tailer:
    return Tailer(conn, formats=[QwenFormat(qwen_dir / "projects", tmp_path / "engram-home" / "agent-work")])


def qwen_session(qwen_dir: Path) -> QwenChat:
    chat = QwenChat(qwen_dir, cwd="/tmp/shop-api")
    chat.prompt("Why does the build fail?", context=fence("PROMPT-BITES"))
    chat.call("run_shell_command", {"command": "npm run build"}, "error TS2304: Cannot find name 'Order'.",
              text="Let me run it.", exit_code=2, context=FIX_TOLD)
    chat.call("read_file", {"file_path": "/tmp/shop-api/src/missing.ts"}, "",
              error="File not found: /tmp/shop-api/src/missing.ts", context=fence("ABOUT-THIS-CALL"))
    chat.call("run_shell_command", {"command": "npm ci && npm run build"}, "built", exit_code=0,
              context=fence("AFTER-SUCCESS"))
    chat.answer("Order is not imported in src/cart.ts; add the import.", thought="**Thinking** about imports")
    return chat


def test_a_qwen_session_is_captured_without_injected_context(conn: apsw.Connection, tailer: Tailer,
                                                             qwen_dir: Path) -> None:
    chat = qwen_session(qwen_dir)
    assert chat.path.parent.parent.name == "-tmp-shop-api"
    result = tailer.tail(chat.write())
    assert result.session_id == chat.session_id and result.agent == "qwen"
    assert rows(conn, chat.session_id) == [
        ("user", "Why does the build fail?"),
        ("assistant", "Let me run it.\n[tool: Bash]"),
        ("assistant", "[tool: Read /tmp/shop-api/src/missing.ts]"),
        ("assistant", "[tool: Bash]"),
        ("assistant", "Order is not imported in src/cart.ts; add the import."),
    ]
    text = all_text(conn)
    for injected in ("engram-recollection", "PROMPT-BITES", "qwen:", "ABOUT-THIS-CALL", "npm ci` first",
                     "AFTER-SUCCESS", "Thinking"):
        assert injected not in text
    assert calls(conn, chat.session_id) == [
        ("Bash", "npm run build", 1, "error TS2304: Cannot find name 'Order'."),  # the command's own output
        ("Read", "/tmp/shop-api/src/missing.ts", 1, "File not found: /tmp/shop-api/src/missing.ts"),
        ("Bash", "npm ci && npm run build", 0, None)]
    assert conn.execute("SELECT agent, project FROM sessions WHERE session_id = ?",
                        (chat.session_id,)).fetchone() == ("qwen", "/tmp/shop-api")
    # An answer calling no tool ends the turn (Qwen writes no end-of-turn record): the round is complete at once.
    assert [c.end_turn for c in result.captured] == [False] * 4 + [True]
    assert tailer.tail(chat.path).captured == []  # nothing new, nothing doubled


def test_a_chat_truncated_mid_line_waits_for_the_rest(conn: apsw.Connection, tailer: Tailer, qwen_dir: Path) -> None:
    chat = qwen_session(qwen_dir)
    whole = "".join(chat.lines)
    cut = whole.index("Let me run it.") + 4
    chat.path.parent.mkdir(parents=True)
    chat.path.write_text(whole[:cut])
    assert [c.text for c in tailer.tail(chat.path).captured] == ["Why does the build fail?"]
    with open(chat.path, "a") as f:
        f.write(whole[cut:])
    assert [c.text for c in tailer.tail(chat.path).captured][0] == "Let me run it.\n[tool: Bash]"
    assert len(rows(conn, chat.session_id)) == 5


def test_mcp_calls_through_qwens_bridge_are_the_tool_they_call(conn: apsw.Connection, tailer: Tailer,
                                                               qwen_dir: Path) -> None:
    chat = QwenChat(qwen_dir)
    chat.prompt("what do we know about the build?")
    chat.call("tool_search", {"query": "select:mcp__engram__memory_recall"}, "<functions>…</functions>")
    chat.call("tool_call", {"name": "mcp__engram__memory_recall", "arguments": {"query": "build"}}, "[1] …")
    chat.call("glob", {"pattern": "**/*.ts", "path": "src"}, "src/cart.ts")
    chat.call("edit", {"file_path": "/tmp/project/a.py", "old_string": "a", "new_string": "b"}, "edited")
    tailer.tail(chat.write())
    assert calls(conn, chat.session_id) == [
        ("tool_search", "select:mcp__engram__memory_recall", 0, None), ("mcp__engram__memory_recall", "build", 0, None),
        ("Glob", "src", 0, None), ("Edit", "/tmp/project/a.py", 0, None)]


def test_what_qwen_files_as_the_users_and_is_not(conn: apsw.Connection, tailer: Tailer, qwen_dir: Path) -> None:
    chat = QwenChat(qwen_dir)
    chat.prompt("start the goal")
    chat.record("user", {"subtype": "goal_runtime", "message": {"role": "user", "parts": [{"text": "GOAL-TICK"}]}},
                provenance="goal_runtime")
    chat.record("user", {"subtype": "cron", "message": {"role": "user", "parts": [{"text": "CRON-PROMPT"}]}})
    chat.record("user", {"subtype": "mid_turn_user_message",
                         "message": {"role": "user", "parts": [{"text": "also check the tests"}]}})
    chat.system("slash_command", {"command": "/about"})
    tailer.tail(chat.write())
    assert [t for _, t in rows(conn, chat.session_id)] == ["start the goal", "also check the tests"]


def test_record_types_a_newer_qwen_adds_are_skipped_and_counted(conn: apsw.Connection, tailer: Tailer,
                                                                qwen_dir: Path) -> None:
    chat = QwenChat(qwen_dir)
    chat.record("hologram", {"data": 1})
    chat.system("quantum_snapshot", {"x": 1})
    chat.prompt("still captured")
    before = dict(unknown_records().get("qwen", {}))
    result = tailer.tail(chat.write())
    assert [c.text for c in result.captured] == ["still captured"] and result.problems == 0
    after = unknown_records()["qwen"]
    assert after["hologram"] == before.get("hologram", 0) + 1
    assert after["system/quantum_snapshot"] == before.get("system/quantum_snapshot", 0) + 1


def test_a_rewind_removes_the_turn_the_user_took_back(conn: apsw.Connection, tailer: Tailer, qwen_dir: Path) -> None:
    chat = QwenChat(qwen_dir)
    chat.prompt("first question")
    chat.answer("first answer")
    second = chat.prompt("a question the user took back")
    chat.answer("an answer to it")
    chat.rewind(second)
    chat.prompt("the question asked instead")
    result = tailer.tail(chat.write())
    assert result.rewound == 2
    assert [t for _, t in rows(conn, chat.session_id)] == ["first question", "first answer",
                                                           "the question asked instead"]


def test_records_whose_first_key_is_another_are_read_all_the_same(conn: apsw.Connection, tailer: Tailer,
                                                                   qwen_dir: Path) -> None:
    """Qwen puts a background turn's marker first in a record: the type is then read from the parsed record, and
    a system record is still no rewind."""
    chat = QwenChat(qwen_dir)
    chat.prompt("first question")
    chat.answer("first answer")
    chat.lines = [line.replace('{"uuid"', '{"backgroundTurn":{"id":"b1","type":"task"},"uuid"', 1)
                  for line in chat.lines]
    chat.system("attribution_snapshot", {"snapshot": {}})
    chat.lines[-1] = chat.lines[-1].replace('{"uuid"', '{"backgroundTurn":{"id":"b1"},"uuid"', 1)
    result = tailer.tail(chat.write())
    assert [t for _, t in rows(conn, chat.session_id)] == ["first question", "first answer"]
    assert result.problems == 0 and result.rewound == 0


def test_a_rewind_of_a_turn_read_before_a_restart_removes_nothing_and_says_so(
        conn: apsw.Connection, qwen_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    chat = QwenChat(qwen_dir)
    second = chat.prompt("a question the user took back")
    chat.answer("an answer to it")
    Tailer(conn, formats=[QwenFormat(qwen_dir / "projects")]).tail(chat.write())
    chat.rewind(second)
    chat.append(chat.lines[-1])
    with caplog.at_level(logging.WARNING):
        result = Tailer(conn, formats=[QwenFormat(qwen_dir / "projects")]).tail(chat.path)  # a restarted processor
    assert result.problems == 1 and len(rows(conn, chat.session_id)) == 2
    assert any("rewind to a turn this reader has not seen" in r.message for r in caplog.records)


def test_a_qwen_session_run_in_engrams_own_work_dir_is_not_captured(conn: apsw.Connection, tailer: Tailer,
                                                                    qwen_dir: Path, tmp_path: Path) -> None:
    own = QwenChat(qwen_dir, cwd=str(tmp_path / "engram-home" / "agent-work"))
    own.prompt("Extract memories from this transcript")
    result = tailer.tail(own.write())
    assert result.captured == [] and result.skipped == "a session Engram's own LLM jobs ran"
    assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0


def test_only_chats_are_discovered(qwen_dir: Path) -> None:
    from processor.capture.discover import discover_all

    chat = QwenChat(qwen_dir)
    chat.prompt("x")
    chat.write()
    chats = chat.path.parent
    (chats / f"{chat.session_id}.ledger.jsonl").write_text("{}\n")
    (chats / "archive").mkdir()
    (chats / "archive" / f"{chat.session_id}.jsonl").write_text("{}\n")
    subagents = chats.parent / "subagents" / chat.session_id
    subagents.mkdir(parents=True)
    (subagents / "agent-1.jsonl").write_text("{}\n")
    assert discover_all([QwenFormat(qwen_dir / "projects")], None) == [chat.path]
