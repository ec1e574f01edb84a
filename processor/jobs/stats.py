"""What `engram stats` reports: memories by project, kind and status; sweeps; verdicts; reviews; spend by job type."""

from __future__ import annotations

from typing import Any

import apsw

from processor.store import cold as cold_sql


def collect_stats(conn: apsw.Connection) -> dict[str, Any]:
    memories: dict[str, dict[str, dict[str, int]]] = {}
    by_status: dict[str, int] = {}
    for project, kind, status, count in cold_sql.memory_breakdown(conn):
        memories.setdefault(project or "(global)", {}).setdefault(kind, {})[status] = count
        by_status[status] = by_status.get(status, 0) + count
    check = cold_sql.latest_context_check(conn)
    return {
        "memories": memories,
        "memories_by_status": by_status,
        "sweeps": cold_sql.sweep_totals(conn),
        "inquisitor_verdicts": cold_sql.verdict_counts(conn),
        "reviews": cold_sql.review_counts(conn),
        "actions": cold_sql.action_counts(conn),
        "spend_by_job_type": cold_sql.spend_by_job_type(conn),
        "context": None if check is None else {"session_tokens": check.session_tokens,
                                               "budget_tokens": check.budget_tokens, "ratio": round(check.ratio, 3)},
    }


def format_stats(s: dict[str, Any]) -> str:
    lines = ["memories by project, kind and status:"]
    for project, kinds in s["memories"].items():
        lines.append(f"  {project}")
        for kind, statuses in kinds.items():
            lines.append(f"    {kind}: " + ", ".join(f"{st} {n}" for st, n in sorted(statuses.items())))
    lines.append("by status: " + (", ".join(f"{k} {v}" for k, v in sorted(s["memories_by_status"].items())) or "none"))
    sw = s["sweeps"]
    lines.append(f"sweeps: {sw['sweeps']} run; {sw['merged']} merged, {sw['archived']} archived, "
                 f"{sw['consolidated']} consolidated")
    lines.append("inquisitor verdicts: " + (", ".join(f"{k} {v}" for k, v in sorted(s["inquisitor_verdicts"].items()))
                                            or "none yet"))
    lines.append("reviews: " + (", ".join(f"{k} {v}" for k, v in sorted(s["reviews"].items())) or "none"))
    spend = s["spend_by_job_type"]
    lines.append("LLM spend by job type: " + (", ".join(f"{k} {v['calls']} calls ${v['usd']:.4f}"
                                                       for k, v in sorted(spend.items())) or "none"))
    if s["context"]:
        c = s["context"]
        lines.append(f"context: {c['session_tokens']} of {c['budget_tokens']} tokens per session "
                     f"({c['ratio'] * 100:.0f}%)")
    return "\n".join(lines)
