"""The lines `engram status` prints for the job queue: plain formatting of ``jobs_status``'s dict, importable
without the queue, the backends or apsw (the CLI formats the running processor's answer with it)."""

from __future__ import annotations

from typing import Any


def format_jobs_status(status: dict[str, Any]) -> list[str]:
    """Lines for `engram status`."""
    lines = [f"extractor: {status['extractor']} ({status['extractor_reason']})"]
    if status.get("extractor_problem"):
        lines.append(f"  problem: {status['extractor_problem']}")
    lines.append(f"LLM spend today: ${status['spend_today_usd']:.4f} of ${status['daily_budget_usd']:.2f} "
                 f"({status['llm_calls_today']} calls, {status['tokens_today']['in']} in / "
                 f"{status['tokens_today']['out']} out tokens); budget {status['budget_state']}")
    breaker = status["breaker"]
    if breaker["state"] == "open":
        lines.append(f"circuit breaker: OPEN until {breaker['open_until']} ({breaker['failures']} failures; last: "
                     f"{breaker['last_error']})")
    else:
        lines.append(f"circuit breaker: closed ({breaker['failures']} recent failures)")
    if status.get("llm_paused_until"):
        lines.append(f"LLM jobs paused until {status['llm_paused_until']}: {status['llm_pause_reason']}")
    if status.get("processing"):
        lines.append(f"processing: {status['processing']}")
    queue = status.get("queue") or {}
    if queue:
        lines.append("jobs: " + "; ".join(f"{t} " + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
                                          for t, states in sorted(queue.items())))
    else:
        lines.append("jobs: none waiting")
    for job in status.get("retrying") or []:
        lines.append(f"  {job['type']} #{job['id']} {job['state']}, {job['attempts']} attempt(s), next "
                     f"{job['next_attempt']}: {job['last_error']}")
    return lines
