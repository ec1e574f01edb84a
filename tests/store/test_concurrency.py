"""Many threads opening and writing one fresh database at once: nothing lost, nothing corrupted.

A fresh database's header does not carry Engram's application_id until a checkpoint (the id is in
the WAL), so every connect() meanwhile probes the file's identity. A probe through a second SQLite
library (the stdlib's) dropped apsw's POSIX locks when it closed, and concurrent writers corrupted
the file; this test caught it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import apsw
import pytest

from processor.store import connection, open_store, write_transaction


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


def test_writers_of_one_process_queue_on_a_lock_not_on_sqlites_busy_sleeps(tmp_path: Path) -> None:
    """SQLite's busy handler sleeps in steps of up to 100 ms, so a writer meeting another thread's
    transaction started late even when it ended at once (capture lagged behind a sweep's chunks).
    A second writer of this process now waits for the first on a lock: SQLite never reports it busy."""
    db = tmp_path / "engram.db"
    first, second = open_store(db), open_store(db)
    busy_calls: list[int] = []
    second.set_busy_handler(lambda attempts: busy_calls.append(attempts) or True)
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with write_transaction(first):
            first.execute("INSERT INTO meta(key, value) VALUES ('first', '1')")
            inside.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(10)
    threading.Timer(0.2, release.set).start()
    with write_transaction(second):  # waits for the holder's commit
        second.execute("INSERT INTO meta(key, value) VALUES ('second', '2')")
    holder.join()
    assert busy_calls == []
    assert dict(second.execute("SELECT key, value FROM meta WHERE key IN ('first', 'second')")) == {
        "first": "1", "second": "2"}
    first.close()
    second.close()


def test_a_writer_held_up_past_the_busy_timeout_gets_busy_error(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection, "BUSY_TIMEOUT_MS", 200)
    db = tmp_path / "engram.db"
    first, second = open_store(db), open_store(db)
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with write_transaction(first):
            inside.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(10)
    try:
        with pytest.raises(apsw.BusyError, match="held the write lock"), write_transaction(second):
            pass
    finally:
        release.set()
        holder.join()
    with write_transaction(second):  # and the lock is free again
        second.execute("INSERT INTO meta(key, value) VALUES ('after', '1')")
    first.close()
    second.close()
