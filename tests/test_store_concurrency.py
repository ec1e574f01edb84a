"""Many threads opening and writing one fresh database at once: nothing lost, nothing corrupted.

A fresh database's header does not carry Engram's application_id until a checkpoint (the id is in
the WAL), so every connect() meanwhile probes the file's identity. A probe through a second SQLite
library (the stdlib's) dropped apsw's POSIX locks when it closed, and concurrent writers corrupted
the file; this test caught it.
"""

from __future__ import annotations

import threading
from pathlib import Path

from processor.store import open_store, write_transaction


def test_concurrent_opens_and_writes_keep_the_database_whole(tmp_path: Path) -> None:
    db = tmp_path / "engram.db"
    keeper = open_store(db)  # held open: the WAL is never checkpointed into the header meanwhile
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(15):
                conn = open_store(db)
                try:
                    with write_transaction(conn):
                        conn.execute("INSERT INTO meta(key, value) VALUES (?, ?)", (f"k{n}-{i}", "v"))
                finally:
                    conn.close()
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    keeper.close()
    assert errors == []
    conn = open_store(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("SELECT count(*) FROM meta WHERE key LIKE 'k%'").fetchone()[0] == 8 * 15
    finally:
        conn.close()
