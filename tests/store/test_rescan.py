"""Rules widened by an upgrade reach what was stored before it: stored text is redacted again, in batches.

A store an older Engram filled holds secrets its rules did not know (written here with plain SQL, past the door).
The processor's sweep redacts every column of captured text again under the current rules, a time budget at a
time, resuming where it stopped; then no secret is left in the tables, the full-text indexes or the file, and
the next sweep does nothing until the rules change again.
"""

from __future__ import annotations

import json
from pathlib import Path

import apsw

from processor.redaction import rules_fingerprint
from processor.store import episodes as episodes_sql
from processor.store import open_store, rescan, write_transaction
from processor.store.episodes import NewEpisode
from tests.support.secret_catalog import catalog, found_in

PLANTED = catalog()
SECRETS = {s for p in PLANTED for s in p.secrets}


def _old_store(db: Path) -> apsw.Connection:
    """Rows as an older version stored them: every catalog entry in a message, a tool call's target and error,
    a memory's text and entities, and a bites offer (JSON)."""
    conn = open_store(db)
    with write_transaction(conn):
        conn.execute("INSERT INTO sessions (session_id, transcript_path, project, created_at, updated_at) "
                     "VALUES ('old', '/x/old.jsonl', '/work/app', 1, 1)")
        for index, planted in enumerate(PLANTED):
            conn.execute("INSERT INTO messages (uuid, session_id, role, text, ts_ms, line_offset) "
                         "VALUES (?, 'old', 'user', ?, ?, ?)", (f"u{index}", f"use {planted.text}", index, index))
            conn.execute("INSERT INTO tool_calls (tool_use_id, session_id, use_uuid, ts_ms, tool, target, failed, "
                         "error) VALUES (?, 'old', ?, ?, 'Bash', ?, 1, ?)",
                         (f"t{index}", f"u{index}", index, f"deploy {planted.text}", f"Error: bad {planted.text}"))
            episodes_sql.insert_episode(conn, NewEpisode(
                id=f"ep_{index:016x}", session_id="old", project="/work/app", scope="project", summary="clean",
                entities=[], importance="normal", kind="fact", source_type="auto", full_content="clean",
                source_uuids=[f"u{index}"], content_hash=f"h{index}", created_at=index), None)
            conn.execute("UPDATE episodes SET summary = ?, full_content = ?, entities = ? WHERE id = ?",
                         (f"use {planted.text}", f"To deploy: {planted.text}", json.dumps([planted.text]),
                          f"ep_{index:016x}"))
        conn.execute("INSERT INTO recollection_offers (session_id, message_uuid, offered_at, content) "
                     "VALUES ('old', 'u0', 1, ?)", (json.dumps([{"id": "ep_0", "bite": p.text} for p in PLANTED]),))
        conn.execute("INSERT INTO messages_fts(rowid, text) SELECT id, text FROM messages")
    return conn


def _everything(db: Path) -> bytes:
    wal = db.with_name(db.name + "-wal")
    return db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


def test_secrets_stored_by_an_older_version_are_redacted_again(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    conn = _old_store(db)
    assert len(found_in(_everything(db), SECRETS)) > len(SECRETS) // 2  # the old rows hold them in clear
    assert rescan.needed(conn)

    # A tiny budget: one batch per call, the way the sweep spreads the work; a new connection resumes it.
    rounds = 0
    while rescan.needed(conn):
        rescan.rescan(conn, budget_seconds=0.0)
        rounds += 1
        if rounds == 2:
            conn.close()
            conn = open_store(db)
    assert rounds >= 3
    texts = [row[0] for row in conn.execute(
        "SELECT text FROM messages UNION ALL SELECT target || error FROM tool_calls UNION ALL "
        "SELECT summary || full_content || entities FROM episodes UNION ALL SELECT content FROM recollection_offers")]
    assert found_in("\n".join(texts).encode(), SECRETS) == []
    assert json.loads(conn.execute("SELECT content FROM recollection_offers").fetchone()[0])  # still JSON
    assert all(json.loads(row[0]) for row in conn.execute("SELECT entities FROM episodes"))
    token = next(s for s in SECRETS if s.isalnum() and len(s) > 20)
    assert conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?",
                        (f'"{token}"',)).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM episodes_fts WHERE episodes_fts MATCH ?",
                        (f'"{token}"',)).fetchone()[0] == 0
    assert episodes_sql.get_meta(conn, rescan.STAMP_KEY) == rules_fingerprint()
    assert rescan.rescan(conn) == 0  # done until the rules change
    conn.close()
    assert found_in(_everything(db), SECRETS) == []  # nor in the file: freed space is zeroed, the WAL emptied


def test_the_memory_thread_serves_user_messages_between_batches(tmp_path: Path) -> None:
    """A rescan with a whole second of budget still stops after each batch's commit for `between` (the memory
    thread serves the user messages that arrived meanwhile), so a message waits for one batch, not the budget."""
    db = tmp_path / "engram.db"
    conn = _old_store(db)
    seen: list[str | None] = []

    def between() -> None:  # another connection sees the batch committed: nothing is held across the call
        reader = open_store(db)
        seen.append(episodes_sql.get_meta(reader, rescan.PROGRESS_KEY))
        reader.close()

    rescan.rescan(conn, budget_seconds=60.0, between=between)
    assert not rescan.needed(conn)
    assert len(seen) >= 2 and all(progress is not None for progress in seen)
    assert len(set(seen)) == len(seen)  # each call after a new batch
    conn.close()
