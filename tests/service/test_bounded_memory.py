"""The processor's memory stays flat: sessions that went idle and queries that were answered leave nothing
behind. A real Processor (its memory thread, recollection writer and job worker wired as `engram run` wires
them), a real database and model, and the real control plane for the queries."""

from __future__ import annotations

import gc
import json
import sys
import threading
import time
import tracemalloc
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from processor.capture.captured import CapturedLine
from processor.config import Settings
from processor.lifecycle import _recall_route
from processor.memory import gguf_convert
from processor.service.control_client import request
from processor.service.control_server import ControlServer
from processor.service.memory_thread import READERS, FinalizeIdle
from processor.service.pidfile import PidFile
from processor.service.run_loop import Processor
from processor.store import open_store, write_transaction
from processor.store.sessions import index_new_messages
from tests.support.jobs_fixtures import make_settings

IDLE_MINUTES = 0.002  # 120 ms: a session quiet this long is idle
REPO = Path(__file__).resolve().parents[2]


def store_session(settings: Settings, session_id: str, text: str) -> CapturedLine:
    """One round as capture stores it (a user message and its answer); returns the user line."""
    now = int(time.time() * 1000)
    user_uuid = str(uuidlib.uuid4())
    conn = open_store(settings.db_path)
    try:
        with write_transaction(conn):
            conn.execute(
                "INSERT INTO sessions (session_id, transcript_path, project, project_root, last_activity, created_at, "
                "updated_at) VALUES (?, ?, 'demo', '/src/demo', ?, ?, ?)",
                (session_id, f"/nowhere/{session_id}.jsonl", now, now, now))
            ids = []
            for i, (uid, role, body) in enumerate([(user_uuid, "user", text),
                                                   (str(uuidlib.uuid4()), "assistant", f"Done: {text.lower()}")]):
                conn.execute("INSERT INTO messages (uuid, session_id, role, text, ts_ms, line_offset) "
                             "VALUES (?, ?, ?, ?, ?, ?)", (uid, session_id, role, body, now + i, i))
                ids.append(conn.last_insert_rowid())
            index_new_messages(conn, ids)
    finally:
        conn.close()
    return CapturedLine(uuid=user_uuid, session_id=session_id, parent_uuid=None, role="user", timestamp=None,
                        ts_ms=now, cwd="/src/demo", git_branch=None, text=text, api_message_id=None)


