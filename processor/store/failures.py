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
    # session id → when it last ran the command without the fix and without meeting this failure (``note_runs``)
    ran: dict[str, int] | None = None


_COLUMNS = ("id, project, fail_key, call_key, signature, sessions, first_ms, last_ms, example, memory_id, fix, uses, "
            "ran")


def _row(row: tuple) -> FailureSignature:
    return FailureSignature(row[0], row[1], row[2], row[3], json.loads(row[4]), json.loads(row[5]), row[6], row[7],
                            row[8], row[9], row[10], json.loads(row[11]) if row[11] else None, json.loads(row[12]))


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
                            found.example, found.memory_id, found.fix, found.uses, found.ran)


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


def note_runs(conn: apsw.Connection, row: FailureSignature, runs: dict[str, int]) -> None:
    """Count sessions (session id → when) that ran this failure's command without its fix and did not meet it
    (each session once, at its latest run; the most recent ``SESSIONS_KEPT`` kept)."""
    ran = dict(row.ran or {})
    for session_id, at in runs.items():
        if session_id not in row.sessions:
            ran[session_id] = max(ran.get(session_id, 0) or 0, at or 0)
    ran = dict(sorted(ran.items(), key=lambda item: item[1])[-SESSIONS_KEPT:])
    if ran != (row.ran or {}):
        conn.execute("UPDATE failure_signatures SET ran = ? WHERE id = ?", (json.dumps(ran), row.id))


def unlink_memory(conn: apsw.Connection, memory_id: str) -> None:
    """This memory no longer tells the fix of any failure (it went stale): the next fix a session finds for
    them is linked instead, and told."""
    conn.execute("UPDATE failure_signatures SET memory_id = NULL, fix = NULL, uses = NULL WHERE memory_id = ?",
                 (memory_id,))


def stamp(conn: apsw.Connection, project: str | None) -> tuple[int, int]:
    """Changes whenever a failure of the project is counted in a new session, gets its fix or its command ran
    clean in a new session: (rows, the size of their session lists and fixes)."""
    row = conn.execute("SELECT count(*), coalesce(sum(length(sessions) + length(ran) + "
                       "coalesce(length(memory_id), 0)), 0) "
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


# --- failures known from another machine (shared memory: processor/share/lessons.py) -----------------------------


def of_memories(conn: apsw.Connection, memory_ids: list[str]) -> dict[str, FailureSignature]:
    """The failure each of these memories tells the fix of (the most recently met, when several link it)."""
    found: dict[str, FailureSignature] = {}
    for start in range(0, len(memory_ids), 500):
        part = memory_ids[start:start + 500]
        marks = ",".join("?" * len(part))
        for row in conn.execute(f"SELECT {_COLUMNS} FROM failure_signatures WHERE memory_id IN ({marks}) "
                                "ORDER BY last_ms", part):
            found[row[9]] = _row(row)  # the last one read is the most recent
    return found


def add_known(conn: apsw.Connection, project: str | None, fail_key: str, call_key: str, signature: list[Redacted],
              sessions: dict[str, int], first_ms: int | None, last_ms: int | None, *, crowded: bool = True
              ) -> FailureSignature:
    """A way of failing this machine has not met, as another machine knows it (its sessions: theirs). crowded:
    the program may already have ``ROWS_PER_KEY`` signatures here (False when the caller read fewer)."""
    kept = dict(sorted(sessions.items(), key=lambda item: item[1])[-SESSIONS_KEPT:])
    conn.execute("INSERT INTO failure_signatures (project, fail_key, call_key, signature, sessions, first_ms, last_ms) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (project, fail_key, call_key, redacted_json(signature), json.dumps(kept), first_ms, last_ms))
    row_id = conn.last_insert_rowid()
    if crowded:
        _trim(conn, project, fail_key)
    return FailureSignature(row_id, project, fail_key, call_key, list(signature), kept, first_ms, last_ms, None, None,
                            None)


def merge_sessions(conn: apsw.Connection, row: FailureSignature, sessions: dict[str, int], first_ms: int | None,
                   last_ms: int | None) -> FailureSignature:
    """Count in this row the sessions another machine met the failure in (each session once, at its latest time;
    the most recent ``SESSIONS_KEPT`` kept); writes only when that changes something."""
    merged = dict(row.sessions)
    for session_id, at in sessions.items():
        merged[session_id] = max(merged.get(session_id, 0) or 0, at or 0)
    merged = dict(sorted(merged.items(), key=lambda item: item[1])[-SESSIONS_KEPT:])
    first = min((v for v in (row.first_ms, first_ms) if v is not None), default=None)
    last = max((v for v in (row.last_ms, last_ms) if v is not None), default=None)
    if merged == row.sessions and (first, last) == (row.first_ms, row.last_ms):
        return row
    conn.execute("UPDATE failure_signatures SET sessions = ?, first_ms = ?, last_ms = ? WHERE id = ?",
                 (json.dumps(merged), first, last, row.id))
    return FailureSignature(row.id, row.project, row.fail_key, row.call_key, row.signature, merged, first, last,
                            row.example, row.memory_id, row.fix, row.uses, row.ran)


def relink(conn: apsw.Connection, signature_id: int, memory_id: str, fix: Redacted,
           uses: list[str] | tuple[str, ...] = ()) -> None:
    """Make this memory the one that tells the failure's fix, replacing any other (one fix learned on two machines
    is one memory: the other was superseded by it)."""
    conn.execute("UPDATE failure_signatures SET memory_id = ?, fix = ?, uses = ? WHERE id = ?",
                 (memory_id, redacted(fix), redacted_json(list(uses)) if uses else None, signature_id))
