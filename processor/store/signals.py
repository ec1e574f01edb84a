"""The SQL for high-signal tool calls: a tool_use waiting for its result, then the text to remember.

A tool_use and its tool_result arrive on different transcript lines, maybe in different capture
batches or processor runs; the pending row is written with the line's capture, so a crash between the
two lines loses nothing. Callers own the transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import apsw

from processor.redaction import Redacted, redacted


@dataclass(frozen=True)
class ReadySignal:
    tool_use_id: str
    session_id: str
    use_uuid: str
    result_uuid: str
    ts_ms: int | None
    text: str


def add_pending(conn: apsw.Connection, tool_use_id: str, session_id: str, use_uuid: str, ts_ms: int | None,
                pending: Redacted) -> None:
    """`pending`: the tool use's signal as JSON (``capture.signals.pending_json``, made with redacted_json)."""
    conn.execute("INSERT OR IGNORE INTO tool_signals (tool_use_id, session_id, use_uuid, ts_ms, pending) "
                 "VALUES (?, ?, ?, ?, ?)", (tool_use_id, session_id, use_uuid, ts_ms, redacted(pending)))


def pending_ids(conn: apsw.Connection, session_id: str) -> set[str]:
    rows = conn.execute("SELECT tool_use_id FROM tool_signals WHERE session_id = ? AND state = 'pending'",
                        (session_id,))
    return {row[0] for row in rows}


def pending(conn: apsw.Connection, tool_use_id: str) -> str | None:
    row = conn.execute("SELECT pending FROM tool_signals WHERE tool_use_id = ? AND state = 'pending'",
                       (tool_use_id,)).fetchone()
    return row[0] if row else None


def resolve(conn: apsw.Connection, tool_use_id: str, result_uuid: str, text: Redacted | None) -> None:
    """Record a result: the text to remember, or None when the call failed (nothing is remembered)."""
    conn.execute("UPDATE tool_signals SET result_uuid = ?, text = ?, state = ? WHERE tool_use_id = ?",
                 (result_uuid, redacted(text) if text else None, "ready" if text else "dropped", tool_use_id))


def ready(conn: apsw.Connection, session_id: str) -> list[ReadySignal]:
    rows = conn.execute("SELECT tool_use_id, session_id, use_uuid, result_uuid, ts_ms, text FROM tool_signals "
                        "WHERE session_id = ? AND state = 'ready' ORDER BY rowid", (session_id,)).fetchall()
    return [ReadySignal(*row) for row in rows]


def sessions_with_ready(conn: apsw.Connection) -> list[str]:
    return [row[0] for row in conn.execute("SELECT DISTINCT session_id FROM tool_signals WHERE state = 'ready'")]


def mark_built(conn: apsw.Connection, tool_use_ids: list[str]) -> None:
    conn.executemany("UPDATE tool_signals SET state = 'built' WHERE tool_use_id = ?", [(i,) for i in tool_use_ids])


def answers(conn: apsw.Connection, tool_use_ids: list[str]) -> dict[str, str]:
    """The text of each of these tool uses that became a memory or waits to (a question's answer): by id."""
    if not tool_use_ids:
        return {}
    rows = conn.execute("SELECT tool_use_id, text FROM tool_signals WHERE tool_use_id IN (SELECT value FROM "
                        "json_each(?)) AND state IN ('ready', 'built') AND text IS NOT NULL",
                        (json.dumps(tool_use_ids),))
    return {row[0]: row[1] for row in rows}