def wait_until_idle(processor: Processor, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while processor.memory.backlog or processor.memory.busy_with:
        assert time.monotonic() < deadline, f"memory thread still busy: {processor.memory.backlog} waiting"
        time.sleep(0.02)


def sessions_come_and_go(processor: Processor, count: int, prefix: str) -> None:
    """`count` sessions each write a round (a user message, as capture hands it over), then all go quiet and
    the idle sweep runs, as the processor's periodic rescan asks for it."""
    settings = processor.settings
    for n in range(count):
        session_id = f"{prefix}-{n:04d}"
        line = store_session(settings, session_id, f"How should session {n} of {prefix} handle the cache and retries?")
        processor._on_captured(session_id, [line])
    wait_until_idle(processor)
    time.sleep(IDLE_MINUTES * 60 * 2)
    processor.memory.submit(FinalizeIdle())
    wait_until_idle(processor)


@pytest.fixture
def processor(engram_home: Path) -> Iterator[Processor]:
    settings = make_settings(idle_minutes=IDLE_MINUTES, recollection_idle_hours=24.0)
    processor = Processor(settings)
    processor.memory.start()
    processor.jobs.start()
    deadline = time.monotonic() + 120
    while processor.memory.store is None or processor.memory.busy_with is not None or processor.memory.backlog:
        assert time.monotonic() < deadline, "the memory thread did not start"
        time.sleep(0.02)
    processor.memory.store.index  # noqa: B018 - the model and the vectors are loaded before anything is measured
    yield processor
    processor.stop_event.set()
    processor.jobs.stop()
    processor.memory.stop()


def clear_bounded_caches() -> None:
    """Empty the memoised functions of Engram's modules (each bounded by its maxsize, so what they hold is not
    growth), and fail for one without a bound that holds more than a single answer."""
    for name, module in list(sys.modules.items()):
        if not name.startswith(("processor", "mcp_tools")):
            continue
        for value in list(vars(module).values()):
            parameters = getattr(value, "cache_parameters", None)
            if parameters is None:
                continue
            assert parameters()["maxsize"] is not None or value.cache_info().currsize <= 1, (
                f"{name}.{value.__name__} memoises without a bound")
            value.cache_clear()


def retained_by_engram(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot) -> tuple[int, list[str]]:
    """Bytes Engram's own code allocated between two snapshots and still holds, and the top lines.

    The vectors of the memories stored meanwhile are data the store is meant to hold, not state kept
    per session: the vector index's growth is left out."""
    filters = [tracemalloc.Filter(True, str(REPO / "processor" / "*")),
               tracemalloc.Filter(False, str(REPO / "processor" / "memory" / "search.py"))]
    diff = after.filter_traces(filters).compare_to(before.filter_traces(filters), "lineno")
    grown = [stat for stat in diff if stat.size_diff > 0]
    return sum(stat.size_diff for stat in grown), [str(stat) for stat in grown[:8]]


def test_a_thousand_idle_sessions_leave_nothing_behind_when_one_is_active(processor: Processor) -> None:
    # Traced from before the warm-up, which fills every pool meant to exist: what a pool swaps later nets out.
    tracemalloc.start()
    try:
        sessions_come_and_go(processor, 20, "warm")
        clear_bounded_caches()
        gc.collect()
        before = tracemalloc.take_snapshot()
        sessions_come_and_go(processor, 1000, "idle")
        active = store_session(processor.settings, "active-0001", "Which retry budget did we pick for the cache?")
        processor._on_captured("active-0001", [active])
        wait_until_idle(processor)
        clear_bounded_caches()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    # The memories were made: the sessions did go through the whole path.
    assert processor.memory.store is not None and processor.memory.store.status()["episodes"] >= 1020
    # What each part keeps per session: only the active one's topic, no waiting work.
    assert processor.recollections.sessions_in_memory == 1
    assert len(processor.memory.pending) == 0 and processor.memory.backlog == 0
    # Whatever else holds on to a session, 1,000 of them show: less than 40 bytes each may stay.
    retained, top = retained_by_engram(before, after)
    assert retained < 40 * 1000, f"{retained} bytes kept after 1,000 sessions went idle: {top}"


def test_answered_queries_leave_nothing_behind(processor: Processor, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with PidFile(run_dir):
        control = ControlServer(run_dir, port=0, routes={("POST", "/recall"): _recall_route(processor)})
        control.start()
        try:
            def burst(n: int) -> None:
                # Every connection is served by a thread of its own, as a burst of hooks and CLIs would be.
                errors: list[str] = []

                def one(i: int) -> None:
                    try:
                        # Half ask as memory_recall does, half as the UserPromptSubmit hook does (the bites' bar).
                        answer = request(run_dir, "POST", "/recall", {"query": f"cache retries {i}", "limit": 3,
                                                                      "unasked": i % 2 == 0}, timeout=60)
                        json.dumps(answer)
                    except Exception as exc:  # noqa: BLE001 - collected and reported below
                        errors.append(repr(exc))

                threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(timeout=120)
                assert not errors, errors[:3]

            sessions_come_and_go(processor, 5, "data")
            opened: list[int] = []
            open_reader = processor.memory._open_reader

            def counted_open_reader():  # the stores the requests open, counted
                opened.append(1)
                return open_reader()

            processor.memory._open_reader = counted_open_reader
            tracemalloc.start()
            try:
                burst(40)
                clear_bounded_caches()
                gc.collect()
                before = tracemalloc.take_snapshot()
                for _ in range(5):
                    burst(40)
                clear_bounded_caches()
                gc.collect()
                after = tracemalloc.take_snapshot()
            finally:
                tracemalloc.stop()
        finally:
            control.stop()
    # Request threads borrow stores (a connection each) from a pool of a few: a burst does not open one each.
    assert processor.memory.idle_readers <= READERS
    # Both kinds of /recall borrow: 200 requests open a few stores (more only when one waited 5 s for the
    # pool), never one each.
    assert len(opened) < 40, f"{len(opened)} stores opened for 200 requests"
    retained, top = retained_by_engram(before, after)
    assert retained < 40 * 200, f"{retained} bytes kept after 200 answered queries: {top}"


def test_a_first_start_converts_the_model_once_and_its_peak_stays_bounded(
        engram_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug (issue 26): on a first start the model is converted from its package, and every thread that wanted it
    before it was there (the memory thread, each control-plane /recall, the MCP tools) converted it at once, each
    holding the 90 MB checkpoint and its tensors: RSS peaked at 845 MB under load, between two samples. Now the
    threads wait for one conversion, which streams the checkpoint a tensor at a time."""
    settings = make_settings(models_dir=tmp_path / "fresh-models")
    conversions: list[Path] = []
    convert = gguf_convert.convert_minilm

    def counted(model_zip: Path, dest: Path) -> Path:  # the real conversion, counted
        conversions.append(dest)
        return convert(model_zip, dest)

    monkeypatch.setattr(gguf_convert, "convert_minilm", counted)
    processor = Processor(settings)
    answered: list[int] = []
    start = threading.Barrier(7)

    def recall() -> None:  # as the control plane's request threads ask while the processor starts
        start.wait(timeout=30)
        answered.append(len(processor.recall_for_http("which retry budget for the cache", limit=3, project=None)))

    tracemalloc.start()
    try:
        readers = [threading.Thread(target=recall) for _ in range(6)]
        for thread in readers:
            thread.start()
        processor.memory.start()
        deadline = time.monotonic() + 60
        while processor.memory.store is None:
            assert time.monotonic() < deadline, "the memory thread did not start"
            time.sleep(0.001)
        start.wait(timeout=30)
        for thread in readers:
            thread.join(timeout=120)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        processor.memory.stop()
        embedder = processor.memory.store.loaded_embedder if processor.memory.store else None
        if embedder is not None:
            embedder.close()
    assert len(answered) == 6
    assert len(conversions) == 1, f"the model was converted {len(conversions)} times"
    # One conversion holds one tensor (47 MB of word embeddings) at a time; before, one held the checkpoint
    # twice over (about 190 MB traced), and each racing thread held its own.
    assert peak < 90 * 2**20, f"{peak / 2**20:.0f} MB traced while the model was converted and loaded"
