"""The SQL of failure signatures: how a project's calls failed, in which sessions, and what memory tells the fix.

A signature is the normalised error of ``processor/hook_kit/failure_keys.py``; two failures are the same when their
signatures are (``same_failure``), so each project keeps one row per way a program fails, however often it does:
``record`` finds the row among the program's and counts the session in it. A project keeps at most
``ROWS_PER_KEY`` signatures per program, the least recently seen dropped first (thousands of failures of one
command are one row each only while they differ). Callers own the transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import apsw

from processor.hook_kit.failure_keys import same_failure
from processor.redaction import Redacted, redacted, redacted_json

ROWS_PER_KEY = 50
SESSIONS_KEPT = 50  # sessions remembered per signature (the most recent)


@dataclass(frozen=True)
class FailureSignature:
    id: int
    project: str | None
    fail_key: str
    call_key: str
    signature: list[str]
    sessions: dict[str, int]  # session id → when it last failed this way there (ms)
    first_ms: int | None
    last_ms: int | None
    example: str | None
    memory_id: str | None
    fix: str | None  # what fixed it, in a line (the memory's own words)
    uses: list[str] | None = None  # the words the fix added to the command: a call that has them applies it


_COLUMNS = "id, project, fail_key, call_key, signature, sessions, first_ms, last_ms, example, memory_id, fix, uses"


def _row(row: tuple) -> FailureSignature:
    return FailureSignature(row[0], row[1], row[2], row[3], json.loads(row[4]), json.loads(row[5]), row[6], row[7],
                            row[8], row[9], row[10], json.loads(row[11]) if row[11] else None)


def signatures_for(conn: apsw.Connection, project: str | None, fail_key: str) -> list[FailureSignature]:
    rows = conn.execute(f"SELECT {_COLUMNS} FROM failure_signatures WHERE project IS ? AND fail_key = ? "
                        "ORDER BY last_ms DESC", (project, fail_key))
    return [_row(r) for r in rows]


def find(conn: apsw.Connection, project: str | None, fail_key: str, signature: list[str]) -> FailureSignature | None:
    """The project's row for this failure (its signature the same as the row's), if any."""
    return next((r for r in signatures_for(conn, project, fail_key) if same_failure(r.signature, signature)), None)


def record(conn: apsw.Connection, project: str | None, fail_key: str, call_key: str, signature: list[str],
           session_id: str, ts_ms: int | None, example: Redacted | None) -> FailureSignature:
    """Note that a session failed this way (a session mined again, or in several slices, is one session: a
    rebuild counts nothing twice); returns the row."""
    found = find(conn, project, fail_key, signature)
    if found is None:
        conn.execute("INSERT INTO failure_signatures (project, fail_key, call_key, signature, sessions, first_ms, "
                     "last_ms, example) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (project, fail_key, call_key, json.dumps(signature), json.dumps({session_id: ts_ms or 0}), ts_ms,
                      ts_ms, redacted(example)))
        _trim(conn, project, fail_key)
        row = conn.execute(f"SELECT {_COLUMNS} FROM failure_signatures WHERE id = ?",
                           (conn.last_insert_rowid(),)).fetchone()
        return _row(row)
    sessions = dict(found.sessions)
    at = max(sessions.pop(session_id, 0) or 0, ts_ms or 0)
    sessions[session_id] = at  # last: the most recent kept when trimmed
    sessions = dict(list(sessions.items())[-SESSIONS_KEPT:])
    first = min(v for v in (found.first_ms, ts_ms) if v is not None) if (found.first_ms or ts_ms) else None
    last = max(v for v in (found.last_ms, ts_ms) if v is not None) if (found.last_ms or ts_ms) else None
    conn.execute("UPDATE failure_signatures SET sessions = ?, first_ms = ?, last_ms = ? WHERE id = ?",
                 (json.dumps(sessions), first, last, found.id))
    return FailureSignature(found.id, project, fail_key, found.call_key, found.signature, sessions, first, last,
                            found.example, found.memory_id, found.fix, found.uses)


def _trim(conn: apsw.Connection, project: str | None, fail_key: str) -> None:
    conn.execute("DELETE FROM failure_signatures WHERE id IN (SELECT id FROM failure_signatures WHERE project IS ? "
                 "AND fail_key = ? ORDER BY last_ms DESC, id DESC LIMIT -1 OFFSET ?)",
                 (project, fail_key, ROWS_PER_KEY))


def set_memory(conn: apsw.Connection, signature_id: int, memory_id: str, fix: Redacted,
               uses: list[str] | tuple[str, ...] = ()) -> None:
    """The memory that tells what fixed this failure, the fix in a line, and the words it added to the command
    (the first fix found is kept)."""
    conn.execute("UPDATE failure_signatures SET memory_id = ?, fix = ?, uses = ? WHERE id = ? AND memory_id IS NULL",
                 (memory_id, redacted(fix), redacted_json(list(uses)) if uses else None, signature_id))


def stamp(conn: apsw.Connection, project: str | None) -> tuple[int, int]:
    """Changes whenever a failure of the project is counted in a new session or gets its fix: (rows, the size of
    their session lists and fixes)."""
    row = conn.execute("SELECT count(*), coalesce(sum(length(sessions) + coalesce(length(memory_id), 0)), 0) "
                       "FROM failure_signatures WHERE project IS ?", (project,)).fetchone()
    return row[0], row[1]


def with_memories(conn: apsw.Connection, project: str | None) -> list[FailureSignature]:
    """The project's failures that have a memory telling their fix, most recently seen first."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM failure_signatures WHERE project IS ? AND memory_id IS NOT NULL "
                        "ORDER BY last_ms DESC", (project,))
    return [_row(r) for r in rows]


def of_memory(conn: apsw.Connection, memory_id: str) -> FailureSignature | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM failure_signatures WHERE memory_id = ?", (memory_id,)).fetchone()
    return _row(row) if row else None


def project_failures(conn: apsw.Connection, project: str | None) -> list[FailureSignature]:
    rows = conn.execute(f"SELECT {_COLUMNS} FROM failure_signatures WHERE project IS ? ORDER BY last_ms DESC",
                        (project,))
    return [_row(r) for r in rows]
