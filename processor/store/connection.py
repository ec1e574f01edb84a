"""Opening the one SQLite file, and the write transaction every writer uses."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import apsw
import apsw.bestpractice
import apsw.ext

from processor.config import APPLICATION_ID, sqlite_application_id
from processor.store.errors import NotEngramDatabase

BUSY_TIMEOUT_MS = 5000
# Engram's `PRAGMA application_id` (processor.config): another program's SQLite file at the same path (at
# least one other tool called engram keeps ~/.engram/engram.db) is told apart from ours before any write.


FIRST_MIGRATION = "m001_create_sessions"  # processor/store/migrations.py; pinned by tests/test_home.py
_MIGRATION_NAME = re.compile(r"^m\d{3}_\w+$")


def _refusal(path: Path, why: str) -> NotEngramDatabase:
    return NotEngramDatabase(
        f"{path} is not an Engram database ({why}); another program may use this folder, and Engram will not "
        f"write into its file. Fix: point ENGRAM_HOME at a folder of Engram's own (or unset it to use the "
        f"default), or, if the file is yours and disposable, move it aside: mv {path} {path}.foreign")


def database_identity(conn) -> str:
    """'engram' (stamped), 'earlier-engram' (an Engram database from before the id), 'empty' or 'foreign'.

    Works on an apsw or a stdlib sqlite3 connection. An earlier Engram's database is recognised by its
    migrations table: it starts with Engram's first migration and every name has the mNNN_ form.
    """
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    if app_id == APPLICATION_ID:
        return "engram"
    if app_id != 0:
        return "foreign"
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables or tables == {"schema_migrations"}:
        return "empty"
    if "schema_migrations" not in tables:
        return "foreign"
    names = [row[0] for row in conn.execute("SELECT name FROM schema_migrations ORDER BY rowid")]
    if names and names[0] == FIRST_MIGRATION and all(_MIGRATION_NAME.match(str(n)) for n in names):
        return "earlier-engram"
    return "foreign"


def check_identity(conn, path: Path) -> str:
    """The database's identity (see database_identity); raises NotEngramDatabase for anyone else's file."""
    try:
        identity = database_identity(conn)
    except (apsw.NotADBError, apsw.CorruptError, sqlite3.DatabaseError) as exc:
        raise _refusal(path, f"not a SQLite database: {exc}") from None
    if identity == "foreign":
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        why = (f"its application_id is {app_id:#x}, Engram's is {APPLICATION_ID:#x}" if app_id
               else "it has tables but no application_id and no Engram migrations")
        raise _refusal(path, why)
    return identity

log = logging.getLogger(__name__)
_best_practice_lock = threading.Lock()
_best_practice_applied = False


def connection_busy_timeout_engram(connection: apsw.Connection) -> None:
    """Engram's readers and writers wait up to 5 s for a lock (bestpractice's default is 100 ms)."""
    connection.set_busy_timeout(BUSY_TIMEOUT_MS)


def connection_secure_delete(connection: apsw.Connection) -> None:
    """Deleted and overwritten content is zeroed where that costs no extra I/O: text forgotten or redacted again
    does not linger in the file's free space."""
    connection.execute("PRAGMA secure_delete = FAST")


_SQLITE_LOG = logging.getLogger("processor.store.sqlite")


def library_logging_engram() -> None:
    """SQLite's own log forwarded to logging, as apsw's bestpractice does, less SQLITE_SCHEMA: a prepared statement
    that a schema change made stale (the migrations creating the tables while the processor's threads open the
    file: six lines at a first start) is prepared again and run by SQLite itself; one that still fails raises to
    its caller. Every other code is logged: a warning or notice (a journal recovered) as a warning, the rest as
    errors."""

    def handler(errcode: int, message: str) -> None:
        if errcode & 0xFF == apsw.SQLITE_SCHEMA:
            return
        level = logging.WARNING if errcode & 0xFF in (apsw.SQLITE_WARNING, apsw.SQLITE_NOTICE) else logging.ERROR
        _SQLITE_LOG.log(level, "SQLITE_LOG: %s (%d) %s", message, errcode, apsw.ext.result_string(errcode))

    apsw.config(apsw.SQLITE_CONFIG_LOG, handler)


def _apply_best_practice() -> None:
    # apsw.bestpractice registers process-wide connection hooks: do it once. Our timeout
    # goes first so the other hooks' statements already wait 5 s; `PRAGMA optimize` is
    # left out of the hooks because it needs a write lock and would make *opening* the
    # database fail while another process holds it. close() runs it instead. SQLite's log
    # goes through our handler (library_logging_engram), not apsw's.
    global _best_practice_applied
    skip = {apsw.bestpractice.connection_busy_timeout, apsw.bestpractice.connection_optimize,
            apsw.bestpractice.library_logging}
    with _best_practice_lock:
        if not _best_practice_applied:
            apsw.bestpractice.apply(
                (connection_busy_timeout_engram, connection_secure_delete, library_logging_engram,
                 *(f for f in apsw.bestpractice.recommended if f not in skip))
            )
            _best_practice_applied = True


