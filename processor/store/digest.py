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
# Each query reads one index range of m007_episode_digest_indexes newest-first and stops at LIMIT.
# `status = 'active'` must appear literally for SQLite to use those partial indexes.
GLOBAL_SQL = (f"SELECT {_COLUMNS} FROM episodes WHERE status = 'active' AND scope = 'global' "
              "AND importance = 'high' ORDER BY created_at DESC LIMIT ?")
# The project's lessons and rules: gotchas and conventions first, then decisions, preferences and what is
# marked important; never a verbatim round (narration, the user's own prompts). Two reads of the partial
# index idx_episodes_active_memories (m017), each newest first and stopped at its LIMIT.
_LESSONS = (f"SELECT {_COLUMNS} FROM episodes WHERE status = 'active' AND source_type != 'verbatim' "
            "AND project = ? AND {kinds} ORDER BY created_at DESC LIMIT ?")
PROJECT_RULES_SQL = _LESSONS.format(kinds="kind IN ('gotcha', 'convention')")
PROJECT_LESSONS_SQL = _LESSONS.format(
    kinds="kind NOT IN ('gotcha', 'convention') AND (kind IN ('decision', 'preference') OR importance = 'high')")
# What the project's sessions learned lately: memories only, no verbatim rounds.
PROJECT_RECENT_SQL = (f"SELECT {_COLUMNS} FROM episodes WHERE status = 'active' AND source_type != 'verbatim' "
                      "AND project = ? AND created_at >= ? ORDER BY created_at DESC LIMIT ?")



def _memories(conn: object, sql: str, params: tuple) -> list[Memory]:
    return [Memory(*row) for row in conn.execute(sql, params)]  # type: ignore[attr-defined]


def global_important(conn: object, limit: int) -> list[Memory]:
    """Active high-importance memories for all projects, newest first."""
    return _memories(conn, GLOBAL_SQL, (limit,))


def project_lessons(conn: object, project: str, limit: int) -> list[Memory]:
    """The project's lessons and rules, gotchas and conventions first, newest first within each."""
    rules = _memories(conn, PROJECT_RULES_SQL, (project, limit))
    return rules + _memories(conn, PROJECT_LESSONS_SQL, (project, limit - len(rules))) if len(rules) < limit \
        else rules


def project_recent(conn: object, project: str, since_ms: int, limit: int) -> list[Memory]:
    return _memories(conn, PROJECT_RECENT_SQL, (project, since_ms, limit))


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
