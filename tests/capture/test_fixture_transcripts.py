"""Capturing the real fixture transcripts (Claude Code 1.0.24 – 2.1.114) end to end."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import apsw
import pytest

from processor.capture.claude import LOCAL_COMMANDS
from tests.conftest import FIXTURE_PROJECTS, run_engram

_PLUMBING = re.compile(r"<command-(name|message|args)>|<local-command-(stdout|stderr|caveat)>|^Caveat: The messages")
_COMMAND = re.compile(r"<command-name>\s*/([^<\s]+)\s*</command-name>")
_SPANS = re.compile(r"<system-reminder>.*?</system-reminder>|<private>.*?</private>", re.S)


def _model_command(text: str) -> bool:
    """A slash command the model works on (``/init``, a project's own): a message like a typed prompt. Claude Code's
    own terminal commands (``/clear``, ``/model``…) start no turn."""
    found = _COMMAND.search(text[:2000])
    return found is not None and found.group(1).split(":")[0] not in LOCAL_COMMANDS


def independent_counts(root: Path) -> dict[str, int]:
    """Messages per session, counted straight from the JSON without Engram's parser.

    User lines count when they have text of their own; assistant lines count once
    per message.id. A uuid already seen (sessions resumed from another) counts once.
    """
    counts: dict[str, int] = {}
    seen_uuids: set[str] = set()
    for path in sorted(root.glob("*/*.jsonl"), key=lambda p: (p.stat().st_mtime, str(p))):
        if path.name.startswith("agent-") or path.stat().st_size == 0:
            continue
        keys: set[str] = set()
        for raw in path.read_bytes().splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(entry, dict) or entry.get("type") not in ("user", "assistant"):
                continue
            if entry.get("isMeta") or entry.get("isCompactSummary") or entry.get("isSidechain"):
                continue
            content = entry["message"]["content"]
            if isinstance(content, str):
                pieces = [content]
            else:
                pieces = [b.get("text", "") for b in content if b.get("type") == "text"]
                if any(b.get("type") == "tool_use" for b in content):
                    pieces.append("tool")
            text = _SPANS.sub("", "\n".join(pieces)).strip()
            if not text or (entry["type"] == "user" and _PLUMBING.search(text[:200]) and not _model_command(text)):
                continue
            if entry["uuid"] in seen_uuids:
                continue
            seen_uuids.add(entry["uuid"])
            keys.add(entry["message"].get("id") or entry["uuid"] if entry["type"] == "assistant" else entry["uuid"])
        if keys:
            counts[path.stem] = len(keys)
    return counts


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    home = tmp_path_factory.mktemp("home")
    env = {"ENGRAM_HOME": str(home)}
    run_engram("backfill", "--projects-dir", str(FIXTURE_PROJECTS), env=env, timeout=600)  # embeds ~600 episodes
    status = json.loads(run_engram("status", "--json", "--projects-dir", str(FIXTURE_PROJECTS), env=env).stdout)
    return home, status


def test_every_fixture_file_parses_without_unhandled_errors(captured: tuple[Path, dict]) -> None:
    home, status = captured
    log_text = (home / "logs" / "engram.log").read_text()
    assert "Traceback" not in log_text
    assert status["sessions"] > 0 and status["messages"] > 0


def test_message_counts_per_session_match_an_independent_count(captured: tuple[Path, dict]) -> None:
    home, _ = captured
    conn = apsw.Connection(str(home / "engram.db"))
    stored = dict(conn.execute("SELECT session_id, count(*) FROM messages GROUP BY session_id").fetchall())
    assert stored == independent_counts(FIXTURE_PROJECTS)


def test_status_json_reports_integer_counts(captured: tuple[Path, dict]) -> None:
    home, status = captured
    conn = apsw.Connection(str(home / "engram.db"))
    assert status["messages"] == conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert status["sessions"] == conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
    assert isinstance(status["sessions"], int) and isinstance(status["messages"], int)
    # Active means a message in the last 24 h, whenever it was captured: the backfill just captured
    # every fixture session, and only those whose newest message is recent are listed.
    day_ago = int(time.time() * 1000) - 24 * 3600 * 1000
    recent = {sid for sid, last in conn.execute("SELECT session_id, last_activity FROM sessions")
              if last is not None and last >= day_ago}
    assert {s["session_id"] for s in status["active_sessions"]} == recent
    assert len(recent) < status["sessions"]
    assert all("capture_lag_bytes" in s for s in status["active_sessions"])


def test_status_calls_a_session_active_by_its_last_message_not_its_capture(tmp_path: Path) -> None:
    from processor.config import load_settings
    from processor.status import collect_status
    from processor.store import open_store, write_transaction
    from processor.store.sessions import upsert_session

    settings = load_settings(env={"ENGRAM_HOME": str(tmp_path / "home")})
    conn = open_store(settings.db_path)
    now = int(time.time() * 1000)
    with write_transaction(conn):
        for sid, last in (("old-session", now - 30 * 24 * 3600 * 1000), ("new-session", now - 60_000)):
            upsert_session(conn, session_id=sid, transcript_path=str(tmp_path / f"{sid}.jsonl"), project=None,
                           checkout=None, inode=1, byte_offset=0, last_line_hash=None, last_line_len=0,
                           last_activity=last, now_ms=now, agent="claude")  # both captured just now
    conn.close()
    assert [s["session_id"] for s in collect_status(settings)["active_sessions"]] == ["new-session"]


def test_subagent_meta_and_injected_lines_are_absent(captured: tuple[Path, dict]) -> None:
    home, _ = captured
    conn = apsw.Connection(str(home / "engram.db"))
    sessions = {row[0] for row in conn.execute("SELECT transcript_path FROM sessions")}
    assert not any("/subagents/" in p or Path(p).name.startswith("agent-") for p in sessions)
    subagent_uuids = set()
    meta_uuids = set()
    for path in FIXTURE_PROJECTS.rglob("*.jsonl"):
        for raw in path.read_bytes().splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(entry, dict) or "uuid" not in entry:
                continue
            if path.name.startswith("agent-") or "subagents" in path.parts:
                subagent_uuids.add(entry["uuid"])
            if entry.get("isMeta") or entry.get("isCompactSummary"):
                meta_uuids.add(entry["uuid"])
    stored = {row[0] for row in conn.execute("SELECT line_uuid FROM message_lines UNION SELECT uuid FROM messages")}
    assert not stored & meta_uuids
    # A subagent file can repeat main-session lines; only lines unique to subagents must be absent.
    main_uuids = set()
    for path in FIXTURE_PROJECTS.glob("*/*.jsonl"):
        if not path.name.startswith("agent-"):
            main_uuids |= {json.loads(r).get("uuid") for r in path.read_bytes().splitlines() if r.startswith(b"{")}
    assert not stored & (subagent_uuids - main_uuids)
    for (text,) in conn.execute("SELECT text FROM messages"):
        assert "<system-reminder>" not in text
        assert "<command-name>" not in text
        assert "<engram-recollection>" not in text


def _tail_all(db: Path, batch_bytes: int) -> tuple[list[tuple], list[tuple]]:
    from processor.capture.tailer import Tailer
    from processor.store import open_store

    conn = open_store(db)
    tailer = Tailer(conn, batch_bytes=batch_bytes)
    for path in sorted(FIXTURE_PROJECTS.glob("*/*.jsonl")):
        tailer.tail(path)
    messages = conn.execute("SELECT uuid, session_id, role, text, line_offset, api_message_id FROM messages "
                            "ORDER BY id").fetchall()
    merged = conn.execute("SELECT line_uuid, message_uuid FROM message_lines ORDER BY line_uuid").fetchall()
    search = conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'test'").fetchall()
    # Every row indexed once, with its stored text (rank 1: FTS5 checks the index against the table too).
    conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")
    search += conn.execute("SELECT count(*) FROM messages_fts_docsize").fetchall()
    search += conn.execute("SELECT count(*) FROM messages").fetchall()
    conn.close()
    return messages, merged + search


def test_a_messages_parts_in_one_batch_are_stored_as_the_part_by_part_appends_stored_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """store_lines writes a multi-part assistant message once; the rows, the merged-part records and
    the full-text index equal the part-by-part path's, whether the parts share a batch or not."""
    from processor.store import sessions

    whole = _tail_all(tmp_path / "batched.db", batch_bytes=1 << 20)
    split = _tail_all(tmp_path / "split.db", batch_bytes=1)  # one line per batch: every part appended
    monkeypatch.setattr(sessions, "store_lines", lambda conn, sid, lines: [
        sessions.store_line(conn, sid, line, offset) for line, offset in lines])
    part_by_part = _tail_all(tmp_path / "part_by_part.db", batch_bytes=1 << 20)
    assert len(whole[0]) > 500 and any(row[5] for row in whole[0])
    assert len(whole[1]) > 100  # parts merged into their message, recorded
    assert whole == split == part_by_part
    assert whole[1][-1] == whole[1][-2]  # as many index entries as rows


def test_a_store_from_before_batch_indexing_keeps_its_index_and_indexes_new_rows(tmp_path: Path) -> None:
    """m015 drops the per-row insert trigger: rows indexed by it stay found, new rows are indexed by capture."""
    import apsw

    from processor.capture.tailer import Tailer
    from processor.store import migrations, open_store

    conn = apsw.Connection(str(tmp_path / "old.db"))
    migrations.applied_migrations(conn)
    for migration in migrations.MIGRATIONS[:14]:  # up to m014: the trigger indexes every insert
        migration(conn)
        conn.execute("INSERT INTO schema_migrations(name, applied_at) VALUES (?, 0)", (migration.__name__,))
    conn.execute("INSERT INTO sessions (session_id, transcript_path, created_at, updated_at) "
                 "VALUES ('s', '/old/s.jsonl', 0, 0)")
    conn.execute("INSERT INTO messages (uuid, session_id, role, text, line_offset) "
                 "VALUES ('old-row', 's', 'user', 'zanzibar before the upgrade', 0)")
    conn.close()
    conn = open_store(tmp_path / "old.db")  # migrates
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'messages_fts_insert'").fetchone() == (0,)
    tailer = Tailer(conn)
    for path in sorted(FIXTURE_PROJECTS.glob("*/*.jsonl"))[:3]:
        tailer.tail(path)
    conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")
    rows = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert rows > 10 and conn.execute("SELECT count(*) FROM messages_fts_docsize").fetchone() == (rows,)
    assert conn.execute("SELECT uuid FROM messages_fts JOIN messages ON messages.id = messages_fts.rowid "
                        "WHERE messages_fts MATCH 'zanzibar'").fetchall() == [("old-row",)]
    conn.close()
