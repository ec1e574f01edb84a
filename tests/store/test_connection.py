"""SQLite's own log as Engram forwards it (processor/store/connection.py): the statement a schema change made stale,
which SQLite prepares again by itself, says nothing; every real problem is logged."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from processor.store import open_store
from tests.conftest import REPO


def test_a_stale_statement_is_not_logged_and_a_real_error_is(engram_home: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    open_store(engram_home / "engram.db").close()  # the handler is set with the first connection
    with caplog.at_level(logging.DEBUG):
        apsw.log(apsw.SQLITE_SCHEMA, "statement aborts at 10: database schema has changed")
        apsw.log(apsw.SQLITE_IOERR, "disk I/O error")
        apsw.log(apsw.SQLITE_NOTICE, "recovered 12 frames from WAL file")
    assert "schema has changed" not in caplog.text
    assert [(r.levelname, r.getMessage().split(":")[1].strip()) for r in caplog.records] == [
        ("ERROR", "disk I/O error (10) SQLITE_IOERR"),
        ("WARNING", "recovered 12 frames from WAL file (27) SQLITE_NOTICE")]


def test_opening_a_new_database_from_threads_at_once_logs_no_sqlite_line(tmp_path: Path) -> None:
    """What the first `engram run` does: its threads open the new file while the migrations create the tables."""
    script = (
        "import logging, sys, threading\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)\n"
        "from pathlib import Path\n"
        "from processor.store import open_store\n"
        f"path = Path({str(tmp_path / 'engram.db')!r})\n"
        "threads = [threading.Thread(target=lambda: open_store(path).close()) for _ in range(4)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "SQLITE_LOG" not in done.stderr, done.stderr
