"""Planning without running: what `engram run --dry-run` would queue and why; and `engram extract`'s one-shot run.

``dry_run(settings)`` asks every job type what is due, exactly as the worker does, and prints it;
sessions that are not due are listed with what was measured. It writes no job and calls no model.
``run_once(settings, mock=True)`` queues what is due and works the queue in the calling thread
until nothing is ready, with canned outputs instead of an LLM when ``mock`` is set.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO

from processor.clock import now_ms as clock_now_ms
from processor.config import Settings
from processor.jobs.backends import BackendUnavailable, choose_backend
from processor.jobs.base import DueCheck
from processor.jobs.extraction import evaluate_sessions
from processor.jobs.queue import JobRunner
from processor.jobs.registry import built_in_job_types
from processor.jobs.status import jobs_status
from processor.jobs.status_text import format_jobs_status
from processor.store import jobs as sql
from processor.store import open_store


@dataclass(frozen=True)
class PlannedJob:
    type: str
    key: str
    reason: str
    already_queued: bool


def plan(settings: Settings, now_ms: int | None = None) -> tuple[list[PlannedJob], list[str]]:
    """(jobs that would be queued, notes on sessions that are not due), without writing anything."""
    now_ms = now_ms if now_ms is not None else clock_now_ms()
    conn = open_store(settings.db_path)
    planned: list[PlannedJob] = []
    notes: list[str] = []
    try:
        try:
            backend, _ = choose_backend(settings)
        except BackendUnavailable:
            backend = "verbatim"
        llm = backend != "verbatim"
        check = DueCheck(conn, settings, now_ms, None, llm_available=llm)
        for job_type in built_in_job_types():
            for job in job_type.due(check):
                planned.append(PlannedJob(job_type.name, job.dedupe_key, job.reason,
                                          sql.live_job(conn, job.dedupe_key) is not None))
        for due in evaluate_sessions(conn, settings, now_ms):
            if due.reason is None:
                notes.append(f"not due: session {due.session_id} ({due.project or 'no project'}): {due.detail}")
            elif not llm:
                notes.append(f"no extraction (extractor is verbatim): session {due.session_id} would be due: "
                             f"{due.reason}")
    finally:
        conn.close()
    return planned, notes


def dry_run(settings: Settings, out: TextIO | None = None) -> list[PlannedJob]:
    """Print what would be queued and why; execute nothing."""
    out = out or sys.stdout
    try:
        backend, reason = choose_backend(settings)
    except BackendUnavailable as exc:
        backend, reason = "verbatim", str(exc)
    print(f"extractor: {backend} ({reason})", file=out)
    conn = open_store(settings.db_path)
    try:
        status = jobs_status(conn, settings)
    finally:
        conn.close()
    print(f"budget: ${status['spend_today_usd']:.4f} of ${status['daily_budget_usd']:.2f} spent today (UTC), "
          f"{status['budget_state']}; circuit breaker {status['breaker']['state']}", file=out)
    planned, notes = plan(settings)
    for job in planned:
        state = " (already queued)" if job.already_queued else ""
        print(f"would queue {job.type}{state}: {job.reason}", file=out)
    for note in notes:
        print(note, file=out)
    if not planned:
        print("nothing would be queued", file=out)
    return planned


def run_once(settings: Settings, *, mock: bool = False, out: TextIO | None = None,
             max_jobs: int | None = None) -> int:
    """Queue what is due and work the queue until nothing is ready; returns the number of jobs run."""
    out = out or sys.stdout
    runner = JobRunner(settings, mock=mock)
    ran = runner.run_until_idle(max_jobs)
    print(f"ran {ran} job(s) with the {runner.backend_name} extractor", file=out)
    conn = open_store(settings.db_path)
    try:
        for line in format_jobs_status(jobs_status(conn, settings)):
            print(line, file=out)
    finally:
        conn.close()
    return ran
