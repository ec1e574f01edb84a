"""The SessionStart digest's queries: each reads the newest rows of one index range and stops at its LIMIT.

Stdlib only (``sqlite3``): the SessionStart hook runs on every session start, resume, clear and
compact, and apsw's import alone costs more than these three queries. The query functions take any
DB-API connection with ``execute`` (a ``sqlite3`` or an apsw one).
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections import namedtuple  # already loaded by sqlite3; dataclasses would pull in inspect

BUSY_TIMEOUT_MS = 200  # the hook must not wait long for a writer: no digest beats a slow start


Memory = namedtuple("Memory", "id summary created_at importance")  # one digest row


_COLUMNS = "id, summary, created_at, importance"
# What the digest tells is what the user said should hold from now on: standing instructions and decisions mined
# from the user's own words (memory_origins) while new — until the project (``?3``) had ``?5`` other sessions active
# after it was said, its own and the one starting (``?4``) aside; after that a rule is told at the call that would
# break it or with a prompt about it, since a rule read at every session start is one the agent already follows or
# one no call of the session concerns — and what was stored on purpose, a fact or a bug's fix stored on purpose only
# while it is new (``?1``: since when; after that it waits for a prompt about it). What a session found or did (a
# lesson, an error's fix, a fact about a file, a commit message) has its own moment, the call it is about. Times
# are the transcript's on both sides (a memory's ``created_at`` is its message's).
_SESSIONS_SINCE = ("(SELECT count(*) FROM (SELECT 1 FROM sessions s WHERE s.project = ?3 "
                   "AND s.last_activity > episodes.created_at AND s.session_id != ?4 "
                   "AND s.session_id != COALESCE(episodes.session_id, '') LIMIT ?5))")
_SAID = ("((source_type = 'manual' AND (kind NOT IN ('fact', 'bugfix') OR created_at >= ?1)) "
         "OR (id IN (SELECT episode_id FROM memory_origins WHERE miner IN ('standing', 'decision')) "
         f"AND {_SESSIONS_SINCE} < ?5))")
# `status = 'active'` must appear literally for SQLite to use the partial indexes (m007, m017).
GLOBAL_SQL = (f"SELECT {_COLUMNS} FROM episodes WHERE status = 'active' AND scope = 'global' "
              f"AND importance = 'high' AND {_SAID} ORDER BY created_at DESC LIMIT ?2")
PROJECT_RULES_SQL = (f"SELECT {_COLUMNS} FROM episodes WHERE status = 'active' AND source_type != 'verbatim' "
                     f"AND project = ?3 AND {_SAID} ORDER BY created_at DESC LIMIT ?2")
RULE_SESSIONS = 2  # a rule the user said is in the digest of the project's next two sessions
# Where the project's last session stopped: the newest other session of the project, and its last todo list
# (every agent's todo tool is stored as Claude Code's TodoWrite, its items as "status: content" lines).
LAST_SESSION_SQL = ("SELECT session_id, last_activity FROM sessions WHERE project = ? AND session_id != ? "
                    "AND last_activity >= ? ORDER BY last_activity DESC LIMIT 1")
LAST_TODOS_SQL = ("SELECT target, ts_ms, use_uuid FROM tool_calls WHERE session_id = ? AND tool = 'TodoWrite' "
                  "AND target IS NOT NULL ORDER BY ts_ms DESC LIMIT 1")

Stopped = namedtuple("Stopped", "session_id at todos message_uuid")  # where a session stopped


def _memories(conn: object, sql: str, params: tuple) -> list[Memory]:
    return [Memory(*row) for row in conn.execute(sql, params)]  # type: ignore[attr-defined]


def global_important(conn: object, limit: int, new_since: int = 0, project: str | None = None,
                     session_id: str | None = None) -> list[Memory]:
    """Active high-importance memories for all projects, newest first (`new_since`; one mined from the user's
    words while `project` is new to it: see ``_SAID``)."""
    return _memories(conn, GLOBAL_SQL, (new_since, limit, project, session_id or "", RULE_SESSIONS))


def project_rules(conn: object, project: str, limit: int, new_since: int = 0,
                  session_id: str | None = None) -> list[Memory]:
    """What the user said should hold in this project (standing instructions and decisions while new, what was
    stored on purpose; a fact stored on purpose while new: ``_SAID``), newest first."""
    return _memories(conn, PROJECT_RULES_SQL, (new_since, limit, project, session_id or "", RULE_SESSIONS))


def last_session(conn: object, project: str, session_id: str | None, since_ms: int) -> Stopped | None:
    """The project's newest other session active since `since_ms`, with its last todo list (None: no such
    session; its todos None when it kept none)."""
    row = conn.execute(LAST_SESSION_SQL, (project, session_id or "", since_ms)).fetchone()  # type: ignore[attr-defined]
    if row is None:
        return None
    todos = conn.execute(LAST_TODOS_SQL, (row[0],)).fetchone()  # type: ignore[attr-defined]
    return Stopped(row[0], row[1], todos[0] if todos else None, todos[2] if todos else None)


# What a read may raise: locked, interrupted at the deadline, an old schema, an unreadable file.
ERRORS = (sqlite3.Error, OSError)


def open_readonly(db_path: str, deadline: float) -> sqlite3.Connection | None:
    """A read-only connection that gives up on locks quickly and on queries at `deadline`; None if no DB.

    ``mode=ro`` never creates the file (the same open flags the apsw reader used).
    """
    import posixpath  # already loaded by the interpreter; os.path without importing os here

    if not posixpath.isfile(db_path):
        return None
    apsw = sys.modules.get("apsw")
    if apsw is not None:
        # A process that already holds apsw connections (the processor, tests) must not open the same file
        # through a second SQLite library: the two do not share POSIX locks, and closing one's descriptor
        # drops the other's locks. The hook's own process has not loaded apsw and takes the stdlib.
        aconn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
        aconn.set_busy_timeout(BUSY_TIMEOUT_MS)
        aconn.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
        return aconn
    uri = "file:" + db_path.replace("%", "%25").replace("?", "%3f").replace("#", "%23") + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                           check_same_thread=False)
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 1000)  # truthy interrupts the statement
    return conn


def session_opt_out(conn: sqlite3.Connection, session_id: str) -> str | None:
    """'memory' (no digest, no bites), 'record' (also not captured) or None; any DB-API connection."""
    try:
        row = conn.execute("SELECT opt_out FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
    except Exception as exc:  # sqlite3.OperationalError or apsw.SQLError
        if "no such column" in str(exc):  # a database from before the opt-out column
            return None
        raise
    return row[0] if row else None


def open_review_count(conn: sqlite3.Connection) -> int:
    """Open reviews (`engram review`); 0 on a database from before the reviews table. Any DB-API connection."""
    try:
        return conn.execute("SELECT count(*) FROM reviews WHERE state = 'open'").fetchone()[0]
    except Exception as exc:  # sqlite3.OperationalError or apsw.SQLError: no reviews table yet
        if "no such table" in str(exc):
            return 0
        raise
