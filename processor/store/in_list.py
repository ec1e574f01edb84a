"""Reading rows by a list of keys: ``SELECT … WHERE key IN (?, ?, …)`` for a list of any length."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw

IN_CHUNK = 500  # keys a statement: well under SQLite's limit on variables, however long the list


def rows_in(conn: apsw.Connection, sql: str, keys: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The rows `sql` reads for these keys, its ``IN ({marks})`` standing for them, IN_CHUNK keys a statement;
    none for no keys. One chunk's rows follow another's: for rows looked up by key, not for an ordered list."""
    found: list[tuple[Any, ...]] = []
    for start in range(0, len(keys), IN_CHUNK):
        chunk = list(keys[start:start + IN_CHUNK])
        found += conn.execute(sql.replace("{marks}", ",".join("?" * len(chunk))), chunk).fetchall()
    return found
