"""Opening the one SQLite file, and the write transaction every writer uses."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import apsw
import apsw.bestpractice

BUSY_TIMEOUT_MS = 5000

log = logging.getLogger(__name__)
_best_practice_lock = threading.Lock()
_best_practice_applied = False


def connection_busy_timeout_engram(connection: apsw.Connection) -> None:
    """Engram's readers and writers wait up to 5 s for a lock (bestpractice's default is 100 ms)."""
    connection.set_busy_timeout(BUSY_TIMEOUT_MS)


def _apply_best_practice() -> None:
    # apsw.bestpractice registers process-wide connection hooks: do it once. Our timeout
    # goes first so the other hooks' statements already wait 5 s; `PRAGMA optimize` is
    # left out of the hooks because it needs a write lock and would make *opening* the
    # database fail while another process holds it. close() runs it instead.
    global _best_practice_applied
    skip = {apsw.bestpractice.connection_busy_timeout, apsw.bestpractice.connection_optimize}
    with _best_practice_lock:
        if not _best_practice_applied:
            apsw.bestpractice.apply(
                (connection_busy_timeout_engram, *(f for f in apsw.bestpractice.recommended if f not in skip))
            )
            _best_practice_applied = True


def connect(path: Path, *, readonly: bool = False) -> apsw.Connection:
    """A connection for the calling thread only: WAL, foreign keys, 5 s busy timeout.

    Each thread opens its own; apsw connections are not shared across threads here.
    """
    _apply_best_practice()
    if not readonly:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.exists():
            # Create the file 0600 before SQLite does, whatever the umask.
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    conn = apsw.Connection(str(path), flags=flags)
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    if not readonly:
        # In WAL mode NORMAL still commits atomically and survives a process crash; only an
        # OS crash can lose the newest commits, and their offsets roll back with them.
        conn.pragma("synchronous", "NORMAL")
    return conn


def close(conn: apsw.Connection) -> None:
    """Close after a best-effort `PRAGMA optimize` (skipped when the database is busy)."""
    with contextlib.suppress(apsw.Error):
        conn.pragma("optimize")
    conn.close()


@contextlib.contextmanager
def write_transaction(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """BEGIN IMMEDIATE … COMMIT, rolled back on any exception.

    IMMEDIATE takes the write lock up front, so a writer waits (busy timeout) at
    BEGIN instead of failing half-way with a lock upgrade deadlock.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        with contextlib.suppress(apsw.Error):
            conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")


def retry_when_busy(fn, *, what: str, attempts: int = 0, pause: float = 1.0, stop: threading.Event | None = None):
    """Call fn() until it gets past a lock held longer than the busy timeout.

    attempts=0 retries until `stop` is set; nothing is dropped, each wait is logged.
    """
    tries = 0
    while True:
        try:
            return fn()
        except apsw.BusyError:
            tries += 1
            log.warning("database is locked by another process while %s; retrying (attempt %d)", what, tries)
            if (attempts and tries >= attempts) or (stop is not None and stop.is_set()):
                raise
            if stop is not None:
                stop.wait(pause)
            else:
                time.sleep(pause)
