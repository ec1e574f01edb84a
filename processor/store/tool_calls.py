"""The SQL for tool calls: what each tool use worked on and, for a failed one, the head and tail of its error.

Written with the transcript lines that carry them, in the capture transaction (callers own it); read by the
lesson miner (``processor/memory/lessons.py``) and the routine miner (``processor/memory/routines.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import apsw

from processor.redaction import Redacted, redacted


@dataclass(frozen=True)
class StoredToolCall:
    tool_use_id: str
    session_id: str
    use_uuid: str
    ts_ms: int | None
    tool: str
    target: str | None
    failed: bool
    error: str | None
    result_uuid: str | None
    result_ts_ms: int | None


_COLUMNS = "tool_use_id, session_id, use_uuid, ts_ms, tool, target, failed, error, result_uuid, result_ts_ms"


def _call(row: tuple) -> StoredToolCall:
    return StoredToolCall(row[0], row[1], row[2], row[3], row[4], row[5], bool(row[6]), row[7], row[8], row[9])


_ADD_CALL = ("INSERT INTO tool_calls (tool_use_id, session_id, use_uuid, ts_ms, tool, target) "
             "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(tool_use_id) DO UPDATE SET use_uuid = excluded.use_uuid, "
             "tool = excluded.tool, "
             "target = excluded.target, ts_ms = COALESCE(tool_calls.ts_ms, excluded.ts_ms) "
             "WHERE tool_calls.tool = ''")
_ADD_FAILURE = ("INSERT INTO tool_calls (tool_use_id, session_id, use_uuid, ts_ms, tool, failed, error, result_uuid, "
                "result_ts_ms) VALUES (?, ?, '', ?, '', 1, ?, ?, ?) "
                "ON CONFLICT(tool_use_id) DO UPDATE SET failed = 1, error = excluded.error, "
                "result_uuid = excluded.result_uuid, result_ts_ms = excluded.result_ts_ms")


def add_calls(conn: apsw.Connection, session_id: str, use_uuid: str, ts_ms: int | None,
              calls: list[tuple[str, str, Redacted | None]]) -> None:
    """(tool_use_id, tool, target) of one assistant line; a call seen again (a re-read line) is kept as is.
    The target (a command, a path, a search) is captured text: it goes through the door."""
    add_lines(conn, session_id, [(use_uuid, ts_ms, calls, [])])


def add_failures(conn: apsw.Connection, session_id: str, result_uuid: str, ts_ms: int | None,
                 failures: list[tuple[str, Redacted]]) -> None:
    """(tool_use_id, error text) of one result line. A failure whose call was never captured (it came before
    Engram started reading) is kept with an empty tool: the error alone still tells what went wrong."""
    add_lines(conn, session_id, [(result_uuid, ts_ms, [], failures)])


def add_lines(conn: apsw.Connection, session_id: str,
              lines: list[tuple[str, int | None, list[tuple[str, str, Redacted | None]], list[tuple[str, Redacted]]]]
              ) -> None:
    """The calls and failed results of a batch's lines — (line uuid, ts_ms, [(tool_use_id, tool, target)],
    [(tool_use_id, error)]) in line order —, one statement each for all calls and all failures: a call's row
    comes before its failure is marked on it, as its line came before its result's. Targets and errors are
    captured text: they go through the door."""
    calls = [(tool_use_id, session_id, uuid, ts_ms, tool, redacted(target))
             for uuid, ts_ms, line_calls, _ in lines for tool_use_id, tool, target in line_calls]
    failures = [(tool_use_id, session_id, ts_ms, redacted(text), uuid, ts_ms)
                for uuid, ts_ms, _, line_failures in lines for tool_use_id, text in line_failures]
    if calls:
        conn.executemany(_ADD_CALL, calls)
    if failures:
        conn.executemany(_ADD_FAILURE, failures)


def session_calls(conn: apsw.Connection, session_id: str, since_ms: int | None = None,
                  until_ms: int | None = None) -> list[StoredToolCall]:
    """The session's tool calls in the order they were made (optionally within a time range, inclusive)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM tool_calls WHERE session_id = ? AND (? IS NULL OR ts_ms >= ?) "
        "AND (? IS NULL OR ts_ms <= ?) ORDER BY rowid", (session_id, since_ms, since_ms, until_ms, until_ms))
    return [_call(row) for row in rows]


