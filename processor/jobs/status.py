"""What the job queue is doing, for `engram status` and dry runs: spend, budget, breaker, queue depth (its lines:
`status_text`)."""

from __future__ import annotations

import contextlib
from typing import Any

import apsw

from processor.clock import now_ms, utc_clock
from processor.config import Settings
from processor.jobs import costs
from processor.jobs.backends import BackendUnavailable, choose_backend
from processor.jobs.llm_gate import Breaker, read_breaker, read_pause
from processor.store import jobs as sql


def jobs_status(conn: apsw.Connection, settings: Settings, now: int | None = None) -> dict[str, Any]:
    """Spend, budget, breaker and queue depth, from the database alone (works with the processor stopped)."""
    now = now if now is not None else now_ms()
    try:
        spent, calls, tokens_in, tokens_out = costs.today_spend(conn, now)
        depth = sql.queue_depth(conn)
        retrying = sql.retrying_jobs(conn)
    except apsw.SQLError:  # a database from before the job queue existed
        spent, calls, tokens_in, tokens_out, depth, retrying = 0.0, 0, 0, 0, {}, []
    budget = settings.daily_budget_usd
    breaker = Breaker()
    pause: dict[str, Any] = {}
    with contextlib.suppress(apsw.SQLError):  # a database from before the job queue existed
        breaker, pause = read_breaker(conn), read_pause(conn)
    try:
        name, reason = choose_backend(settings)
    except BackendUnavailable as exc:
        name, reason = "verbatim", str(exc)
    paused = pause.get("until_ms", 0) > now
    budget_reached = spent >= budget or (paused and "budget" in str(pause.get("reason")))
    return {
        "extractor": name,
        "extractor_reason": reason,
        "spend_today_usd": round(spent, 6),
        "llm_calls_today": calls,
        "tokens_today": {"in": tokens_in, "out": tokens_out},
        "daily_budget_usd": budget,
        "budget_state": (f"reached: LLM jobs paused until {utc_clock(costs.next_utc_day_ms(now))}"
                         if budget_reached else "ok"),
        "breaker": {"state": "open" if breaker.is_open(now) else "closed", "failures": breaker.failures,
                    "open_until": utc_clock(breaker.open_until_ms) if breaker.is_open(now) else None,
                    "last_error": breaker.last_error},
        "llm_paused_until": utc_clock(pause["until_ms"]) if paused else None,
        "llm_pause_reason": pause.get("reason") if paused else None,
        "queue": depth,
        "retrying": [{"id": j.id, "type": j.type, "attempts": j.attempts, "next_attempt": utc_clock(j.next_attempt_at),
                      "last_error": (j.last_error or "")[:200], "state": j.state} for j in retrying],
    }
