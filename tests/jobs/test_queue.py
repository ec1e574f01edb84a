"""The durable single-worker queue: dedupe, priorities, any job type, one at a time, retry, breaker, kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from processor.capture.remember_inbox import RememberRequest, write_remember_file
from processor.jobs import JobRejected, JobRunner, WorkerBusy, format_jobs_status, jobs_status, queue
from processor.jobs.backends import BackendError, LLMRequest
from processor.jobs.backends.mock_backend import MockBackend
from processor.jobs.base import JobType
from processor.store import jobs as sql
from processor.store import open_store, write_transaction
from tests.support.fake_openai_server import FakeOpenAI
from tests.support.jobs_fixtures import add_messages, conversation, drain, make_settings, now_ms, query

REPO = Path(__file__).resolve().parents[2]


def _request(prompt: str = "hello") -> LLMRequest:
    return LLMRequest(system="s", prompt=prompt, schema={"type": "object"}, schema_name="t", max_output_tokens=10,
                      timeout=5)


def test_dedupe_key_is_unique_only_while_pending_or_running(engram_home: Path) -> None:
    settings = make_settings()
    conn = open_store(settings.db_path)
    with write_transaction(conn):
        first = sql.insert_job(conn, "extract", "extract:s1", 0, {"session_id": "s1"}, now_ms())
        again = sql.insert_job(conn, "extract", "extract:s1", 0, {"session_id": "s1"}, now_ms())
        other = sql.insert_job(conn, "extract", "extract:s2", 0, {"session_id": "s2"}, now_ms())
    assert first is not None and again is None and other is not None
    with write_transaction(conn):
        claimed = sql.claim_next_job(conn, ["extract"], now_ms(), os.getpid())
        assert claimed is not None and claimed.id == first
        assert sql.insert_job(conn, "extract", "extract:s1", 0, {}, now_ms()) is None  # running holds the key
        sql.finish_job(conn, first, now_ms())
        assert sql.insert_job(conn, "extract", "extract:s1", 0, {}, now_ms()) is not None  # done frees it
    conn.close()


def test_any_registered_type_runs_in_priority_then_fifo_order(engram_home: Path) -> None:
    settings = make_settings()
    runner = JobRunner(settings, backend=None)
    order: list[str] = []
    for name, priority in (("inquisitor", 3), ("curator", 1), ("context-check", 2)):
        runner.register(name, lambda ctx, job: order.append(job.payload["tag"]), priority, uses_llm=False)
    runner.enqueue("inquisitor", "i1", {"tag": "inquisitor-1"})
    runner.enqueue("curator", "c1", {"tag": "curator-1"})
    runner.enqueue("context-check", "x1", {"tag": "context-1"})
    runner.enqueue("curator", "c2", {"tag": "curator-2"})
    assert runner.enqueue("curator", "c2", {"tag": "curator-2-again"}) is None
    with pytest.raises(KeyError, match="register"):
        runner.enqueue("unknown-type", "u", {})
    drain(runner)
    runner.close()
    assert order == ["curator-1", "curator-2", "context-1", "inquisitor-1"]


def test_never_two_llm_calls_at_once_with_concurrent_submitters(engram_home: Path) -> None:
    """Eight threads submit jobs and capture events while the worker runs; plus direct concurrent callers."""
    settings = make_settings()
    backend = MockBackend(delay=0.02)
    runner = JobRunner(settings, backend=backend)
    runner.register("think", lambda ctx, job: ctx.call_llm(_request(job.dedupe_key), str), 2, uses_llm=True)
    runner.start()
    with pytest.raises(WorkerBusy):
        JobRunner(settings, backend=backend).start()  # exactly one worker per process

    def submit(n: int) -> None:
        for i in range(5):
            runner.enqueue("think", f"t{n}-{i}", {})
            runner.on_messages_captured(f"s{n}")

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    deadline = time.monotonic() + 20
    while query(settings, "SELECT count(*) FROM jobs WHERE state != 'done'")[0][0] and time.monotonic() < deadline:
        time.sleep(0.05)
    runner.stop()
    assert query(settings, "SELECT count(*) FROM jobs WHERE type = 'think' AND state = 'done'")[0][0] == 40
    assert backend.max_in_flight == 1

    # Callers outside the worker thread go through the same process-wide lock.
    direct = JobRunner(settings, backend=backend)
    direct.open()
    callers = [threading.Thread(target=lambda: direct.call_llm(None, _request(), str)) for _ in range(6)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    direct.close()
    assert len(backend.requests) == 46 and backend.max_in_flight == 1


def test_failures_retry_with_exponential_backoff_and_are_never_dropped(engram_home: Path) -> None:
    settings = make_settings(retry_base_seconds=0.1, retry_max_seconds=0.3)
    runner = JobRunner(settings, backend=None)
    seen: list[int] = []

    def flaky(ctx, job) -> None:
        seen.append(job.attempts)
        if job.attempts < 3:
            raise RuntimeError(f"transient failure number {job.attempts + 1}")

    runner.register("flaky", flaky, 1, uses_llm=False)
    job_id = runner.enqueue("flaky", "f", {})
    runner.open()
    runner.run_until_idle()
    row = query(settings, "SELECT state, attempts, next_attempt_at - updated_at, last_error FROM jobs WHERE id = ?",
                (job_id,))[0]
    assert row[0] == "pending" and row[1] == 1 and 60 <= row[2] <= 105
    assert "transient failure number 1" in row[3]
    time.sleep(0.12)
    runner.run_until_idle()
    row = query(settings, "SELECT attempts, next_attempt_at - updated_at FROM jobs WHERE id = ?", (job_id,))[0]
    assert row[0] == 2 and 160 <= row[1] <= 205  # doubled
    time.sleep(0.22)
    runner.run_until_idle()
    row = query(settings, "SELECT attempts, next_attempt_at - updated_at FROM jobs WHERE id = ?", (job_id,))[0]
    assert row[0] == 3 and 260 <= row[1] <= 305  # capped at retry_max_seconds
    drain(runner)
    runner.close()
    assert seen == [0, 1, 2, 3]
    assert query(settings, "SELECT state FROM jobs WHERE id = ?", (job_id,))[0][0] == "done"


def test_a_malformed_job_is_kept_as_failed_and_shown(engram_home: Path) -> None:
    settings = make_settings()
    runner = JobRunner(settings, backend=MockBackend())
    runner.enqueue("extract", "extract:?", {"no": "session"})

    def reject(ctx, job) -> None:
        raise JobRejected("payload has no target")

    runner.register("odd", reject, 1, uses_llm=False)
    runner.enqueue("odd", "odd", {})
    drain(runner)
    status = runner.status()
    runner.close()
    assert query(settings, "SELECT type, state FROM jobs ORDER BY id") == [("extract", "failed"), ("odd", "failed")]
    assert status["queue"] == {"extract": {"failed": 1}, "odd": {"failed": 1}}
    assert any("no session_id" in j["last_error"] for j in status["retrying"])


def test_breaker_opens_after_consecutive_failures_pauses_llm_jobs_only_and_closes(engram_home: Path) -> None:
    settings = make_settings(breaker_failures=3, breaker_cooldown_seconds=1.5, retry_base_seconds=0.01,
                             retry_max_seconds=0.01)
    failures = [BackendError("upstream exploded (HTTP 500)", status=500) for _ in range(3)]
    backend = MockBackend(failures)
    runner = JobRunner(settings, backend=backend)
    runner.open()
    runner.store.embedder.embed_query("load the model now, not inside the cool-down")
    add_messages(settings, "s1", conversation(4), activity_ms=now_ms() - 600_000)
    runner.wake()
    for _ in range(3):
        runner.run_until_idle()
        time.sleep(0.02)
    assert len(backend.requests) == 3 and runner.gate.breaker.is_open(now_ms())
    status = jobs_status(runner.conn, settings)
    assert status["breaker"]["state"] == "open" and "exploded" in status["breaker"]["last_error"]
    assert any("circuit breaker: OPEN" in line for line in format_jobs_status(status))

    # While open: no LLM call is attempted, but a remember request is stored.
    write_remember_file(settings.queue_dir, RememberRequest("Always run ruff before committing.", kind="convention"))
    runner.wake()
    time.sleep(0.05)
    runner.run_until_idle()
    assert len(backend.requests) == 3
    assert query(settings, "SELECT source_type FROM episodes") == [("manual",)]
    assert query(settings, "SELECT state FROM jobs WHERE type = 'extract'") == [("pending",)]

    # The breaker survives a restart of the worker.
    reopened = JobRunner(settings, backend=backend)
    reopened.open()
    assert reopened.gate.breaker.is_open(now_ms())
    reopened.close()

    # Cool-down over: the trial call succeeds and closes it.
    time.sleep(max(runner.gate.breaker.open_until_ms - now_ms(), 0) / 1000 + 0.05)
    drain(runner)
    runner.close()
    breaker = runner.gate.breaker
    assert len(backend.requests) == 4 and breaker.failures == 0 and not breaker.is_open(now_ms())
    assert query(settings, "SELECT count(*) FROM episodes WHERE source_type = 'auto'")[0][0] == 1
    assert query(settings, "SELECT ok FROM llm_calls ORDER BY id") == [(0,), (0,), (0,), (1,)]


WORKER_SCRIPT = textwrap.dedent("""
    import sys, threading
    from processor.config import load_settings
    from processor.jobs import JobRunner
    settings = load_settings()
    runner = JobRunner(settings)
    runner.start()
    print("started", flush=True)
    threading.Event().wait(float(sys.argv[1]))
    runner.stop()