def project_sessions_with_calls(conn: apsw.Connection, project: str, limit: int) -> list[str]:
    """The project's newest sessions that made tool calls, newest first."""
    rows = conn.execute(
        "SELECT s.session_id FROM sessions s WHERE s.project = ? AND EXISTS "
        "(SELECT 1 FROM tool_calls t WHERE t.session_id = s.session_id) "
        "ORDER BY COALESCE(s.last_activity, s.created_at) DESC LIMIT ?", (project, limit))
    return [row[0] for row in rows]


def clean_commands_with(conn: apsw.Connection, project: str | None, text: str | None,
                        limit: int = 500) -> list[str]:
    """The project's newest shell commands that ran clean, the newest first (by when they ran: a backfill stores
    sessions in no particular order): those that contain `text` (``source .venv/bin/activate``: what the project
    runs inside that environment), or all (None)."""
    rows = conn.execute(
        "SELECT t.target FROM tool_calls t JOIN sessions s ON s.session_id = t.session_id "
        "WHERE s.project IS ? AND t.tool = 'Bash' AND t.failed = 0 AND t.target IS NOT NULL "
        "AND (? IS NULL OR instr(t.target, ?) > 0) ORDER BY coalesce(t.ts_ms, 0) DESC, t.rowid DESC LIMIT ?",
        (project, text, text, limit))
    return [row[0] for row in rows]


def clean_calls_saying(conn: apsw.Connection, session_ids: list[str], needles: tuple[str, ...]) -> list[StoredToolCall]:
    """These sessions' shell calls that ran clean and hold one of `needles` (``git push``), the newest first (by
    when they ran): each session's calls read through its index."""
    if not session_ids or not needles:
        return []
    sessions = ", ".join("?" for _ in session_ids)
    said = " OR ".join("instr(target, ?) > 0" for _ in needles)
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM tool_calls WHERE session_id IN ({sessions}) AND tool = 'Bash' AND failed = 0 "
        f"AND target IS NOT NULL AND ({said}) ORDER BY coalesce(ts_ms, 0) DESC, rowid DESC",
        (*session_ids, *needles))
    return [_call(row) for row in rows]


def clean_calls_assigning(conn: apsw.Connection, project: str | None, limit: int = 500) -> list[StoredToolCall]:
    """The project's newest shell calls that ran clean and set a variable for a command (``DB_HOST=… pnpm dev``,
    or any `=`: the caller reads which), with the calls of the same sessions, the newest first (by when they ran)."""
    rows = conn.execute(
        f"SELECT {', '.join('t.' + c.strip() for c in _COLUMNS.split(','))} FROM tool_calls t JOIN sessions s "
        "ON s.session_id = t.session_id WHERE s.project IS ? AND t.tool = 'Bash' AND t.failed = 0 "
        "AND t.target IS NOT NULL AND t.session_id IN (SELECT session_id FROM tool_calls WHERE tool = 'Bash' "
        "AND failed = 0 AND instr(target, '=') > 0) ORDER BY coalesce(t.ts_ms, 0) DESC, t.rowid DESC LIMIT ?",
        (project, limit))
    return [_call(row) for row in rows]


def failed_commands_saying(conn: apsw.Connection, project: str | None, needles: tuple[str, ...],
                           limit: int = 500) -> list[StoredToolCall]:
    """The project's newest failed shell calls whose error holds one of `needles` (lower case: ``not found``),
    the newest first (by when they ran)."""
    said = " OR ".join("instr(lower(t.error), ?) > 0" for _ in needles) or "0"
    rows = conn.execute(
        f"SELECT {', '.join('t.' + c.strip() for c in _COLUMNS.split(','))} FROM tool_calls t JOIN sessions s "
        f"ON s.session_id = t.session_id WHERE s.project IS ? AND t.tool = 'Bash' AND t.failed = 1 "
        f"AND t.error IS NOT NULL AND ({said}) ORDER BY coalesce(t.ts_ms, 0) DESC, t.rowid DESC LIMIT ?",
        (project, *needles, limit))
    return [_call(row) for row in rows]


