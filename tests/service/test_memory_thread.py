"""The memory thread's backlog stays bounded: newest recollection per session wins, one build per session,
huge pastes are embedded by their head, and a long episode build serves new user messages between slices."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from processor.capture.captured import CapturedLine
from processor.memory.verbatim import MESSAGE_HEAD_PIECES, round_pieces
from processor.service.memory_thread import BuildEpisodes, FinalizeIdle, MemoryThread, PendingWork, Recollect
from processor.store.episodes import StoredMessage
from tests.support.jobs_fixtures import add_messages, conversation, make_settings, query


def line(uuid: str, text: str = "what did we decide about the cache") -> CapturedLine:
    return CapturedLine(uuid=uuid, session_id="s", parent_uuid=None, role="user", timestamp=None,
                        ts_ms=int(time.time() * 1000), cwd=None, git_branch=None, text=text, api_message_id=None)


def test_the_newest_user_message_of_a_session_wins_and_builds_coalesce() -> None:
    pending = PendingWork(max_sessions=100)
    for i in range(1000):
        pending.put(Recollect("s1", line(f"u{i}")))
        pending.put(BuildEpisodes("s1"))
    pending.put(Recollect("s2", line("v1")))
    pending.put(FinalizeIdle())
    assert len(pending) == 4
    work = pending.take()
    assert [type(w).__name__ for w in work] == ["Recollect", "Recollect", "BuildEpisodes", "FinalizeIdle"]
    assert {w.line.uuid for w in work if isinstance(w, Recollect)} == {"u999", "v1"}
    assert pending.coalesced == 999 * 2 and len(pending) == 0


def test_one_session_never_has_more_than_a_recollection_and_a_build_waiting() -> None:
    pending = PendingWork(max_sessions=100)
    assert pending.most_for_one_session(building=[]) == 0
    for i in range(500):
        pending.put(Recollect("s1", line(f"u{i}")))
        pending.put(BuildEpisodes("s1"))
        pending.put(BuildEpisodes("s2"))
    pending.put(FinalizeIdle())
    # s1's build is also in progress: still one build for it.
    assert pending.most_for_one_session(building=["s1", "s3"]) == 2
    pending.take()
    assert pending.most_for_one_session(building=["s1"]) == 1


def test_past_the_bound_requests_are_dropped_counted_and_logged_once(caplog) -> None:
    pending = PendingWork(max_sessions=3)
    for i in range(10):
        pending.put(Recollect(f"s{i}", line(f"u{i}")))
    assert len(pending) == 3 and pending.dropped == 7
    assert sum("dropped" in r.getMessage() for r in caplog.records) == 1


def test_a_megabyte_paste_becomes_one_note_not_thousands_of_episodes() -> None:
    paste = "2026-11-23 08:00:00 INFO request served in 12 ms\n" * 21_000  # about 1 MB
    messages = [StoredMessage(1, "u1", "user", "Why is this slow?\n" + paste, 1),
                StoredMessage(2, "a1", "assistant", "The cache is cold after each deploy.", 2)]
    pieces = round_pieces(messages, 500)
    assert len(pieces) == 1
    assert "Why is this slow?" in pieces[0].full_content
    assert "[pasted output, 21,000 lines" in pieces[0].full_content
    assert "The cache is cold" in pieces[0].full_content


def test_a_megabyte_reply_becomes_a_few_episodes_not_thousands() -> None:
    reply = "The request was served from the warm cache in twelve milliseconds. " * 15_000  # about 1 MB
    messages = [StoredMessage(1, "u1", "user", "Why is this slow?", 1),
                StoredMessage(2, "a1", "assistant", reply + "\nThe cache is cold after each deploy.", 2)]
    pieces = round_pieces(messages, 500)
    assert len(pieces) <= MESSAGE_HEAD_PIECES + 2
    assert "whole message is kept" in pieces[-1].full_content


def test_a_long_episode_build_serves_new_user_messages_between_slices(engram_home: Path) -> None:
    settings = make_settings()
    add_messages(settings, "big", conversation(120), activity_ms=int(time.time() * 1000))
    built_when_served: list[int] = []
    serving: list[bool] = []

    def recollect(store, sid, ln) -> None:
        serving.append(memory.serving_user())  # what the job worker sees meanwhile: make way
        built_when_served.append(store.status()["episodes"])

    memory = MemoryThread(settings, recollect=recollect)
    assert not memory.serving_user()
    memory.start()
    try:
        memory.submit(BuildEpisodes("big"))
        deadline = time.monotonic() + 60
        while memory.busy_with != "episodes" and time.monotonic() < deadline:
            time.sleep(0.01)
        memory.submit(Recollect("other", line("now")))
        assert memory.serving_user() or built_when_served  # waiting, or already served
        while not built_when_served and time.monotonic() < deadline:
            time.sleep(0.01)
        # Served while the session's 119 complete rounds were still being turned into episodes.
        assert built_when_served and built_when_served[0] < 119
        while memory.backlog and time.monotonic() < deadline:
            time.sleep(0.05)
        assert serving == [True] and not memory.serving_user()  # building episodes is not the hot path
    finally:
        memory.stop()
    assert query(settings, "SELECT count(*) FROM episodes")[0][0] == 119
    assert memory.pending.peak <= 2


def test_a_request_before_the_store_is_open_waits_for_it_and_one_after_stop_fails_at_once(engram_home: Path) -> None:
    """The control plane listens before the memory thread has opened the store: a /recall in that instant waits
    for it (it was an HTTP 500 on a busy machine); once the thread is stopping, a request fails without waiting."""
    import threading

    from processor.memory.errors import EmbedderError

    memory = MemoryThread(make_settings())
    got: list[object] = []
    waiting = threading.Thread(target=lambda: got.append(memory.main_store()))
    waiting.start()
    time.sleep(0.2)
    assert not got  # still waiting for the store
    store = memory.open()
    waiting.join(timeout=10)
    assert got == [store]
    memory.close()
    memory._stop.set()  # what stop() does first
    started = time.monotonic()
    with pytest.raises(EmbedderError, match="not running"):
        memory.main_store()
    assert time.monotonic() - started < 1


def _episodes_when_built(settings, memory: MemoryThread, expected: int, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        count = query(settings, "SELECT count(*) FROM episodes")[0][0]
        if count >= expected:
            return count
        time.sleep(0.05)
    return query(settings, "SELECT count(*) FROM episodes")[0][0]


def test_a_settling_turn_end_counts_once_it_stood_and_not_when_the_session_went_on(engram_home: Path) -> None:
    """A Gemini answer that asked for no tool call ends its turn once `settle` seconds passed with nothing newer:
    the complete rounds are built at once, the last one when the end settled; a newer line in the meantime (the
    message written again with its tool calls) means the turn went on, and its last round waits."""
    settings = make_settings()
    memory = MemoryThread(settings)
    memory.start()
    try:
        # The start's own requests (a sweep at least) done first: they would coalesce with these.
        deadline = time.monotonic() + 60
        while (not memory.pending.peak or memory.backlog or memory.busy_with) and time.monotonic() < deadline:
            time.sleep(0.05)
        now = int(time.time() * 1000)
        add_messages(settings, "settles", conversation(3), activity_ms=now)
        add_messages(settings, "goes-on", conversation(3, topic="the deploy"), activity_ms=now)
        memory.submit(BuildEpisodes("settles", final=True, settle=1.5))
        memory.submit(BuildEpisodes("goes-on", final=True, settle=1.5))
        assert _episodes_when_built(settings, memory, 4) == 4  # two complete rounds each, at once
        started = time.monotonic()
        memory.submit(BuildEpisodes("goes-on"))  # its turn went on before the end settled
        assert _episodes_when_built(settings, memory, 5) == 5
        waited = time.monotonic() - started
        time.sleep(2.0)
        rows = query(settings, "SELECT session_id, count(*) FROM episodes GROUP BY session_id ORDER BY 1")
    finally:
        memory.stop()
    assert rows == [("goes-on", 2), ("settles", 3)]
    assert waited < 10


def test_a_turn_that_ended_before_a_crash_has_its_last_round_built_at_start(engram_home: Path) -> None:
    """The request to build a finished turn's last round lives in memory: a processor killed before it ran builds
    that round when it starts again (the tailer kept that the turn ended with the lines), not at the idle sweep."""
    from processor.store import open_store, sessions, write_transaction

    settings = make_settings()
    now = int(time.time() * 1000)
    add_messages(settings, "ended", conversation(3), activity_ms=now)
    add_messages(settings, "going-on", conversation(3, topic="the deploy"), activity_ms=now)
    conn = open_store(settings.db_path)
    with write_transaction(conn):
        sessions.set_turn_ended(conn, "ended", True)
    conn.close()
    memory = MemoryThread(settings)
    memory.start()
    try:
        deadline = time.monotonic() + 60
        while query(settings, "SELECT count(*) FROM episodes")[0][0] < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        rows = query(settings, "SELECT session_id, count(*) FROM episodes GROUP BY session_id ORDER BY 1")
    finally:
        memory.stop()
    assert rows == [("ended", 3), ("going-on", 2)]


def test_a_gemini_turn_whose_cli_is_gone_is_built_at_the_next_sweep_not_at_idle(engram_home: Path,
                                                                                  tmp_path: Path) -> None:
    """The Gemini CLI marks no end of a turn whose tool call never came back (the CLI killed mid-call): once no
    `gemini` process runs in the session's folder, its last round is built at the next sweep (each rescan), not
    after idle_minutes; a session whose CLI still runs there waits."""
    import subprocess
    import sys

    from processor.store import open_store, write_transaction

    settings = make_settings()
    gone_repo, live_repo = tmp_path / "gone", tmp_path / "live"
    gone_repo.mkdir()
    live_repo.mkdir()
    cli = tmp_path / "bin" / "gemini"
    cli.parent.mkdir()
    cli.write_text("import time\ntime.sleep(120)\n")
    running = subprocess.Popen([sys.executable, str(cli)], cwd=live_repo)
    ten_seconds_ago = int(time.time() * 1000) - 10_000
    for session_id in ("killed", "running"):
        add_messages(settings, session_id, conversation(3), activity_ms=ten_seconds_ago)
    conn = open_store(settings.db_path)
    with write_transaction(conn):
        for session_id, repo in (("killed", gone_repo), ("running", live_repo)):
            conn.execute("UPDATE sessions SET agent = 'gemini', project_root = ? WHERE session_id = ?",
                         (str(repo), session_id))
    conn.close()
    memory = MemoryThread(settings)
    memory.start()
    try:
        # The complete rounds at start, and the sweep the start runs: the killed session's last round too.
        assert _episodes_when_built(settings, memory, 5) == 5
        memory.submit(FinalizeIdle())  # a later sweep: the running CLI's session still waits
        time.sleep(1.5)
        rows = query(settings, "SELECT session_id, count(*) FROM episodes GROUP BY session_id ORDER BY 1")
    finally:
        memory.stop()
        running.kill()
        running.wait()
    assert rows == [("killed", 3), ("running", 2)]
