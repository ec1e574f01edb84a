"""The one SQLite file: connections, migrations and the SQL that reads and writes it.

apsw is imported on first use of a name below, not at package import: the SessionStart hook
reads ``processor.store.digest`` (stdlib ``sqlite3``, read-only) and must not pay apsw's ~50 ms.
"""

from __future__ import annotations

# Not `from typing import TYPE_CHECKING`: typing alone costs the SessionStart hook ~5 ms (type
# checkers know this name).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    import apsw

    from processor.store.connection import connect, read_transaction, retry_when_busy, write_transaction
    from processor.store.migrations import migrate


def open_store(path: Path) -> apsw.Connection:
    """A migrated read-write connection for the calling thread."""
    from processor.store.connection import connect, retry_when_busy
    from processor.store.migrations import migrate

    conn = connect(path)
    retry_when_busy(lambda: migrate(conn), what=f"migrating {path}", attempts=3)
    return conn


_LAZY = {
    "connect": "processor.store.connection",
    "read_transaction": "processor.store.connection",
    "retry_when_busy": "processor.store.connection",
    "write_transaction": "processor.store.connection",
    "migrate": "processor.store.migrations",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'processor.store' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


__all__ = ["connect", "migrate", "open_store", "read_transaction", "retry_when_busy", "write_transaction"]
