"""The SQL of the job queue, the LLM cost ledger and per-session extraction progress.

Callers own the transaction (see write_transaction); these functions only run statements.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import apsw

from processor.redaction import Redacted, redacted, redacted_json

JOB_COLUMNS = "id, type, dedupe_key, priority, payload, state, attempts, next_attempt_at, last_error, owner_pid, " \
              "created_at, started_at"


@dataclass(frozen=True)
class JobRow:
    id: int
    type: str
    dedupe_key: str
    priority: int
    payload: dict[str, Any]
    state: str
    attempts: int
    next_attempt_at: int
    last_error: str | None
    owner_pid: int | None
    created_at: int
    started_at: int | None

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> JobRow:
        values = list(row)
        try:
            payload = json.loads(values[4] or "{}")
        except ValueError:
            payload = {"_unreadable": values[4]}
        values[4] = payload if isinstance(payload, dict) else {"value": payload}
        return cls(*values)


# --- jobs ----------------------------------------------------------------------------------------

def insert_job(conn: apsw.Connection, job_type: str, dedupe_key: str, priority: int, payload: dict[str, Any],
               now_ms: int, not_before_ms: int | None = None) -> int | None:
    """Queue a job; None when a pending or running job already holds the dedupe key. The payload may quote a
    session (a remember request's text, a query): its strings go through the door."""
    conn.execute(
        "INSERT OR IGNORE INTO jobs (type, dedupe_key, priority, payload, state, attempts, next_attempt_at, "
        "created_at, updated_at) VALUES (?, ?, ?, ?, 'pending', 0, ?, ?, ?)",
        (job_type, dedupe_key, priority, redacted_json(payload, sort_keys=True), not_before_ms or now_ms, now_ms,
         now_ms),
    )
    return conn.last_insert_rowid() if conn.changes() else None


def live_job(conn: apsw.Connection, dedupe_key: str) -> JobRow | None:
    row = conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE dedupe_key = ? AND state IN ('pending', 'running')",
                       (dedupe_key,)).fetchone()
    return JobRow.from_row(row) if row else None


def get_job(conn: apsw.Connection, job_id: int) -> JobRow | None:
    row = conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return JobRow.from_row(row) if row else None


def claim_next_job(conn: apsw.Connection, types: Iterable[str], now_ms: int, owner_pid: int) -> JobRow | None:
    """Mark the most urgent ready job of the given types running and return it (None: nothing ready)."""
    types = list(types)
    if not types:
        return None
    marks = ",".join("?" * len(types))
    row = conn.execute(
        f"""
        UPDATE jobs SET state = 'running', owner_pid = ?, started_at = ?, updated_at = ?
        WHERE id = (SELECT id FROM jobs WHERE state = 'pending' AND next_attempt_at <= ? AND type IN ({marks})
                    ORDER BY priority, next_attempt_at, id LIMIT 1)
        RETURNING {JOB_COLUMNS}
        """,
        (owner_pid, now_ms, now_ms, now_ms, *types),
    ).fetchone()
    return JobRow.from_row(row) if row else None


def finish_job(conn: apsw.Connection, job_id: int, now_ms: int, state: str = "done",
               note: Redacted | None = None) -> None:
    conn.execute(
        "UPDATE jobs SET state = ?, finished_at = ?, updated_at = ?, owner_pid = NULL, "
        "last_error = COALESCE(?, last_error) WHERE id = ?",
        (state, now_ms, now_ms, redacted(note), job_id),
    )


def reschedule_job(conn: apsw.Connection, job_id: int, next_attempt_ms: int, now_ms: int, *, error: Redacted | None,
                   count_attempt: bool) -> None:
    """Back to pending; a failure counts an attempt, a pause (budget, breaker) does not."""
    conn.execute(
        "UPDATE jobs SET state = 'pending', owner_pid = NULL, next_attempt_at = ?, updated_at = ?, "
        "attempts = attempts + ?, last_error = COALESCE(?, last_error) WHERE id = ?",
        (next_attempt_ms, now_ms, 1 if count_attempt else 0, redacted(error), job_id),
    )


