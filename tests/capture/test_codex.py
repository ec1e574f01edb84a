"""The Codex CLI's rollouts tailed into a real SQLite file by the one tailer: what is captured (and what is
injected context), tool calls under Claude Code's names, failures, a response read across two tails, and every bad
input the issue lists."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from bench.testbed.agent_transcripts import Rollout
from processor.capture.codex import CodexFormat
from processor.capture.formats import unknown_records
from processor.capture.tailer import Tailer
from processor.store import sessions
from tests.capture.conftest import all_text, calls, codex_session, rows


def test_a_codex_session_is_captured_without_what_codex_or_engram_injected(
        conn: apsw.Connection, tailer: Tailer, codex_home: Path) -> None:
    rollout = codex_session(codex_home)
    ended: list[bool] = []
    tailer.listeners.append(lambda session_id, lines, finished=False, settle=0.0: ended.append(finished))
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
    assert ready == [("ready", "Committed 3f9a2c1 on `main`: Switch the queue to SKIP LOCKED")]


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


def test_codex_plan_updates_are_the_todo_list_as_claude_codes() -> None:
    from processor.capture.captured import tool_target
    from processor.capture.codex import codex_tool_calls

    plan = {"plan": [{"step": "Add the ledger table", "status": "completed"},
                     {"step": "Wire  the\nimport", "status": "in_progress"}, {"step": "  "}, {"status": "pending"}]}
    [(tool, tool_input)] = codex_tool_calls({"type": "function_call", "name": "update_plan",
                                             "arguments": json.dumps(plan)})
    assert tool == "TodoWrite"
    assert tool_input == {"todos": [{"content": "Add the ledger table", "status": "completed"},
                                    {"content": "Wire  the\nimport", "status": "in_progress"}]}
    assert tool_target(tool_input) == "completed: Add the ledger table\nin_progress: Wire the import"