def files_worked_on(conn: apsw.Connection, project: str | None, tools: tuple[str, ...],
                    limit: int) -> list[tuple[str, str, int]]:
    """The files the project's sessions read or changed and the tool did not fail on (`tools`: Read, Edit, …):
    (path as called, session, its newest call in that session), the most recently worked on first."""
    marks = ",".join("?" * len(tools))
    rows = conn.execute(
        "SELECT t.target, t.session_id, max(coalesce(t.ts_ms, 0)) AS last FROM tool_calls t JOIN sessions s "
        f"ON s.session_id = t.session_id WHERE s.project IS ? AND t.failed = 0 AND t.tool IN ({marks}) "
        "AND t.target IS NOT NULL GROUP BY t.target, t.session_id ORDER BY last DESC LIMIT ?",
        (project, *tools, limit))
    return [(row[0], row[1], row[2]) for row in rows]


def project_stamp(conn: apsw.Connection, project: str) -> int:
    """The newest tool call of the project's sessions (its rowid): changes whenever one of them makes a call."""
    row = conn.execute("SELECT coalesce(max(t.rowid), 0) FROM tool_calls t JOIN sessions s "
                       "ON s.session_id = t.session_id WHERE s.project = ?", (project,)).fetchone()
    return row[0]


def calls_stamp(conn: apsw.Connection, project: str | None) -> tuple[int, int]:
    """The project's newest tool call (its rowid) and how many it has: changes when a session makes a call, and
    when a session's calls are dropped (off the record)."""
    row = conn.execute("SELECT coalesce(max(t.rowid), 0), count(*) FROM tool_calls t JOIN sessions s "
                       "ON s.session_id = t.session_id WHERE s.project IS ?", (project,)).fetchone()
    return row[0], row[1]


def prompt_times(conn: apsw.Connection, session_id: str) -> list[int]:
    """When the session's user messages were written, in order: where its tasks begin."""
    rows = conn.execute("SELECT ts_ms FROM messages WHERE session_id = ? AND role = 'user' AND ts_ms IS NOT NULL "
                        "ORDER BY ts_ms", (session_id,))
    return [row[0] for row in rows]


def calls_stopping(conn: apsw.Connection, session_ids: list[str], tools: tuple[str, ...],
                   needle: str) -> list[StoredToolCall]:
    """These sessions' calls of `tools` (a TaskStop) and their shell calls that hold `needle` (``kill``), in the
    order they ran: each session's calls read through its index."""
    if not session_ids:
        return []
    sessions = ", ".join("?" for _ in session_ids)
    named = ", ".join("?" for _ in tools) or "''"
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM tool_calls WHERE session_id IN ({sessions}) AND (tool IN ({named}) "
        "OR tool = 'Bash' AND target IS NOT NULL AND instr(target, ?) > 0) ORDER BY coalesce(ts_ms, 0), rowid",
        (*session_ids, *tools, needle))
    return [_call(row) for row in rows]


def last_call_times(conn: apsw.Connection, session_ids: list[str]) -> dict[str, int]:
    """When each of these sessions made its newest tool call (epoch ms)."""
    if not session_ids:
        return {}
    sessions = ", ".join("?" for _ in session_ids)
    return {row[0]: row[1] for row in conn.execute(
        f"SELECT session_id, max(ts_ms) FROM tool_calls WHERE session_id IN ({sessions}) AND ts_ms IS NOT NULL "
        "GROUP BY session_id", session_ids)}


def clean_calls_naming(conn: apsw.Connection, project: str | None, names: tuple[str, ...],
                       limit: int = 500) -> list[tuple[str, int]]:
    """The project's newest shell commands that ran clean and hold one of `names` (``eslint``), with when they
    ran, the newest first."""
    if not names:
        return []
    said = " OR ".join("instr(t.target, ?) > 0" for _ in names)
    rows = conn.execute(
        "SELECT t.target, coalesce(t.ts_ms, 0) FROM tool_calls t JOIN sessions s ON s.session_id = t.session_id "
        f"WHERE s.project IS ? AND t.tool = 'Bash' AND t.failed = 0 AND t.target IS NOT NULL AND ({said}) "
        "ORDER BY coalesce(t.ts_ms, 0) DESC, t.rowid DESC LIMIT ?", (project, *names, limit))
    return [(row[0], row[1]) for row in rows]
