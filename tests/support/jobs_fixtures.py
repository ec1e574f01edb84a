"""Helpers for the job-queue tests: settings, real SQLite sessions and messages, draining a runner."""

from __future__ import annotations

import time
import uuid as uuidlib
from typing import Any

from processor.config import Settings, ensure_home, load_settings
from processor.jobs.queue import JobRunner
from processor.store import open_store, write_transaction
from processor.store.sessions import index_new_messages

TEST_DEFAULTS: dict[str, Any] = {
    "extractor": "verbatim",
    "retry_base_seconds": 0.05,
    "retry_max_seconds": 0.4,
    "breaker_failures": 3,
    "breaker_cooldown_seconds": 0.6,
    "llm_timeout_seconds": 2.0,
    "extract_min_messages": 4,
    "extract_max_minutes": 20.0,
    "extract_idle_minutes": 5.0,
    "daily_budget_usd": 5.0,
    "cold_path": False,  # the cold-path tests turn it on; the others count exactly their own jobs
}


def make_settings(**overrides: Any) -> Settings:
    """Settings under $ENGRAM_HOME (the engram_home fixture), fast retry timings, no LLM unless asked."""
    settings = load_settings(overrides={**TEST_DEFAULTS, **overrides})
    ensure_home(settings)
    return settings


def now_ms() -> int:
    return int(time.time() * 1000)


def add_messages(settings: Settings, session_id: str, turns: list[tuple[str, str]], *, project: str = "demo",
                 activity_ms: int | None = None, step_ms: int = 1000) -> list[int]:
    """Store a session's messages as capture would; returns their ids. activity_ms = the last message's time."""
    last = activity_ms if activity_ms is not None else now_ms()
    first = last - step_ms * (len(turns) - 1)
    conn = open_store(settings.db_path)
    ids = []
    try:
        with write_transaction(conn):
            conn.execute(
                "INSERT INTO sessions (session_id, transcript_path, project, project_root, last_activity, created_at, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET "
                "last_activity = MAX(sessions.last_activity, excluded.last_activity), updated_at = excluded.updated_at",
                (session_id, f"/nowhere/{session_id}.jsonl", project, f"/src/{project}", last, first, last))
            for i, (role, text) in enumerate(turns):
                conn.execute(
                    "INSERT INTO messages (uuid, session_id, role, text, ts_ms, line_offset) VALUES (?, ?, ?, ?, ?, ?)",
                    (str(uuidlib.uuid4()), session_id, role, text, first + i * step_ms, i))
                ids.append(conn.last_insert_rowid())
            index_new_messages(conn, ids[:])  # capture indexes its rows for full-text search the same way
    finally:
        conn.close()
    return ids


def conversation(n_rounds: int, topic: str = "the store") -> list[tuple[str, str]]:
    turns = []
    for i in range(n_rounds):
        turns.append(("user", f"Question {i} about {topic}: should we change setting {i}?"))
        turns.append(("assistant", f"Answer {i}: yes, setting {i} of {topic} is now enabled in config."))
    return turns


def query(settings: Settings, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = open_store(settings.db_path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def drain(runner: JobRunner, timeout: float = 20.0) -> int:
    """Work the queue until no job is pending or running (waiting out backoff delays); returns jobs run."""
    ran = 0
    if runner.conn is None:
        runner.open()  # kept open: the breaker and pauses live on between passes, as in the worker thread
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runner.wake()
        ran += runner.run_until_idle()
        left = query(runner.settings, "SELECT count(*) FROM jobs WHERE state IN ('pending', 'running')")[0][0]
        if not left:
            return ran
        time.sleep(0.05)
    raise AssertionError(f"the queue did not drain within {timeout} s: "
                         f"{query(runner.settings, 'SELECT id, type, state, attempts, last_error FROM jobs')}")
