"""The one SQLite file: connections, migrations and the SQL that reads and writes it."""

from pathlib import Path

import apsw

from processor.store.connection import connect, retry_when_busy, write_transaction
from processor.store.migrations import migrate


def open_store(path: Path) -> apsw.Connection:
    """A migrated read-write connection for the calling thread."""
    conn = connect(path)
    retry_when_busy(lambda: migrate(conn), what=f"migrating {path}", attempts=3)
    return conn


__all__ = ["connect", "migrate", "open_store", "retry_when_busy", "write_transaction"]
