"""opencode's sessions, read from its real SQLite store (WAL, written as the CLI writes it) by the one tailer, by
opencode's own cursor: what is captured (and what is injected context), incremental and crash-safe reading,
several sessions in one database, and every bad input the issue lists: a database locked by the running CLI, one
migrated to a newer schema, one being created, one replaced."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from bench.testbed.opencode_db import OpencodeStore
from processor.capture import formats
from processor.capture.opencode import OpencodeFormat
from processor.capture.tailer import Tailer
from processor.hook_kit.hook_io import fence
from tests.capture.conftest import ENGRAM_DIGEST, all_text, calls, rows

PROMPT = "Why does the build fail?"
LOCKER = ("import sqlite3, sys, time\n"
          "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
          "c.execute('PRAGMA locking_mode=EXCLUSIVE'); c.execute('BEGIN EXCLUSIVE')\n"
          "print('locked', flush=True); time.sleep(60)\n")
TOLD_AFTER = fence("About this call on npm run build: an earlier session left these about it")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "opencode-data"


@pytest.fixture
def store(data_dir: Path) -> OpencodeStore:
    with OpencodeStore(data_dir) as opened:
        yield opened


@pytest.fixture
def fmt(data_dir: Path, tmp_path: Path) -> OpencodeFormat:
    return OpencodeFormat(data_dir, tmp_path / "engram-home" / "agent-work")


@pytest.fixture
def tailer(conn: apsw.Connection, fmt: OpencodeFormat) -> Tailer:
    return Tailer(conn, formats=[fmt])


def build_session(store: OpencodeStore, directory: str = "/tmp/shop-api"):
    session = store.session(directory)
    session.touch()
    session.prompt(PROMPT, injected=ENGRAM_DIGEST)
    step = session.step()
    session.answer(step, "Let me run it.")
    session.tool(step, "bash", {"command": "npm run build", "description": "build"},
                 "error TS2304: Cannot find name 'Order'.\n", exit_code=2, appended="\n\n" + TOLD_AFTER)
    session.finish(step, "tool-calls")
    step = session.step()
    session.tool(step, "read", {"filePath": "/tmp/shop-api/src/missing.ts"}, "",
                 error="File not found: /tmp/shop-api/src/missing.ts")
    session.finish(step, "tool-calls")
    step = session.step()
    session.tool(step, "engram_memory_recall", {"query": "build order"}, "nothing")
    session.answer(step, "Order is not imported in src/cart.ts; add the import.")
    session.finish(step, "stop")
    return session


def test_an_opencode_session_is_captured_without_injected_context(conn: apsw.Connection, tailer: Tailer,
                                                                  store: OpencodeStore) -> None:
    session = build_session(store)
    captured: list[tuple[str, bool]] = []
    tailer.listeners.append(lambda sid, lines, finished=False, settle=0.0: captured.append((sid, finished)))
    result = tailer.tail(store.path)
    assert result.agent == "opencode" and result.lines == session.seq + 1
    assert rows(conn, session.id) == [
        ("user", PROMPT),
        ("assistant", "Let me run it.\n[tool: Bash]"),  # one row per model step: its text and its calls
        ("assistant", "[tool: Read /tmp/shop-api/src/missing.ts]"),
        ("assistant", "[tool: mcp__engram__memory_recall]\nOrder is not imported in src/cart.ts; add the import."),
    ]
    text = all_text(conn)
    assert "Engram memory digest" not in text and "engram-recollection" not in text
    assert calls(conn, session.id) == [
        ("Bash", "npm run build", 1, "error TS2304: Cannot find name 'Order'."),  # the command's own output
        ("Read", "/tmp/shop-api/src/missing.ts", 1, "File not found: /tmp/shop-api/src/missing.ts"),
        ("mcp__engram__memory_recall", "build order", 0, None),
    ]
    assert conn.execute("SELECT agent, project, transcript_path, byte_offset FROM sessions WHERE session_id = ?",
                        (session.id,)).fetchone() == ("opencode", "/tmp/shop-api", str(store.path), session.seq + 1)
    assert captured == [(session.id, True)]  # the step that stopped ended the turn


def test_read_incrementally_by_its_cursor_and_never_twice(conn: apsw.Connection, tailer: Tailer,
                                                          store: OpencodeStore) -> None:
    session = store.session("/tmp/shop-api")
    session.prompt(PROMPT)
    step = session.step()
    assert tailer.tail(store.path).lines == session.seq + 1
    answer_part = session.answer(step, "Half of the answer")  # its start and its end: two events
    first = tailer.tail(store.path)
    assert first.lines == 2 and [c.uuid for c in first.captured] == [f"{session.id}:{answer_part}"]
    assert tailer.tail(store.path).lines == 0  # nothing new: nothing read (nor even opened)
    # A new tailer (the processor restarted) goes on from the committed cursor.
    again = Tailer(conn, formats=tailer.formats)
    session.finish(step, "stop")
    assert again.tail(store.path).lines == 1
    assert rows(conn, session.id) == [("user", PROMPT), ("assistant", "Half of the answer")]


def test_a_crash_before_the_commit_reads_the_same_events_again_and_stores_them_once(
        conn: apsw.Connection, tailer: Tailer, store: OpencodeStore, monkeypatch: pytest.MonkeyPatch) -> None:
    session = build_session(store)
    from processor.store import sessions as session_sql

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("power cut")

    monkeypatch.setattr(session_sql, "upsert_session", crash)
    with pytest.raises(RuntimeError):
        tailer.tail(store.path)
    monkeypatch.undo()
    assert rows(conn, session.id) == []  # the batch's transaction rolled back with its cursor
    Tailer(conn, formats=tailer.formats).tail(store.path)
    assert len(rows(conn, session.id)) == 4 and len(calls(conn, session.id)) == 3


def test_every_session_in_the_database_is_its_own(conn: apsw.Connection, tailer: Tailer, store: OpencodeStore,
                                                  fmt: OpencodeFormat) -> None:
    one, two = store.session("/tmp/a"), store.session("/tmp/b")
    one.prompt("first project's question")
    two.prompt("second project's question")
    child = store.session("/tmp/a", parent_id=one.id)  # a subagent's session: its parent is captured
    child.prompt("a subagent's task")
    own = store.session(str(fmt.own_workdir.paths[0]) + "/job")  # Engram's own LLM job ran here
    own.prompt("extract memories")
    tailer.tail(store.path)
    assert rows(conn, one.id) == [("user", "first project's question")]
    assert rows(conn, two.id) == [("user", "second project's question")]
    assert rows(conn, child.id) == [] and rows(conn, own.id) == []
    agents = dict(conn.execute("SELECT session_id, agent FROM sessions").fetchall())
    assert agents == {one.id: "opencode", two.id: "opencode"}


def test_only_recent_sessions_are_read_the_first_time(conn: apsw.Connection, store: OpencodeStore,
                                                      fmt: OpencodeFormat) -> None:
    old = store.session("/tmp/a", start_ms=1_000_000)
    old.prompt("a question of long ago")
    recent = store.session("/tmp/a")
    recent.prompt("a question of today")
    tailer = Tailer(conn, formats=[fmt], recent_days=7)
    tailer.tail(store.path)
    assert rows(conn, old.id) == [] and rows(conn, recent.id) == [("user", "a question of today")]
    old.resume()
    old.prompt("the old session resumed")  # it changed now: read whole
    tailer.tail(store.path)
    assert [t for _, t in rows(conn, old.id)] == ["a question of long ago", "the old session resumed"]


def test_a_database_locked_by_the_cli_raises_busy_to_be_retried(tailer: Tailer, store: OpencodeStore,
                                                                conn: apsw.Connection,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    session = build_session(store)
    store.close()
    monkeypatch.setattr("processor.store.opencode.BUSY_TIMEOUT_MS", 50)
    # Another process holds the database exclusively (a CLI with locking_mode=EXCLUSIVE, a vacuum).
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(store.path)], stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        with pytest.raises(apsw.BusyError):
            tailer.tail(store.path)
    finally:
        locker.terminate()
        locker.wait()
    tailer.tail(store.path)  # retried: everything is there
    assert len(rows(conn, session.id)) == 4


def test_a_newer_schema_is_skipped_and_counted_never_a_crash(conn: apsw.Connection, tailer: Tailer,
                                                             store: OpencodeStore, caplog) -> None:
    store.conn.execute("CREATE TABLE session_share (session_id text PRIMARY KEY)")
    store.conn.execute("CREATE TABLE workflow_run (id text PRIMARY KEY)")
    store.conn.execute("ALTER TABLE event ADD COLUMN origin text")
    session = store.session("/tmp/shop-api")
    session.prompt(PROMPT)
    session.event("message.part.updated.2", {"sessionID": session.id, "part": {"id": "prt_x"}})  # a newer event
    step = session.step()
    session.part(step, "prt_y", {"type": "canvas", "body": "…"})  # a newer part type
    with caplog.at_level(logging.INFO):
        tailer.tail(store.path)
    assert rows(conn, session.id) == [("user", PROMPT)]
    unknown = formats.unknown_records()["opencode"]
    assert unknown["table workflow_run"] == 1 and unknown["column event.origin"] == 1
    assert unknown["message.part.updated.2"] == 1 and unknown["part/canvas"] == 1
    assert "table session_share" not in unknown  # a table opencode 1.18 has
    # A table capture reads that is gone: one problem naming it, nothing read, no crash.
    store.conn.execute("ALTER TABLE event RENAME COLUMN seq TO position")
    result = tailer.tail(store.path)
    assert result.problems == 1
    [problem] = tailer.problems.current()
    assert problem["kind"] == "unknown_schema" and "event.seq" in problem["detail"]


def test_a_database_being_created_is_no_problem(tailer: Tailer, data_dir: Path) -> None:
    data_dir.mkdir(parents=True)
    apsw.Connection(str(data_dir / "opencode.db")).execute("CREATE TABLE migration (id text)")
    assert tailer.tail(data_dir / "opencode.db").lines == 0
    assert tailer.problems.current() == []


def test_a_file_that_is_no_database_is_one_problem(tailer: Tailer, data_dir: Path) -> None:
    data_dir.mkdir(parents=True)
    (data_dir / "opencode.db").write_bytes(b"not a database at all " * 200)
    result = tailer.tail(data_dir / "opencode.db")
    assert result.problems == 1 and tailer.problems.current()[0]["kind"] == "cannot_read"


def test_a_replaced_database_is_read_again_without_doubles(conn: apsw.Connection, tailer: Tailer,
                                                           data_dir: Path) -> None:
    with OpencodeStore(data_dir) as store:
        session = build_session(store, "/tmp/shop-api")
        session_id = session.id
        tailer.tail(store.path)
    for suffix in ("", "-wal", "-shm"):
        Path(str(data_dir / "opencode.db") + suffix).unlink(missing_ok=True)
    with OpencodeStore(data_dir) as store:  # the same session restored from a backup: a new file
        copy = store.session("/tmp/shop-api", session_id=session_id)
        copy.prompt(PROMPT)
        tailer.tail(store.path)
    assert [r for r in rows(conn, session_id)].count(("user", PROMPT)) == 1


def test_the_watch_on_the_data_folder_maps_the_write_ahead_log_to_the_database(fmt: OpencodeFormat,
                                                                               data_dir: Path) -> None:
    assert fmt.transcript_of(data_dir / "opencode.db-wal") == data_dir / "opencode.db"
    assert fmt.transcript_of(data_dir / "opencode-beta.db-shm") == data_dir / "opencode-beta.db"
    assert fmt.transcript_of(data_dir / "snapshot" / "global" / "HEAD") is None
    assert fmt.transcript_of(data_dir / "log" / "2026.log") is None
    assert fmt.depth == 1  # its data folder is watched, not the snapshots below it


def test_a_session_older_than_the_event_log_is_read_from_its_rows_once(conn: apsw.Connection, tailer: Tailer,
                                                                      store: OpencodeStore) -> None:
    old = store.session("/tmp/shop-api", logged=False)  # an opencode before the event log made it
    old.prompt(PROMPT)
    step = old.step()
    old.tool(step, "bash", {"command": "npm run build"}, "error TS2304\n", exit_code=2)
    old.answer(step, "Order is not imported.")
    resumed = store.session("/tmp/shop-api", logged=False)  # made before, resumed after opencode's upgrade
    resumed.prompt("first question, before the upgrade")
    resumed.logged = True
    resumed.prompt("second question, after it")
    tailer.tail(store.path)
    assert rows(conn, old.id) == [("user", PROMPT), ("assistant", "[tool: Bash]\nOrder is not imported.")]
    assert calls(conn, old.id) == [("Bash", "npm run build", 1, "error TS2304")]
    assert rows(conn, resumed.id) == [("user", "first question, before the upgrade"),
                                      ("user", "second question, after it")]
    store.conn.execute("CREATE TABLE touched (x)")  # the database changed: read again, nothing doubled
    tailer.tail(store.path)
    assert len(rows(conn, old.id)) == 2 and len(rows(conn, resumed.id)) == 2
