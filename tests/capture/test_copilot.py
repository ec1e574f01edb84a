"""The GitHub Copilot CLI's sessions tailed into a real SQLite file by the one tailer: what is captured (and what is
injected context), a model call's messages as one, the end of a turn, sub-agents, tool failures (a shell
command that exited non-zero is a success to Copilot) and names, and the bad input the issue lists."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from bench.testbed.copilot_sessions import CopilotSession
from processor.capture.copilot import CopilotFormat
from processor.capture.formats import unknown_records
from processor.capture.tailer import Tailer
from processor.store import sessions
from tests.capture.conftest import ENGRAM_DIGEST, all_text, calls, rows

FIX_TOLD = "<engram-recollection>\nThis failed the same way in an earlier session: use npm ci\n</engram-recollection>"


@pytest.fixture
def copilot_home(tmp_path: Path) -> Path:
    return tmp_path / "copilot-home"


@pytest.fixture
def tailer(conn: apsw.Connection, copilot_home: Path, tmp_path: Path) -> Tailer:
    own_work = tmp_path / "engram-home" / "agent-work"
    return Tailer(conn, formats=[CopilotFormat(copilot_home / "session-state", own_work)])


def copilot_session(copilot_home: Path) -> CopilotSession:
    session = CopilotSession(copilot_home, cwd="/tmp/shop-api")
    session.hook("sessionStart", {"source": "new", "initialPrompt": "Why does the build fail?"}, ENGRAM_DIGEST)
    session.prompt("Why does the build fail?", context="<engram-recollection>PROMPT-BITES</engram-recollection>")
    session.call("bash", {"command": "npm run build", "description": "build"}, "error TS2304: Cannot find name "
                 "'Order'.", text="Let me run it.", exit_code=2, guidance=FIX_TOLD)
    session.call("view", {"path": "/tmp/shop-api/src/missing.ts"}, "", error="Path does not exist",
                 failure_context="<engram-recollection>FAILURE-CONTEXT</engram-recollection>")
    session.call("bash", {"command": "npm ci && npm run build", "description": "build"}, "built", exit_code=0,
                 guidance="<engram-recollection>ABOUT-THIS-CALL</engram-recollection>")
    session.answer("Order is not imported in src/cart.ts; add the import.")
    session.shutdown()
    return session


def test_a_copilot_session_is_captured_without_injected_context(conn: apsw.Connection, tailer: Tailer,
                                                                copilot_home: Path) -> None:
    session = copilot_session(copilot_home)
    result = tailer.tail(session.write())
    assert result.session_id == session.session_id and result.agent == "copilot"
    assert rows(conn, session.session_id) == [
        ("user", "Why does the build fail?"),
        ("assistant", "Let me run it.\n[tool: Bash]"),
        ("assistant", "[tool: Read /tmp/shop-api/src/missing.ts]"),
        ("assistant", "[tool: Bash]"),
        ("assistant", "Order is not imported in src/cart.ts; add the import."),
    ]
    text = all_text(conn)
    for injected in ("engram-recollection", "PROMPT-BITES", "FAILURE-CONTEXT", "ABOUT-THIS-CALL", "use npm ci",
                     "system_reminder", "current_datetime", "Engram memory digest", "GitHub Copilot CLI"):
        assert injected not in text
    assert calls(conn, session.session_id) == [
        # A non-zero exit is a successful call to Copilot, and a failure to Engram; its shellId line is left out.
        ("Bash", "npm run build", 1, "error TS2304: Cannot find name 'Order'."),
        ("Read", "/tmp/shop-api/src/missing.ts", 1, "Path does not exist"),
        ("Bash", "npm ci && npm run build", 0, None)]
    assert conn.execute("SELECT agent, project FROM sessions WHERE session_id = ?",
                        (session.session_id,)).fetchone() == ("copilot", "/tmp/shop-api")
    assert result.captured[-1].end_turn  # the answer that asked for no tool: the round is complete at once
    assert tailer.tail(session.path).captured == []  # nothing new, nothing doubled


def test_a_model_calls_messages_are_one_and_the_turn_ends_at_its_last(conn: apsw.Connection, tailer: Tailer,
                                                                     copilot_home: Path) -> None:
    session = CopilotSession(copilot_home)
    session.prompt("explain the cache")
    for index, text in enumerate(("The cache is keyed by path.", "It is cleared on deploy.")):
        session.event("assistant.message", {"messageId": f"m{index}", "content": text, "toolRequests": [],
                                            "apiCallId": "chatcmpl_1", "chunkIndex": index, "chunkCount": 2})
    result = tailer.tail(session.write())
    assert rows(conn, session.session_id)[1:] == [
        ("assistant", "The cache is keyed by path.\nIt is cleared on deploy.")]
    assert [c.end_turn for c in result.captured] == [False, False, True]


def test_sub_agents_skills_and_autopilot_are_not_the_users_words(conn: apsw.Connection, tailer: Tailer,
                                                                 copilot_home: Path) -> None:
    session = CopilotSession(copilot_home)
    session.prompt("refactor the cart")
    session.call("task", {"prompt": "find the cart module"}, "done")
    session.call("bash", {"command": "grep -r cart src"}, "no match", exit_code=1, agent_id="explore-1")
    session.answer("I looked in src/.", agent_id="explore-1")
    session.prompt("<skill>pdf instructions</skill>", source="skill-pdf")
    session.prompt("keep going", isAutopilotContinuation=True)
    session.answer("The cart lives in src/cart.ts.")
    tailer.tail(session.write())
    assert [t for _, t in rows(conn, session.session_id)] == [
        "refactor the cart", "[tool: task]", "The cart lives in src/cart.ts."]
    assert [c[0] for c in calls(conn, session.session_id)] == ["task"]


def test_a_folder_without_workspace_yaml_and_a_start_event_cut_short(conn: apsw.Connection, tailer: Tailer,
                                                                    copilot_home: Path) -> None:
    bare = CopilotSession(copilot_home, cwd="/tmp/no-workspace", workspace=False)
    bare.prompt("hello")
    result = tailer.tail(bare.write())
    assert not (bare.folder / "workspace.yaml").exists() and [c.text for c in result.captured] == ["hello"]
    assert conn.execute("SELECT project FROM sessions WHERE session_id = ?",
                        (bare.session_id,)).fetchone() == ("/tmp/no-workspace",)
    odd = CopilotSession(copilot_home, cwd="/tmp/from-workspace")
    odd.lines[0] = '{"type":"session.start","data":{"sessionId":"x"}}\n'  # no context: workspace.yaml says
    odd.prompt("hi")
    tailer.tail(odd.write())
    assert conn.execute("SELECT project FROM sessions WHERE session_id = ?",
                        (odd.session_id,)).fetchone() == ("/tmp/from-workspace",)


def test_events_cut_mid_line_wait_for_the_rest(conn: apsw.Connection, tailer: Tailer, copilot_home: Path) -> None:
    session = copilot_session(copilot_home)
    whole = "".join(session.lines)
    cut = whole.index("Why does the build fail?\",\"transformedContent") + 5
    session.folder.mkdir(parents=True)
    session.path.write_text(whole[:cut])
    assert tailer.tail(session.path).captured == []
    session.path.write_text(whole)
    assert [c.text for c in tailer.tail(session.path).captured][0] == "Why does the build fail?"
    assert len(rows(conn, session.session_id)) == 5


def test_the_start_event_still_being_written_defers_the_file(conn: apsw.Connection, tailer: Tailer,
                                                             copilot_home: Path) -> None:
    session = copilot_session(copilot_home)
    session.folder.mkdir(parents=True)
    session.path.write_text(session.lines[0][:60])
    assert tailer.tail(session.path).captured == [] and sessions.session_state(conn, session.session_id) is None
    session.write()
    assert len(tailer.tail(session.path).captured) == 5


def test_event_types_a_newer_copilot_adds_are_skipped_and_counted(conn: apsw.Connection, tailer: Tailer,
                                                                  copilot_home: Path) -> None:
    session = CopilotSession(copilot_home)
    session.event("assistant.hologram", {"content": "x"})
    session.prompt("still captured")
    before = unknown_records().get("copilot", {}).get("assistant.hologram", 0)
    result = tailer.tail(session.write())
    assert [c.text for c in result.captured] == ["still captured"] and result.problems == 0
    assert unknown_records()["copilot"]["assistant.hologram"] == before + 1


def test_tool_names_mcp_calls_and_a_commit(conn: apsw.Connection, tailer: Tailer, copilot_home: Path) -> None:
    session = CopilotSession(copilot_home)
    session.prompt("tidy up")
    session.call("create", {"path": "/tmp/project/new.txt", "file_text": "x"}, "Created file /tmp/project/new.txt")
    session.call("edit", {"path": "/tmp/project/a.py", "old_str": "a", "new_str": "b"}, "edited")
    session.call("grep", {"pattern": "TODO", "paths": "src"}, "2 matches")
    session.call("engram-memory_recall", {"query": "build"}, "No memories found.", mcp=("engram", "memory_recall"))
    session.call("bash", {"command": "git commit -m 'Fix the cart total'"}, "[main 1a2b3c4] Fix the cart total",
                 exit_code=0)
    tailer.tail(session.write())
    assert calls(conn, session.session_id) == [
        ("Write", "/tmp/project/new.txt", 0, None), ("Edit", "/tmp/project/a.py", 0, None), ("Grep", "src", 0, None),
        ("mcp__engram__memory_recall", "build", 0, None), ("Bash", "git commit -m 'Fix the cart total'", 0, None)]
    # A commit's result is read (the signal awaits it) though the call succeeded.
    assert conn.execute("SELECT state, text FROM tool_signals").fetchall() == [
        ("ready", "Committed 1a2b3c4 on `main`: Fix the cart total")]


def test_a_resumed_session_moves_its_directory(conn: apsw.Connection, tailer: Tailer, copilot_home: Path) -> None:
    session = CopilotSession(copilot_home, cwd="/tmp/one")
    session.prompt("before")
    session.event("session.resume", {"resumeTime": "2026-11-28T06:00:00.000Z", "eventCount": 5,
                                     "context": {"cwd": "/tmp/two"}})
    session.prompt("after")
    tailer.tail(session.write())
    assert conn.execute("SELECT cwd FROM messages WHERE session_id = ? ORDER BY id",
                        (session.session_id,)).fetchall() == [("/tmp/one",), ("/tmp/two",)]


def test_a_copilot_session_run_in_engrams_own_work_dir_is_not_captured(conn: apsw.Connection, tailer: Tailer,
                                                                       copilot_home: Path, tmp_path: Path) -> None:
    own = CopilotSession(copilot_home, cwd=str(tmp_path / "engram-home" / "agent-work" / "job-1"))
    own.prompt("Extract memories from this transcript")
    result = tailer.tail(own.write())
    assert result.captured == [] and result.skipped == "a session Engram's own LLM jobs ran"
    assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0


def test_only_session_folders_events_are_discovered(copilot_home: Path) -> None:
    from processor.capture.discover import discover_all

    session = CopilotSession(copilot_home)
    session.prompt("x")
    session.write()
    locks = copilot_home / "session-state" / ".session-operation-locks"
    locks.mkdir()
    (locks / "events.jsonl").write_text("{}\n")
    (session.folder / "checkpoints").mkdir()
    (session.folder / "checkpoints" / "index.jsonl").write_text("{}\n")
    assert discover_all([CopilotFormat(copilot_home / "session-state")], None) == [session.path]
