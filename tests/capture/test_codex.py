"""The Codex CLI's rollouts and the Gemini CLI's chats tailed into a real SQLite file by the one tailer: what
is captured (and what is injected context), tool calls under Claude Code's names, failures, a message written
again, rewinds, and every bad input the issue lists."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import apsw
import pytest

from bench.testbed.agent_transcripts import Chat, Rollout, shell_output
from processor.capture.codex import CodexFormat
from processor.capture.formats import unknown_records
from processor.capture.gemini import GeminiFormat
from processor.capture.tailer import Tailer
from processor.hook_kit.hook_io import fence
from processor.store import open_store, sessions

ENGRAM_DIGEST = fence("Engram memory digest: use uv, never pip (id: ep_0001)")


@pytest.fixture
def conn(tmp_path: Path) -> apsw.Connection:
    connection = open_store(tmp_path / "engram.db")
    yield connection
    connection.close()


@pytest.fixture
def codex_home(tmp_path: Path) -> Path:
    return tmp_path / "codex-home"


@pytest.fixture
def gemini_dir(tmp_path: Path) -> Path:
    return tmp_path / "gemini-home" / ".gemini"


@pytest.fixture
def tailer(conn: apsw.Connection, codex_home: Path, gemini_dir: Path, tmp_path: Path) -> Tailer:
    return Tailer(conn, formats=[CodexFormat(codex_home / "sessions", tmp_path / "engram-home" / "agent-work"),
                                 GeminiFormat(gemini_dir / "tmp", tmp_path / "engram-home" / "agent-work")])


def rows(conn: apsw.Connection, session_id: str) -> list[tuple[str, str]]:
    return [(role, text) for role, text in conn.execute(
        "SELECT role, text FROM messages WHERE session_id = ? ORDER BY id", (session_id,))]


def calls(conn: apsw.Connection, session_id: str) -> list[tuple[str, str | None, int, str | None]]:
    return [tuple(r) for r in conn.execute("SELECT tool, target, failed, error FROM tool_calls WHERE session_id = ? "
                                           "ORDER BY rowid", (session_id,))]


def all_text(conn: apsw.Connection) -> str:
    return "\n".join(text for (text,) in conn.execute("SELECT text FROM messages"))


# ---------------------------------------------------------------- Codex


def codex_session(codex_home: Path) -> Rollout:
    rollout = Rollout(codex_home, cwd="/tmp/shop-api")
    rollout.turn()
    rollout.environment()
    rollout.hook_context(ENGRAM_DIGEST)
    rollout.prompt("Why does the migration fail on CI?")
    rollout.hook_context("<hook_context>PROMPT-CONTEXT</hook_context>")
    rollout.exec_command("uv run alembic upgrade head", "sqlite3.OperationalError: no such column: orders.total",
                         exit_code=1)
    rollout.hook_context(fence("Before this call on uv run alembic: an earlier session left these about it"))
    rollout.exec_command("uv run alembic upgrade head --sql", "ALTER TABLE orders ADD COLUMN total")
    rollout.answer("The migration needs the orders.total column first; run the 0042 revision.")
    rollout.done()
    return rollout


def test_a_codex_session_is_captured_without_what_codex_or_engram_injected(
        conn: apsw.Connection, tailer: Tailer, codex_home: Path) -> None:
    rollout = codex_session(codex_home)
    ended: list[bool] = []
    tailer.listeners.append(lambda session_id, lines, finished=False: ended.append(finished))
    result = tailer.tail(rollout.write())
    assert result.session_id == rollout.session_id and result.agent == "codex"
    assert rows(conn, rollout.session_id) == [
        ("user", "Why does the migration fail on CI?"),
        ("assistant", "[tool: Bash]"),
        ("assistant", "[tool: Bash]"),
        ("assistant", "The migration needs the orders.total column first; run the 0042 revision."),
    ]
    text = all_text(conn)
    for injected in ("environment_context", "Skills", "permissions", "PROMPT-CONTEXT", "Engram memory digest",
                     "<engram-recollection>", "Be precise"):
        assert injected not in text
    # The calls under Claude Code's tool name, so lessons and the lesson index read them as any other's.
    assert calls(conn, rollout.session_id) == [
        ("Bash", "uv run alembic upgrade head", 1, "sqlite3.OperationalError: no such column: orders.total"),
        ("Bash", "uv run alembic upgrade head --sql", 0, None)]
    row = conn.execute("SELECT agent, project FROM sessions WHERE session_id = ?", (rollout.session_id,)).fetchone()
    assert row == ("codex", "/tmp/shop-api")
    assert ended == [True]  # task_complete: the round is complete at once
    assert tailer.tail(rollout.path).captured == []  # nothing new, nothing doubled


def test_a_rollout_cut_mid_line_waits_for_the_rest(conn: apsw.Connection, tailer: Tailer, codex_home: Path) -> None:
    rollout = codex_session(codex_home)
    whole = "".join(rollout.lines)
    cut = whole.index("Why does the migration") + 5
    rollout.path.parent.mkdir(parents=True)
    rollout.path.write_text(whole[:cut])
    assert tailer.tail(rollout.path).captured == []
    with open(rollout.path, "a") as f:
        f.write(whole[cut:])
    assert [c.text for c in tailer.tail(rollout.path).captured][0] == "Why does the migration fail on CI?"
    assert len(rows(conn, rollout.session_id)) == 4


def test_the_session_header_still_being_written_defers_the_file(conn: apsw.Connection, tailer: Tailer,
                                                                codex_home: Path) -> None:
    rollout = codex_session(codex_home)
    rollout.path.parent.mkdir(parents=True)
    rollout.path.write_text(rollout.lines[0][:100])  # half of session_meta: no session to name yet
    assert tailer.tail(rollout.path).captured == []
    assert sessions.session_state(conn, rollout.session_id) is None
    rollout.write()
    assert len(tailer.tail(rollout.path).captured) == 4


def test_record_types_a_newer_codex_adds_are_skipped_and_counted(conn: apsw.Connection, tailer: Tailer,
                                                                 codex_home: Path) -> None:
    rollout = Rollout(codex_home)
    rollout.record("holographic_state", {"type": "x", "data": [1, 2, 3]})
    rollout.record("response_item", {"type": "quantum_call", "id": "q1"})
    rollout.prompt("still captured")
    before = unknown_records().get("codex", {})
    result = tailer.tail(rollout.write())
    assert [c.text for c in result.captured] == ["still captured"]
    after = unknown_records()["codex"]
    assert after["holographic_state"] == before.get("holographic_state", 0) + 1
    assert after["response_item/quantum_call"] == before.get("response_item/quantum_call", 0) + 1
    assert result.problems == 0


def test_older_rollouts_shell_calls_and_json_outputs(conn: apsw.Connection, tailer: Tailer, codex_home: Path) -> None:
    rollout = Rollout(codex_home)
    rollout.prompt("run the tests")
    rollout.record("response_item", {"type": "function_call", "name": "shell", "call_id": "call_old",
                                     "arguments": json.dumps({"command": ["bash", "-lc", "pytest -x tests/a.py"]})})
    rollout.output("call_old", json.dumps({"output": "E   AssertionError: 1 != 2\n1 failed",
                                           "metadata": {"exit_code": 1, "duration_seconds": 0.4}}))
    rollout.record("response_item", {"type": "custom_tool_call", "name": "apply_patch", "call_id": "call_p",
                                     "input": "*** Begin Patch\n*** Update File: tests/a.py\n@@\n-1\n+2\n"
                                              "*** Add File: tests/b.py\n+x\n*** End Patch"})
    tailer.tail(rollout.write())
    assert calls(conn, rollout.session_id) == [
        ("Bash", "pytest -x tests/a.py", 1, "E   AssertionError: 1 != 2\n1 failed"),
        ("Edit", "tests/a.py", 0, None), ("Write", "tests/b.py", 0, None)]
    assert rows(conn, rollout.session_id)[-1] == ("assistant", "[tool: Edit tests/a.py]\n[tool: Write tests/b.py]")


def test_a_commit_made_through_codex_is_a_signal(conn: apsw.Connection, tailer: Tailer, codex_home: Path) -> None:
    rollout = Rollout(codex_home)
    rollout.prompt("commit it")
    rollout.exec_command("git commit -m 'Switch the queue to SKIP LOCKED'", "[main 3f9a2c1] Switch the queue to "
                         "SKIP LOCKED\n 1 file changed")
    tailer.tail(rollout.write())
    ready = conn.execute("SELECT state, text FROM tool_signals").fetchall()
    assert ready == [("ready", "Committed 3f9a2c1: Switch the queue to SKIP LOCKED")]


def test_engrams_own_and_subagent_sessions_are_not_captured(conn: apsw.Connection, tailer: Tailer, codex_home: Path,
                                                            tmp_path: Path) -> None:
    own = Rollout(codex_home, cwd=str(tmp_path / "engram-home" / "agent-work"))
    own.prompt("Extract memories from this transcript")
    sub = Rollout(codex_home, source={"subagent": {"thread_spawn": {"parent_thread_id": "x"}}})
    sub.prompt("a subagent's task")
    for rollout in (own, sub):
        result = tailer.tail(rollout.write())
        assert result.captured == [] and result.skipped
    assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0


def test_a_50_mb_tool_output_is_skipped_with_a_problem_and_the_rest_is_captured(
        conn: apsw.Connection, codex_home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    tailer = Tailer(conn, formats=[CodexFormat(codex_home / "sessions")])
    rollout = Rollout(codex_home)
    rollout.prompt("dump the table")
    call = rollout.exec_command("cat big.csv", "x" * (50 * 1024 * 1024), exit_code=0)
    rollout.answer("That was big.")
    result = tailer.tail(rollout.write())
    assert [c.text for c in result.captured] == ["dump the table", "[tool: Bash]", "That was big."]
    assert result.problems == 2  # the output, and Codex's event that repeats it: each named in a log line
    assert any(p["kind"] == "long_line" for p in tailer.problems.current())
    assert calls(conn, rollout.session_id) == [("Bash", "cat big.csv", 0, None)]
    assert call


def test_a_rollout_deleted_or_replaced_while_tailed(conn: apsw.Connection, tailer: Tailer, codex_home: Path) -> None:
    rollout = codex_session(codex_home)
    path = rollout.write()
    tailer.tail(path)
    path.unlink()
    assert tailer.tail(path).captured == []  # gone: what was captured is kept
    assert len(rows(conn, rollout.session_id)) == 4
    rollout.prompt("one more question")
    rollout.write()  # a new file (new inode) with the same session: re-read from the start, nothing doubled
    result = tailer.tail(path)
    assert result.restarted or [c.text for c in result.captured] == ["one more question"]
    assert [t for _, t in rows(conn, rollout.session_id)].count("Why does the migration fail on CI?") == 1
    assert rows(conn, rollout.session_id)[-1] == ("user", "one more question")


# ---------------------------------------------------------------- Gemini


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
    assert conn.execute("SELECT agent, project FROM sessions WHERE session_id = ?",
                        (chat.session_id,)).fetchone() == ("gemini", "/tmp/shop-api")


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


def test_agent_folders_are_discovered_only_where_their_sessions_live(tmp_path: Path, codex_home: Path,
                                                                    gemini_dir: Path) -> None:
    from processor.capture.discover import discover_all

    rollout = Rollout(codex_home)
    rollout.prompt("x")
    rollout.write()
    chat = Chat(gemini_dir)
    chat.prompt("y")
    chat.write()
    (codex_home / "sessions" / "notes.jsonl").write_text("{}\n")  # not a rollout
    (gemini_dir / "tmp" / "project" / "logs.json").write_text("[]")
    (gemini_dir / "tmp" / "project" / "chats" / "other.jsonl").write_text("{}\n")
    formats = [CodexFormat(codex_home / "sessions"), GeminiFormat(gemini_dir / "tmp"),
               CodexFormat(tmp_path / "no-codex" / "sessions")]
    found = discover_all(formats, None)
    assert sorted(found) == sorted([rollout.path, chat.path])
    assert all(f.accepts(p) for f, p in zip(formats, [rollout.path, chat.path], strict=False))
    assert not formats[0].accepts(codex_home / "sessions" / "notes.jsonl")
    assert os.path.isfile(chat.path)


def test_a_gemini_session_run_in_engrams_own_work_dir_is_not_captured(conn: apsw.Connection, tailer: Tailer,
                                                                       gemini_dir: Path, tmp_path: Path) -> None:
    own = Chat(gemini_dir, project=str(tmp_path / "engram-home" / "agent-work"), slug="agent-work")
    own.prompt("Extract memories from this transcript")
    result = tailer.tail(own.write())
    assert result.captured == [] and result.skipped == "a session Engram's own LLM jobs ran"
    assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0


def test_status_counts_sessions_per_agent_and_names_unknown_records() -> None:
    from processor.status import format_status

    text = format_status({"sessions": 3, "messages": 9, "episodes": 2, "db": "/x/engram.db", "db_exists": True,
                          "sessions_by_agent": {"claude": 1, "codex": 2},
                          "active_sessions": [{"session_id": "s1", "agent": "gemini", "messages": 4,
                                               "last_activity": None, "capture_lag_bytes": 0, "project": "/p"}],
                          "unknown_records": {"codex": {"holographic_state": 3}}})
    assert "sessions: 3 (Claude Code 1, Codex 2)" in text
    assert "s1  Gemini CLI" in text
    assert "Codex record types not known to this Engram (skipped): holographic_state ×3" in text


def test_one_codex_response_is_one_message_even_across_two_tails(conn: apsw.Connection, tailer: Tailer,
                                                                 codex_home: Path) -> None:
    rollout = Rollout(codex_home)
    rollout.prompt("stage the bundle")
    rollout.message("assistant", "The `dist/` folder is git-ignored: it must be force-added.")
    cut = len(rollout.lines)
    call = rollout.exec_command("git add -f dist/app.js", "")
    rollout.answer("Staged.")
    tailer.tail(rollout.write(upto=cut))  # the processor read the message before Codex wrote the call
    tailer.tail(rollout.write())
    assert rows(conn, rollout.session_id) == [
        ("user", "stage the bundle"),
        ("assistant", "The `dist/` folder is git-ignored: it must be force-added.\n[tool: Bash]"),
        ("assistant", "Staged.")]
    assert call
    # A processor that starts afresh reads on from the committed offset with a reader of its own: nothing doubles.
    fresh = Tailer(conn, formats=tailer.formats)
    assert fresh.tail(rollout.path).captured == []


def test_a_file_under_no_captured_root_is_read_by_the_agent_whose_layout_it_has(
        conn: apsw.Connection, tmp_path: Path) -> None:
    """A tailer given no formats (a test's, a benchmark's) reads a rollout as Codex's, a chat as Gemini's, any
    other JSON Lines file as Claude Code's; a file of no agent's layout is refused, naming the path."""
    from bench.testbed.transcripts import user_line
    from processor.capture.tailer import NotATranscript

    tailer = Tailer(conn)
    rollout = codex_session(tmp_path / "copied-codex-home")
    assert tailer.tail(rollout.write()).agent == "codex"
    chat = Chat(tmp_path / "copied-gemini" / ".gemini")
    chat.prompt("Which port does the dev server use?")
    assert tailer.tail(chat.write()).agent == "gemini"
    claude = tmp_path / "copied" / "-tmp-app" / "agent-1234.jsonl"  # a subagent's transcript is Claude Code's too
    claude.parent.mkdir(parents=True)
    claude.write_text(user_line("Run the linter", session_id="agent-1234"))
    assert tailer.tail(claude).agent == "claude"
    assert sessions.counts_by_agent(conn) == {"claude": 1, "codex": 1, "gemini": 1}
    notes = tmp_path / "notes.txt"
    notes.write_text("not a transcript\n")
    with pytest.raises(NotATranscript, match=str(notes)):
        tailer.tail(notes)
