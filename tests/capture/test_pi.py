"""pi's session files tailed into a real SQLite file by the one tailer: what is captured (and what is injected
context: Engram's digest message, what its extension appended to a tool's result), tool names and failures, the
end of a turn, and every bad input the issue lists: a session whose directory holds ``--``, a line cut short, a
newer pi's entries."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from bench.testbed.pi_sessions import PiSession, folder_name
from processor.capture import formats
from processor.capture.discover import discover_all
from processor.capture.pi import PiFormat
from processor.capture.tailer import Tailer
from processor.hook_kit.hook_io import fence
from tests.capture.conftest import ENGRAM_DIGEST, all_text, calls, rows

TOLD_AFTER = fence("About this call on npm run build: an earlier session left these about it")


@pytest.fixture
def pi_dir(tmp_path: Path) -> Path:
    return tmp_path / "home" / ".pi" / "agent"


@pytest.fixture
def fmt(pi_dir: Path, tmp_path: Path) -> PiFormat:
    return PiFormat(pi_dir / "sessions", tmp_path / "engram-home" / "agent-work")


@pytest.fixture
def tailer(conn: apsw.Connection, fmt: PiFormat) -> Tailer:
    return Tailer(conn, formats=[fmt])


def pi_session(pi_dir: Path, cwd: str = "/tmp/shop-api") -> PiSession:
    session = PiSession(pi_dir, cwd=cwd)
    session.prompt("Why does the build fail?")
    session.injected(ENGRAM_DIGEST)
    session.shell("npm run build", "error TS2304: Cannot find name 'Order'.", 2, text="Let me run it.",
                  told=TOLD_AFTER)
    call = ("call_read", "read", {"path": "/tmp/shop-api/src/missing.ts"})
    session.answer("", call)
    session.result("call_read", "read", "ENOENT: no such file or directory, access '/tmp/shop-api/src/missing.ts'",
                   error=True)
    session.answer("", ("call_recall", "engram_memory_recall", {"query": "build order"}))
    session.result("call_recall", "engram_memory_recall", "[1] (2026-11-27, normal) …")
    session.answer("Order is not imported in src/cart.ts; add the import.")
    return session


def test_a_pi_session_is_captured_without_injected_context(conn: apsw.Connection, tailer: Tailer,
                                                           pi_dir: Path) -> None:
    session = pi_session(pi_dir)
    finished: list[bool] = []
    tailer.listeners.append(lambda sid, lines, finished_=False, **kw: finished.append(lines[-1].end_turn))
    result = tailer.tail(session.write())
    assert result.session_id == session.session_id and result.agent == "pi"
    assert rows(conn, session.session_id) == [
        ("user", "Why does the build fail?"),
        ("assistant", "Let me run it.\n[tool: Bash]"),
        ("assistant", "[tool: Read /tmp/shop-api/src/missing.ts]"),
        ("assistant", "[tool: mcp__engram__memory_recall]"),
        ("assistant", "Order is not imported in src/cart.ts; add the import."),
    ]
    assert "Engram memory digest" not in all_text(conn) and "engram-recollection" not in all_text(conn)
    found = calls(conn, session.session_id)
    assert found[0][:3] == ("Bash", "npm run build", 1)
    assert "TS2304" in found[0][3] and "Command exited with code 2" in found[0][3]
    assert "engram-recollection" not in found[0][3] and "earlier session" not in found[0][3]
    assert found[1][:3] == ("Read", "/tmp/shop-api/src/missing.ts", 1) and "ENOENT" in found[1][3]
    assert found[2] == ("mcp__engram__memory_recall", "build order", 0, None)
    assert conn.execute("SELECT agent, project FROM sessions WHERE session_id = ?",
                        (session.session_id,)).fetchone() == ("pi", "/tmp/shop-api")
    assert finished == [True]  # the answer that stopped ends the turn


def test_a_session_whose_directory_holds_dashes_is_found_and_knows_its_directory(
        conn: apsw.Connection, tailer: Tailer, pi_dir: Path, fmt: PiFormat) -> None:
    cwd = "/tmp/my--project/src-x--"
    session = PiSession(pi_dir, cwd=cwd)
    session.prompt("where is the config?")
    session.answer("In config/.")
    path = session.write()
    assert path.parent.name == folder_name(cwd) == "--tmp-my--project-src-x----"
    assert discover_all([fmt], None) == [path]
    tailer.tail(path)
    assert conn.execute("SELECT project FROM sessions WHERE session_id = ?",
                        (session.session_id,)).fetchone() == (cwd,)


def test_a_line_cut_short_waits_and_a_damaged_one_is_skipped(conn: apsw.Connection, tailer: Tailer,
                                                             pi_dir: Path) -> None:
    session = pi_session(pi_dir)
    path = session.write()
    full = path.read_bytes()
    cut = full.index(b'"role":"assistant"')
    path.write_bytes(full[:cut])  # pi was writing the answer's line
    tailer.tail(path)
    assert rows(conn, session.session_id) == [("user", "Why does the build fail?")]
    path.write_bytes(full[:cut] + b"\n" + full[cut:])  # the rest of that line, after a crash, on a line of its own
    result = tailer.tail(path)
    assert result.problems == 2  # the two halves: invalid JSON, each skipped with a log line
    assert rows(conn, session.session_id)[-1] == ("assistant", "Order is not imported in src/cart.ts; add the import.")


def test_a_newer_pis_entries_are_skipped_and_counted(conn: apsw.Connection, tailer: Tailer, pi_dir: Path) -> None:
    session = PiSession(pi_dir)
    session.prompt("hello")
    session.entry("canvas_change", canvas={"id": 1})
    session._message({"role": "reviewer", "content": "looks fine"})
    session.entry("custom", customType="other-extension", data={"x": 1})
    session.entry("label", label="checkpoint")
    tailer.tail(session.write())
    assert rows(conn, session.session_id) == [("user", "hello")]
    unknown = formats.unknown_records()["pi"]
    assert unknown["canvas_change"] >= 1 and unknown["message/reviewer"] >= 1 and "label" not in unknown


def test_a_session_engrams_own_jobs_ran_is_not_captured(conn: apsw.Connection, tailer: Tailer, pi_dir: Path,
                                                        fmt: PiFormat) -> None:
    session = PiSession(pi_dir, cwd=fmt.own_workdir.paths[0] + "/job-1")
    session.prompt("extract the memories of this session")
    result = tailer.tail(session.write())
    assert result.skipped and rows(conn, session.session_id) == []


def test_only_pis_session_files_are_sessions(fmt: PiFormat, pi_dir: Path) -> None:
    sessions = pi_dir / "sessions"
    assert fmt.accepts(sessions / "--tmp-x--" / "2026-11-28T05-56-53-054Z_01a220ba.jsonl")
    assert not fmt.accepts(sessions / "tmp-x" / "2026-11-28T05-56-53-054Z_01a220ba.jsonl")
    assert not fmt.accepts(sessions / "--tmp-x--" / "notes.txt")
    assert not fmt.accepts(sessions / "--tmp-x--" / "deeper" / "a_b.jsonl")