# Held while any connection opens. A probe opens with apsw's process-wide connection hooks set aside
# (they would switch a foreign file to WAL: a write); no other connection may open meanwhile.
_OPEN_LOCK = threading.Lock()


def _check_before_opening(path: Path) -> None:
    """Refuse another program's file before apsw's connection hooks write to it (they set WAL mode).

    Engram's own stamped file is recognised from its header alone; anything else is looked at through a
    read-only apsw connection opened without those hooks. Never through a second SQLite library (the
    stdlib's): two SQLite copies in one process do not share POSIX locks, and closing one's file
    descriptor drops the other's locks, which corrupts the database under concurrent writers.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return  # a new database: created, then stamped by m009
    if size == 0 or sqlite_application_id(path) == APPLICATION_ID:
        return
    with _OPEN_LOCK:
        hooks = list(apsw.connection_hooks)
        apsw.connection_hooks.clear()
        try:
            probe = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        except apsw.Error as exc:
            raise _refusal(path, f"cannot be opened as SQLite: {exc}") from None
        finally:
            apsw.connection_hooks[:] = hooks
    probe.set_busy_timeout(BUSY_TIMEOUT_MS)
    try:
        check_identity(probe, path)
    except apsw.BusyError:
        return  # a writer holds it: Engram's own processor, most likely
    except apsw.ReadOnlyError:
        # A hot journal (or WAL) a read-only connection may not roll back: a SQLite database whose writer
        # died mid-transaction — Engram's own, killed while creating it before its stamp. The writer's
        # open below rolls it back, and the migrations check it then.
        return
    except apsw.Error as exc:
        raise _refusal(path, f"unreadable as SQLite: {exc}") from None
    finally:
        probe.close()


def connect(path: Path, *, readonly: bool = False) -> apsw.Connection:
    """A connection for the calling thread only: WAL, foreign keys, 5 s busy timeout.

    Each thread opens its own; apsw connections are not shared across threads here.
    """
    _apply_best_practice()
    _check_before_opening(path)
    if not readonly:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.exists():
            # Create the file 0600 before SQLite does, whatever the umask.
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    with _OPEN_LOCK:
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


# One lock per database file for this process's writers. SQLite's busy handler waits by sleeping in
# growing steps (up to 100 ms), so a writer that meets another thread's transaction wakes up late even
# when that transaction ended at once: capture then lagged ~100 ms behind a cold-path sweep's chunk.
# Threads of one process queue on this lock instead and are handed the write lock as soon as it is
# free; the busy timeout still covers other processes (the CLI, a second processor being refused).
_WRITERS: dict[str, threading.RLock] = {}
_WRITERS_GUARD = threading.Lock()


def _writers_lock(conn: apsw.Connection) -> threading.RLock | None:
    name = conn.filename
    if not name:
        return None  # a private in-memory or temporary database: no other connection to wait for
    with _WRITERS_GUARD:
        lock = _WRITERS.get(name)
        if lock is None:
            lock = _WRITERS[name] = threading.RLock()  # re-entrant: a thread's nested writes keep their old behaviour
        return lock


@contextlib.contextmanager
def write_transaction(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """BEGIN IMMEDIATE … COMMIT, rolled back on any exception.

    IMMEDIATE takes the write lock up front, so a writer waits (busy timeout) at
    BEGIN instead of failing half-way with a lock upgrade deadlock. Writers of this
    process first queue on one lock per database file (see _WRITERS).
    """
    lock = _writers_lock(conn)
    # As long as SQLite would wait: a writer of this process held up longer gets the same BusyError.
    if lock is not None and not lock.acquire(timeout=BUSY_TIMEOUT_MS / 1000):
        raise apsw.BusyError(f"another thread of this process held the write lock of {conn.filename} for "
                             f"over {BUSY_TIMEOUT_MS} ms")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(apsw.Error):
                conn.execute("ROLLBACK")
            raise
        else:
            conn.execute("COMMIT")
    finally:
        if lock is not None:
            lock.release()


@contextlib.contextmanager
def read_transaction(conn: apsw.Connection) -> Iterator[apsw.Connection]:
    """BEGIN … COMMIT around reads that must see one consistent state (WAL: writers go on meanwhile).

    A deferred transaction that only reads takes no write lock; COMMIT ends it whatever happened inside."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        with contextlib.suppress(apsw.Error):
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
