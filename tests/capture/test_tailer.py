"""Tailing transcripts into a real SQLite file: offsets, partial lines, and every bad input."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from bench.testbed.transcripts import assistant_line, user_line
from processor.capture.tailer import Tailer
from processor.store import open_store, sessions

SID = "aaaaaaaa-0000-0000-0000-000000000001"


@pytest.fixture
def conn(tmp_path: Path) -> apsw.Connection:
    connection = open_store(tmp_path / "engram.db")
    yield connection
    connection.close()


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    folder = tmp_path / "projects" / "-tmp-project"
    folder.mkdir(parents=True)
    return folder / f"{SID}.jsonl"


def texts(conn: apsw.Connection) -> list[str]:
    return [row[0] for row in conn.execute("SELECT text FROM messages ORDER BY id")]


def offset(conn: apsw.Connection) -> int:
    state = sessions.session_state(conn, SID)
    return state.byte_offset if state else 0


def append(path: Path, data: str | bytes) -> None:
    with open(path, "ab") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def test_captures_complete_lines_and_commits_offset(conn: apsw.Connection, transcript: Path) -> None:
    append(transcript, user_line("first", session_id=SID) + assistant_line("reply", session_id=SID))
    result = Tailer(conn).tail(transcript)
    assert [c.text for c in result.captured] == ["first", "reply"]
    assert texts(conn) == ["first", "reply"]
    assert offset(conn) == transcript.stat().st_size
    assert Tailer(conn).tail(transcript).captured == []  # nothing new, nothing doubled


def test_partial_last_line_waits_for_the_rest(conn: apsw.Connection, transcript: Path) -> None:
    line = user_line("complete me", session_id=SID)
    append(transcript, user_line("one", session_id=SID) + line[:25])
    tailer = Tailer(conn)
    tailer.tail(transcript)
    assert texts(conn) == ["one"]
    assert offset(conn) == transcript.stat().st_size - 25
    append(transcript, line[25:])
    tailer.tail(transcript)
    assert texts(conn) == ["one", "complete me"]


def test_assistant_parts_sharing_message_id_merge_into_one_row(conn: apsw.Connection, transcript: Path) -> None:
    tailer = Tailer(conn)
    append(transcript, user_line("go", session_id=SID))
    append(transcript, assistant_line("Let me look.", session_id=SID, message_id="msg_A"))
    tailer.tail(transcript)  # the message arrives over several writes and tail calls
    append(transcript, assistant_line([{"type": "tool_use", "name": "Read", "input": {"file_path": "/a.py"}}],
                                      session_id=SID, message_id="msg_A"))
    append(transcript, user_line([{"type": "tool_result", "tool_use_id": "x", "content": "..."}], session_id=SID))
    append(transcript, assistant_line("Done.", session_id=SID, message_id="msg_A"))
    tailer.tail(transcript)
    assert texts(conn) == ["go", "Let me look.\n[tool: Read /a.py]\nDone."]


def test_truncated_file_restarts_from_zero_without_duplicates(conn: apsw.Connection, transcript: Path) -> None:
    a, b = user_line("alpha", session_id=SID), user_line("beta", session_id=SID)
    append(transcript, a + b)
    tailer = Tailer(conn)
    tailer.tail(transcript)
    with open(transcript, "wb") as f:  # truncated, then rewritten with one old and one new line
        f.write(a.encode())
    result = tailer.tail(transcript)
    assert result.captured == [] and offset(conn) == len(a.encode())
    append(transcript, user_line("gamma", session_id=SID))
    tailer.tail(transcript)
    assert texts(conn) == ["alpha", "beta", "gamma"]


def test_replaced_file_with_new_inode_is_reread(conn: apsw.Connection, transcript: Path) -> None:
    a = user_line("alpha", session_id=SID)
    append(transcript, a)
    tailer = Tailer(conn)
    tailer.tail(transcript)
    replacement = transcript.with_suffix(".new")
    replacement.write_text(a + user_line("beta", session_id=SID) + user_line("gamma", session_id=SID))
    os.replace(replacement, transcript)
    tailer.tail(transcript)
    assert texts(conn) == ["alpha", "beta", "gamma"]


def test_rewritten_in_place_before_offset_is_reread(conn: apsw.Connection, transcript: Path) -> None:
    tailer = Tailer(conn)
    append(transcript, user_line("original", session_id=SID, uid="u-orig"))
    tailer.tail(transcript)
    with open(transcript, "r+b") as f:  # same inode, same size or larger, different bytes
        f.write((user_line("rewritten!", session_id=SID, uid="u-new") * 2).encode())
    tailer.tail(transcript)
    assert texts(conn) == ["original", "rewritten!"]


def test_huge_single_line_is_skipped_and_the_rest_captured(
    conn: apsw.Connection, transcript: Path, caplog: pytest.LogCaptureFixture
) -> None:
    huge = user_line("x" * (50 * 1024 * 1024), session_id=SID)
    append(transcript, user_line("before", session_id=SID) + huge + user_line("after", session_id=SID))
    with caplog.at_level(logging.WARNING):
        result = Tailer(conn, max_line_bytes=16 * 1024 * 1024).tail(transcript)
    assert texts(conn) == ["before", "after"]
    assert result.problems == 1
    assert "over max_line_bytes" in caplog.text


def test_bad_lines_are_logged_and_the_rest_captured(
    conn: apsw.Connection, transcript: Path, caplog: pytest.LogCaptureFixture
) -> None:
    append(transcript, user_line("one", session_id=SID))
    append(transcript, b"{not json at all\n")
    append(transcript, b'["a", "list"]\n')
    append(transcript, b"\x00\x00\x00" + user_line("two", session_id=SID).encode())
    append(transcript, user_line("three", session_id=SID).encode().replace(b"three", b"thr\xffee"))
    append(transcript, b'{"type": "user", "uuid": "w", "message": {"content": 12}}\n')
    append(transcript, b'{"type": "mystery", "uuid": "m"}\n')
    append(transcript, user_line("four", session_id=SID))
    with caplog.at_level(logging.WARNING):
        result = Tailer(conn).tail(transcript)
    assert texts(conn) == ["one", "two", "thr\ufffdee", "four"]
    assert result.problems == 3
    assert "invalid JSON" in caplog.text and "not an object" in caplog.text


def test_file_deleted_while_tailed_keeps_what_was_captured(
    conn: apsw.Connection, transcript: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tailer = Tailer(conn)
    append(transcript, user_line("kept", session_id=SID))
    tailer.tail(transcript)
    transcript.unlink()
    with caplog.at_level(logging.INFO):
        assert tailer.tail(transcript).captured == []
    assert texts(conn) == ["kept"]
    assert "gone" in caplog.text


def test_vanished_directory_is_not_fatal(conn: apsw.Connection, transcript: Path) -> None:
    append(transcript, user_line("kept", session_id=SID))
    Tailer(conn).tail(transcript)
    for p in transcript.parent.iterdir():
        p.unlink()
    transcript.parent.rmdir()
    assert Tailer(conn).tail(transcript).captured == []
    assert texts(conn) == ["kept"]


UNREADABLE_CHILD = """
import logging, pathlib, sys
logging.basicConfig(level=logging.WARNING)
from processor.capture.tailer import Tailer
from processor.store import open_store
tailer = Tailer(open_store(pathlib.Path(sys.argv[1])))
print(sum(len(tailer.tail(pathlib.Path(sys.argv[2])).captured) for _ in range(2)))
"""


def test_unreadable_file_is_logged_once_and_skipped(tmp_path: Path, transcript: Path) -> None:
    append(transcript, user_line("secret", session_id=SID))
    transcript.chmod(0)
    command = [sys.executable, "-c", UNREADABLE_CHILD, str(tmp_path / "child.db"), str(transcript)]
    if os.geteuid() == 0:
        # Root reads any file; without CAP_DAC_OVERRIDE/READ_SEARCH it obeys permissions like a user.
        if not shutil.which("setpriv"):
            pytest.skip("running as root and setpriv (util-linux) is not installed to drop DAC override")
        command = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *command]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"
    assert proc.stderr.count("cannot open transcript") == 1, proc.stderr
    assert "check its permissions" in proc.stderr
    transcript.chmod(0o644)  # readable again: the same store captures it on the next event
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout.strip() == "1", proc.stderr


def test_database_locked_longer_than_busy_timeout_is_retried_not_dropped(
    tmp_path: Path, transcript: Path
) -> None:
    db = tmp_path / "locked.db"
    open_store(db).close()
    append(transcript, user_line("must survive", session_id=SID))
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import apsw, sys, time\n"
         f"c = apsw.Connection({str(db)!r}); c.execute('BEGIN EXCLUSIVE')\n"
         "print('locked', flush=True); time.sleep(6.5); c.execute('COMMIT')\n"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        conn = open_store(db)
        started = time.monotonic()
        with pytest.raises(apsw.BusyError):
            Tailer(conn).tail(transcript)
        assert time.monotonic() - started >= 4.5  # waited the busy timeout before giving up
        assert offset(conn) == 0  # the offset did not move past uncaptured lines
    finally:
        holder.wait(timeout=30)
    Tailer(conn).tail(transcript)  # the retry after the lock is gone captures everything
    assert texts(conn) == ["must survive"]
    conn.close()


def test_backlog_over_batch_bytes_with_a_50_mb_line_keeps_offset_in_step(
    conn: apsw.Connection, transcript: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Several 4 MB batches in one pass: hashing each batch's window must not move the reader.
    rounds = []
    while sum(map(len, rounds)) < 10 * 1024 * 1024:
        i = len(rounds)
        rounds.append(user_line(f"question {i} " + "q" * 2000, session_id=SID, uid=f"u{i}")
                      + assistant_line(f"answer {i} " + "a" * 3000, session_id=SID, uid=f"a{i}",
                                       message_id=f"msg_{i}"))
    huge = user_line("x" * (50 * 1024 * 1024), session_id=SID, uid="huge")
    append(transcript, "".join(rounds[: len(rounds) // 2]) + huge + "".join(rounds[len(rounds) // 2:]))
    tailer = Tailer(conn)  # the defaults: 4 MB batches, 16 MB line limit
    with caplog.at_level(logging.WARNING):
        first = tailer.tail(transcript)
        for _ in range(5):  # rescans: nothing new, nothing re-read, nothing re-warned
            assert tailer.tail(transcript).lines == 0
    size = transcript.stat().st_size
    assert offset(conn) == size
    assert first.problems == 1
    stored = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert stored == 2 * len(rounds)
    assert caplog.text.count("over max_line_bytes") == 1
    assert "invalid JSON" not in caplog.text
    assert [p["kind"] for p in tailer.problems.current()] == ["long_line"]
    append(transcript, user_line("one more", session_id=SID, uid="late"))
    assert tailer.tail(transcript).lines == 1  # the append is read from the old end, not from byte 0
    assert offset(conn) == transcript.stat().st_size


def test_fifo_named_jsonl_is_skipped_without_opening_it(
    conn: apsw.Connection, transcript: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fifo = transcript.parent / "dddddddd-0000-0000-0000-000000000004.jsonl"
    os.mkfifo(fifo)
    tailer = Tailer(conn)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert tailer.tail(fifo).lines == 0  # would block forever in open() without the stat check
    assert time.monotonic() - started < 5
    assert caplog.text.count("named pipe") == 1
    append(transcript, user_line("still captured", session_id=SID))
    tailer.tail(transcript)
    assert texts(conn) == ["still captured"]