def running_jobs(conn: apsw.Connection) -> list[JobRow]:
    return [JobRow.from_row(r) for r in conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = 'running'")]


def release_job(conn: apsw.Connection, job_id: int, now_ms: int) -> None:
    """A running job whose worker died: run it again (its work was never committed, or is idempotent)."""
    conn.execute("UPDATE jobs SET state = 'pending', owner_pid = NULL, updated_at = ? WHERE id = ? "
                 "AND state = 'running'", (now_ms, job_id))


def next_ready_time(conn: apsw.Connection, types: Iterable[str]) -> int | None:
    types = list(types)
    if not types:
        return None
    marks = ",".join("?" * len(types))
    row = conn.execute(f"SELECT MIN(next_attempt_at) FROM jobs WHERE state = 'pending' AND type IN ({marks})",
                       types).fetchone()
    return row[0] if row else None


def queue_depth(conn: apsw.Connection) -> dict[str, dict[str, int]]:
    """{type: {state: count}} over unfinished jobs, plus failed ones (kept for the user to see)."""
    depth: dict[str, dict[str, int]] = {}
    for job_type, state, count in conn.execute(
        "SELECT type, state, count(*) FROM jobs WHERE state != 'done' GROUP BY type, state ORDER BY type, state"
    ):
        depth.setdefault(job_type, {})[state] = count
    return depth


def retrying_jobs(conn: apsw.Connection, limit: int = 5) -> list[JobRow]:
    rows = conn.execute(
        f"SELECT {JOB_COLUMNS} FROM jobs WHERE state IN ('pending', 'failed') AND last_error IS NOT NULL "
        "ORDER BY updated_at DESC LIMIT ?", (limit,))
    return [JobRow.from_row(r) for r in rows]


def prune_done_jobs(conn: apsw.Connection, before_ms: int) -> int:
    conn.execute("DELETE FROM jobs WHERE state = 'done' AND finished_at < ?", (before_ms,))
    return conn.changes()


# --- the LLM cost ledger -------------------------------------------------------------------------

@dataclass(frozen=True)
class LLMCall:
    job_id: int | None
    job_type: str | None
    backend: str
    model: str
    started_at: int
    duration_ms: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    ok: bool
    error: str | None


def insert_llm_call(conn: apsw.Connection, call: LLMCall) -> int:
    conn.execute(
        "INSERT INTO llm_calls (job_id, job_type, backend, model, started_at, duration_ms, tokens_in, tokens_out, "
        "cost_usd, ok, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (call.job_id, call.job_type, call.backend, call.model, call.started_at, call.duration_ms, call.tokens_in,
         call.tokens_out, call.cost_usd, int(call.ok), redacted(call.error)),
    )
    return conn.last_insert_rowid()


def spend_since(conn: apsw.Connection, since_ms: int) -> tuple[float, int, int, int]:
    """(usd, calls, tokens in, tokens out) of LLM calls started at or after since_ms."""
    row = conn.execute(
        "SELECT COALESCE(SUM(cost_usd), 0), count(*), COALESCE(SUM(tokens_in), 0), COALESCE(SUM(tokens_out), 0) "
        "FROM llm_calls WHERE started_at >= ?", (since_ms,)).fetchone()
    return float(row[0]), int(row[1]), int(row[2]), int(row[3])


# --- extraction progress -------------------------------------------------------------------------

@dataclass(frozen=True)
class ExtractionProgress:
    session_id: str
    extracted_through: int
    rolling_summary: str
    last_extracted_at: int | None
    extractions: int


def extraction_progress(conn: apsw.Connection, session_id: str) -> ExtractionProgress:
    row = conn.execute(
        "SELECT session_id, extracted_through, rolling_summary, last_extracted_at, extractions "
        "FROM extraction_state WHERE session_id = ?", (session_id,)).fetchone()
    return ExtractionProgress(*row) if row else ExtractionProgress(session_id, 0, "", None, 0)


def set_extraction_progress(conn: apsw.Connection, session_id: str, through: int, rolling_summary: Redacted,
                            now_ms: int) -> None:
    conn.execute(
        """
        INSERT INTO extraction_state (session_id, extracted_through, rolling_summary, last_extracted_at, extractions)
        VALUES (?, ?, ?, ?, 1)
        ON CONFLICT(session_id) DO UPDATE SET
            extracted_through = MAX(extraction_state.extracted_through, excluded.extracted_through),
            rolling_summary = excluded.rolling_summary,
            last_extracted_at = excluded.last_extracted_at,
            extractions = extraction_state.extractions + 1
        """,
        (session_id, through, redacted(rolling_summary), now_ms),
    )


@dataclass(frozen=True)
class ExtractionCandidate:
    """A session's messages not yet extracted, as the micro-batching triggers see them."""

    session_id: str
    project: str | None
    extracted_through: int
    last_extracted_at: int | None
    activity_ms: int | None
    new_messages: int
    complete_messages: int  # new messages before the last new user message (complete rounds)
    first_new_ts_ms: int | None


def extraction_candidates(conn: apsw.Connection, active_since_ms: int,
                          session_ids: list[str] | None = None) -> list[ExtractionCandidate]:
    where = "COALESCE(s.last_activity, s.updated_at) >= ?"
    params: list[Any] = [active_since_ms]
    if session_ids is not None:
        if not session_ids:
            return []
        where += f" AND s.session_id IN ({','.join('?' * len(session_ids))})"
        params += session_ids
    rows = conn.execute(
        f"""
        SELECT s.session_id, s.project, COALESCE(e.extracted_through, 0), e.last_extracted_at,
               COALESCE(s.last_activity, s.updated_at)
        FROM sessions s LEFT JOIN extraction_state e USING (session_id)
        WHERE {where}
        """,
        params,
    ).fetchall()
    out = []
    for session_id, project, through, last_at, activity in rows:
        new, last_user, first_ts = conn.execute(
            "SELECT count(*), MAX(CASE WHEN role = 'user' THEN id END), MIN(ts_ms) FROM messages "
            "WHERE session_id = ? AND id > ?", (session_id, through)).fetchone()
        if not new:
            continue
        complete = 0
        if last_user is not None:
            complete = conn.execute("SELECT count(*) FROM messages WHERE session_id = ? AND id > ? AND id < ?",
                                    (session_id, through, last_user)).fetchone()[0]
        out.append(ExtractionCandidate(session_id, project, through, last_at, activity, new, complete, first_ts))
    return out
