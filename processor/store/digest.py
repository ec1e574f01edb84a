"""The SessionStart digest's queries: each reads the newest rows of one index range and stops at its LIMIT."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import apsw

BUSY_TIMEOUT_MS = 200  # the hook must not wait long for a writer: no digest beats a slow start


@dataclass(frozen=True)
class Memory:
    id: str
    summary: str
    created_at: int
    importance: str


_COLUMNS = "id, summary, created_at, importance"
# Each query reads one index range of m007_episode_digest_indexes newest-first and stops at LIMIT.
# `status = 'active'` must appear literally for SQLite to use those partial indexes.
GLOBAL_SQL = (f"SELECT {_COLUMNS} FROM episodes WHERE status = 'active' AND scope = 'global' "
              "AND importance = 'high' ORDER BY created_at DESC LIMIT ?")
PROJECT_IMPORTANT_SQL = (f"SELECT {_COLUMNS} FROM episodes WHERE status = 'active' AND project = ? "
                         "AND importance = 'high' ORDER BY created_at DESC LIMIT ?")
PROJECT_RECENT_SQL = (f"SELECT {_COLUMNS} FROM episodes WHERE status = 'active' AND project = ? "
                      "AND created_at >= ? ORDER BY created_at DESC LIMIT ?")



def _memories(conn: apsw.Connection, sql: str, params: tuple) -> list[Memory]:
    return [Memory(*row) for row in conn.execute(sql, params)]


def global_important(conn: apsw.Connection, limit: int) -> list[Memory]:
    """Active high-importance memories for all projects, newest first."""
    return _memories(conn, GLOBAL_SQL, (limit,))


def project_important(conn: apsw.Connection, project: str, limit: int) -> list[Memory]:
    return _memories(conn, PROJECT_IMPORTANT_SQL, (project, limit))


def project_recent(conn: apsw.Connection, project: str, since_ms: int, limit: int) -> list[Memory]:
    return _memories(conn, PROJECT_RECENT_SQL, (project, since_ms, limit))


def open_readonly(db_path: Path, deadline: float) -> apsw.Connection | None:
    """A read-only connection that gives up on locks quickly and on queries at `deadline`; None if no DB."""
    if not db_path.is_file():
        return None
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 1000)  # True interrupts the statement
    return conn
