"""The context check (priority 2, at most every ``context_check_hours``): what memory costs the agent's context.

Measured with the hooks' own token estimate (``estimate_tokens``, 4 characters a token) on what they
actually inject: the SessionStart digest (rendered for each recently active project; the largest counts),
and the PreToolUse bites (the recollection files of live sessions, formatted as the hook formats them:
bites per user message and tokens per bite), times the average user messages per recent session. The
result is stored in ``context_checks``; its ratio to ``context_budget_tokens`` (default 15% of a 200k
window) makes the inquisitor, curator and sweeps stricter near the budget (``coldpath.strict``), and
`engram status` shows it.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from processor.clock import now_ms
from processor.hook_kit.hook_io import bite_line, format_context
from processor.jobs.base import DueCheck, DueJob, JobContext, JobType
from processor.memory.verbatim import estimate_tokens
from processor.recall import digest
from processor.store import cold as cold_sql
from processor.store import write_transaction
from processor.store.cold import ContextCheck
from processor.store.jobs import JobRow

log = logging.getLogger(__name__)

CONTEXT_CHECK = "context_check"
PRIORITY = 2
MAX_PROJECTS = 20
HOUR_MS = 3_600_000


def find_due(check: DueCheck) -> list[DueJob]:
    if not check.settings.cold_path:
        return []
    last = cold_sql.latest_context_check(check.conn)
    if last is not None and check.now_ms - last.measured_at < check.settings.context_check_hours * HOUR_MS:
        return []
    if not cold_sql.recent_projects(check.conn, check.now_ms - int(check.settings.recent_days * 86_400_000)):
        return []  # no session to measure for
    since = "never measured" if last is None else f"last measured {(check.now_ms - last.measured_at) // HOUR_MS} h ago"
    return [DueJob(CONTEXT_CHECK, {}, f"what memory costs the agent's context: {since}")]


def _bite_costs(folder: str) -> tuple[list[int], list[int]]:
    """(bites per recollection file, tokens per injected bite) over the live sessions' files."""
    per_file: list[int] = []
    tokens: list[int] = []
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".json") and not n.startswith(".")]
    except OSError:
        return per_file, tokens
    for name in names[:500]:
        try:
            with open(os.path.join(folder, name), "rb") as f:
                data = json.loads(f.read(64 * 1024))
        except (OSError, ValueError):
            continue
        bites = data.get("bites") if isinstance(data, dict) else None
        if not isinstance(bites, list):
            continue
        lines = [line for line in (bite_line(b) for b in bites) if line]
        per_file.append(len(lines))
        if lines:
            total = estimate_tokens(format_context(lines))
            tokens += [total // len(lines)] * len(lines)
    return per_file, tokens


def measure(ctx: JobContext) -> ContextCheck:
    settings, conn = ctx.settings, ctx.conn
    now = now_ms()
    since = now - int(settings.recent_days * 86_400_000)
    per_project: dict[str, int] = {}
    for project in cold_sql.recent_projects(conn, since)[:MAX_PROJECTS]:
        text = digest.render(digest.collect(conn, settings, project, now), settings.session_start_token_budget,
                             settings.queue_dir)
        per_project[project] = estimate_tokens(text) if text else 0
    digest_tokens = max(per_project.values(), default=0)
    per_file, tokens = _bite_costs(str(settings.recollections_dir))
    bites_per_message = sum(per_file) / len(per_file) if per_file else 0.0
    bite_tokens = sum(tokens) / len(tokens) if tokens else 0.0
    counts = cold_sql.recent_user_message_counts(conn, since)
    messages = sum(counts) / len(counts) if counts else 0.0
    session_tokens = int(digest_tokens + bites_per_message * bite_tokens * messages)
    budget = max(settings.context_budget_tokens, 1)
    detail: dict[str, Any] = {"digest_tokens_by_project": per_project, "recollection_files": len(per_file),
                              "sessions": len(counts)}
    return ContextCheck(now, digest_tokens, round(bites_per_message, 3), round(bite_tokens, 1), round(messages, 1),
                        session_tokens, budget, session_tokens / budget, detail)


def context_check_job(ctx: JobContext, job: JobRow) -> None:
    result = measure(ctx)
    with write_transaction(ctx.conn):
        cold_sql.record_context_check(ctx.conn, result)
    log.info("context check: memory costs about %d tokens per session (%d digest + %.1f bites × %.0f tokens × %.0f "
             "messages), %.0f%% of the %d-token budget", result.session_tokens, result.digest_tokens,
             result.bites_per_message, result.bite_tokens, result.messages_per_session, result.ratio * 100,
             result.budget_tokens)


JOB_TYPE = JobType(CONTEXT_CHECK, context_check_job, priority=PRIORITY, uses_llm=False, due=find_due)