""")


def test_worker_killed_mid_job_reruns_it_without_duplicates_or_loss(engram_home: Path, projects_dir: Path) -> None:
    server = FakeOpenAI().start()
    try:
        settings = make_settings(extractor="openai", openai_base_url=server.base_url, llm_timeout_seconds=30)
        add_messages(settings, "s1", conversation(6), activity_ms=now_ms() - 600_000)
        env = {**os.environ, "ENGRAM_EXTRACTOR": "openai", "ENGRAM_OPENAI_BASE_URL": server.base_url,
               "ENGRAM_LLM_TIMEOUT_SECONDS": "30", "ENGRAM_EXTRACT_MIN_MESSAGES": "4",
               "ENGRAM_COLD_PATH": "0"}
        server.default = {"mode": "hang"}  # the first call hangs: the worker is mid-job when killed
        proc = subprocess.Popen([sys.executable, "-c", WORKER_SCRIPT, "60"], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert server.received.wait(30), proc.stderr.read() if proc.poll() is not None else "no call"
        assert query(settings, "SELECT state, owner_pid FROM jobs") == [("running", proc.pid)]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert query(settings, "SELECT count(*) FROM episodes")[0][0] == 0

        server.default = {"mode": "ok"}
        server.release.set()
        restarted = subprocess.Popen([sys.executable, "-c", WORKER_SCRIPT, "60"], cwd=REPO, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 40
        done = "SELECT count(*) FROM jobs WHERE state = 'done'"
        while time.monotonic() < deadline and query(settings, done)[0][0] < 1:
            time.sleep(0.1)
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(10)
    finally:
        server.stop()
    assert query(settings, "SELECT state, attempts FROM jobs") == [("done", 0)]
    assert query(settings, "SELECT count(*) FROM episodes WHERE source_type = 'auto'")[0][0] == 1
    assert query(settings, "SELECT extracted_through FROM extraction_state")[0][0] == \
        query(settings, "SELECT max(id) FROM messages")[0][0]
    assert query(settings, "SELECT count(*) FROM messages")[0][0] == 12
    assert len(server.calls) == 2  # the killed call and its rerun


def test_a_capture_asks_only_the_job_types_that_depend_on_the_captured_sessions(engram_home: Path) -> None:
    """Captures come with every user message, while its recollection is computed: a type whose check scans
    the whole store (sweeps, the inquisitor) is asked on periodic sweeps and pokes only."""
    asked: list[tuple[str, frozenset[str] | None]] = []

    def due(name: str):
        return lambda check: asked.append((name, check.sessions)) or []

    types = [JobType("per-session", lambda ctx, job: None, 0, False, due("per-session"), asked_on_capture=True),
             JobType("whole-store", lambda ctx, job: None, 1, False, due("whole-store"))]
    runner = JobRunner(make_settings(), backend=None, types=types, sweep_seconds=3600)
    runner.open()
    try:
        runner.step()  # the first step is a periodic sweep: every type, over everything
        assert asked == [("per-session", None), ("whole-store", None)]
        asked.clear()
        runner.on_messages_captured("s1")
        runner.step()
        assert asked == [("per-session", frozenset({"s1"}))]
        asked.clear()
        runner.wake()  # a poke (a remember request, new settings): every type again
        runner.step()
        assert [name for name, _ in asked] == ["per-session", "whole-store"]
    finally:
        runner.close()


def test_the_worker_makes_way_for_the_hot_path_but_never_waits_forever(engram_home: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    runner = JobRunner(make_settings(), backend=None, types=[], sweep_seconds=3600)
    runner.register("tidy", lambda ctx, job: (ctx.make_way(), ran.append(job.payload["n"])), 1, uses_llm=False)
    polls: list[int] = []

    def busy_three_times() -> bool:
        polls.append(1)
        return len(polls) <= 3

    runner.hot_path_busy = busy_three_times
    runner.open()
    try:
        runner.enqueue("tidy", "t1", {"n": "first"}, conn=runner.conn)
        assert runner.step()
        assert ran == ["first"] and len(polls) == 3 + 2  # waited 3 polls at the start, none inside the job
        monkeypatch.setattr(queue, "MAX_YIELD_SECONDS", 0.05)
        runner.hot_path_busy = lambda: True  # a flag stuck on: the queue still moves
        runner.enqueue("tidy", "t2", {"n": "second"}, conn=runner.conn)
        assert runner.step()
        assert ran == ["first", "second"]
    finally:
        runner.close()
