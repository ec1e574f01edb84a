"""Consolidation sweeps (seed 003): pressure-based, pass 1 heuristics without an LLM, pass 2 batched LLM merges.

The scheduler computes each project's memory pressure (active memories / ``max_memories_per_project``)
on its sweeps and queues:
- ``sweep`` (pass 1, no LLM) when pressure is above ``sweep_pressure`` and the project was not swept in
  the last ``sweep_interval_minutes``: exact and near duplicates merged into the newest (the others become
  ``superseded``, linked by ``superseded_by``), old never-expanded verbatim pieces ``archived``;
- ``consolidate`` (pass 2) when an LLM is configured, pressure is still high after a pass 1: batches of
  10-20 related memories, one call each, the LLM names which ones say the same thing and writes the one
  memory that replaces them; every original is kept, superseded by it.
Nothing is ever deleted. Near the context budget the sweep is more aggressive: a lower pressure
threshold and archiving after a quarter of ``archive_after_days``.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import numpy as np

from processor.clock import now_ms
from processor.config import Settings
from processor.jobs.backends.base import LLMRequest, OutputError
from processor.jobs.base import DueCheck, DueJob, JobContext, JobRejected, JobType
from processor.jobs.coldpath import log_once, strict
from processor.memory import revise
from processor.memory.consolidation import Item, plan_pass1, related_batches
from processor.store import cold as cold_sql
from processor.store import episodes as episodes_sql
from processor.store import write_transaction
from processor.store.jobs import JobRow

log = logging.getLogger(__name__)

SWEEP = "sweep"
CONSOLIDATE = "consolidate"
PRIORITY = 1
MAX_CALLS_PER_JOB = 5
READ_PAGE = 500     # rows read per read transaction in pass 1 (the worker makes way between pages)
WRITE_CHUNK = 100   # changes per write transaction in pass 1: the write lock is held ~20 ms at a time
DAY_MS = 86_400_000

SYSTEM_PROMPT = (
    "You consolidate the memories of a coding assistant. You get related memories, each with its id. Find the "
    "ones that say the same thing or belong in one memory, and for each such group write one memory that keeps "
    "every fact (summary: one line; full_content: a short paragraph). Use only the ids you were given; leave "
    "out memories that should stay separate. Answer with no groups when nothing should be merged.")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"groups": {"type": "array", "items": {
        "type": "object",
        "properties": {"ids": {"type": "array", "items": {"type": "string"}}, "summary": {"type": "string"},
                       "full_content": {"type": "string"}},
        "required": ["ids", "summary", "full_content"], "additionalProperties": False}}},
    "required": ["groups"],
    "additionalProperties": False,
}


def threshold(settings: Settings, tight: bool) -> float:
    return min(settings.sweep_pressure, 0.5) if tight else settings.sweep_pressure


def pressures(check: DueCheck) -> dict[str, float]:
    limit = max(check.settings.max_memories_per_project, 1)
    return {p: n / limit for p, n in cold_sql.active_counts_by_project(check.conn).items()}


def over_the_line(check: DueCheck) -> list[tuple[str, float, float]]:
    """(project, its memory pressure, the line it is over) for each project whose pressure is over the line, by
    project."""
    line = threshold(check.settings, strict(check.conn, check.settings))
    return [(project, pressure, line) for project, pressure in sorted(pressures(check).items()) if pressure > line]


def find_sweeps(check: DueCheck) -> list[DueJob]:
    if not check.settings.cold_path:
        return []
    interval = check.settings.sweep_interval_minutes * 60_000
    due = []
    for project, pressure, line in over_the_line(check):
        last = cold_sql.last_sweep_at(check.conn, project, 1)
        if last is None or check.now_ms - last >= interval:
            due.append(DueJob(f"{SWEEP}:{project}", {"project": project},
                              f"memory pressure of {project} is {pressure:.2f} (> {line:.2f})"))
    return due


def find_consolidations(check: DueCheck) -> list[DueJob]:
    if not check.settings.cold_path or not check.llm_available:
        return []
    interval = check.settings.sweep_interval_minutes * 60_000
    due = []
    for project, pressure, _ in over_the_line(check):
        pass1 = cold_sql.last_sweep_at(check.conn, project, 1)
        pass2 = cold_sql.last_sweep_at(check.conn, project, 2) or 0
        if pass1 is not None and pass1 > pass2 and check.now_ms - pass2 >= interval:
            due.append(DueJob(f"{CONSOLIDATE}:{project}", {"project": project},
                              f"memory pressure of {project} is still {pressure:.2f} after pass 1"))
    return due


def _project(job: JobRow) -> str:
    project = job.payload.get("project")
    if not isinstance(project, str) or not project:
        raise JobRejected(f"{job.type} job #{job.id} has no project in {job.payload!r}")
    return project


def _vectors(blobs: list[bytes | None], dim: int | None) -> np.ndarray | None:
    dim = dim or next((len(b) // 4 for b in blobs if b), 0)
    if not dim:
        return None
    out = np.zeros((len(blobs), dim), dtype=np.float32)
    for i, blob in enumerate(blobs):
        if blob and len(blob) == dim * 4:
            out[i] = np.frombuffer(blob, dtype=np.float32)
    return out


def _active_rows(ctx: JobContext, project: str) -> tuple[list[cold_sql.SweepRow], np.ndarray | None]:
    """A project's active memories oldest first, and their vectors, read a page at a time (the worker makes
    way for the hot path between pages)."""
    rows: list[cold_sql.SweepRow] = []
    while page := cold_sql.sweep_rows_page(ctx.conn, project, rows[-1].rowid if rows else 0, READ_PAGE):
        rows += page
        ctx.make_way()
    order = sorted(range(len(rows)), key=lambda i: (rows[i].created_at, rows[i].rowid))
    rows = [rows[i] for i in order]
    return rows, _vectors([r.embedding for r in rows], None)


def run_pass1(ctx: JobContext, project: str) -> dict[str, Any]:
    """Merge duplicates into the newest and archive old verbatim pieces; returns what it did.

    The changes are committed WRITE_CHUNK episodes at a time, each with its recorded actions, so the
    write lock is never held long; a sweep cut short leaves consistent rows, and the next one (no sweep
    is recorded until the end) plans again from what is still active."""
    settings, conn = ctx.settings, ctx.conn
    started, t0 = now_ms(), time.perf_counter()
    tight = strict(conn, settings)
    rows, vectors = _active_rows(ctx, project)
    limit = max(settings.max_memories_per_project, 1)
    pressure = len(rows) / limit
    items = [Item(r.id, r.created_at, r.importance, r.kind, r.source_type == "verbatim", r.access_count,
                  r.content_hash) for r in rows]
    archive_days = settings.archive_after_days / (4 if tight else 1)
    plan = plan_pass1(items, vectors, threshold=settings.duplicate_similarity,
                      archive_before_ms=started - int(archive_days * DAY_MS), between=ctx.make_way)
    # One list of changes: (episodes, the one they merge into or None to archive), cut into chunks.
    changes = [([rows[i].id for i in old], rows[keeper].id) for old, keeper in plan.merges]
    changes += [([rows[i].id], None) for i in plan.archive]
    merged = archived = 0
    for start in range(0, len(changes), WRITE_CHUNK):
        ctx.make_way()
        stamp = now_ms()
        with write_transaction(conn):
            for ids, keep_id in changes[start:start + WRITE_CHUNK]:
                if keep_id is not None:
                    for episode_id in cold_sql.supersede_into(conn, ids, keep_id, stamp):
                        merged += 1
                        cold_sql.record_action(conn, stamp, SWEEP, "merge", episode_id=episode_id,
                                               detail=f"duplicate of {keep_id}")
                else:
                    for episode_id in cold_sql.archive(conn, ids, stamp):
                        archived += 1
                        cold_sql.record_action(conn, stamp, SWEEP, "archive", episode_id=episode_id, detail=(
                            f"verbatim, normal, never expanded, older than {archive_days:g} days"))
    with write_transaction(conn):
        cold_sql.record_sweep(conn, project, 1, started, now_ms(), pressure, merged, archived, 0)
    result = {"project": project, "active_before": len(rows), "merged": merged, "archived": archived,
              "compared": plan.compared, "seconds": round(time.perf_counter() - t0, 3)}
    log.info("sweep pass 1 %s: %d active, %d merged into newer duplicates, %d archived (%.2f s)", project,
             len(rows), merged, archived, result["seconds"])
    return result


def parse_groups(text: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise OutputError(f"the consolidation answer is not JSON ({exc})") from None
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, list):
        raise OutputError("the consolidation answer has no `groups` list")
    return [g for g in groups if isinstance(g, dict)]


def run_pass2(ctx: JobContext, project: str) -> int:
    """Batched LLM consolidation of related memories (not verbatim rounds); returns memories written."""
    settings, conn = ctx.settings, ctx.conn
    started = now_ms()
    rows = [r for r in cold_sql.sweep_rows(conn, project) if r.source_type != "verbatim" and r.embedding]
    written = 0
    if len(rows) >= 2:
        vectors = _vectors([r.embedding for r in rows], None)
        assert vectors is not None
        batch = min(max(settings.consolidate_batch, 10), 20)
        for members in related_batches(vectors, [r.created_at for r in rows], settings.consolidate_similarity,
                                       batch, MAX_CALLS_PER_JOB):
            if ctx.stop_requested():
                break
            episodes = [e for e in (episodes_sql.get_episode(conn, rows[i].id) for i in members)
                        if e is not None and e.status == "active"]
            given = {e.id: e for e in episodes}
            prompt = "\n\n".join(f"id: {e.id}\nkind: {e.kind}\nsummary: {e.summary}\n{e.full_content[:1200]}"
                                 for e in episodes)
            request = LLMRequest(system=SYSTEM_PROMPT, prompt=prompt, schema=SCHEMA,
                                 schema_name="engram_consolidation", max_output_tokens=2000,
                                 timeout=settings.llm_timeout_seconds)
            for group in ctx.call_llm(request, parse_groups):
                ids = [i for i in group.get("ids") or [] if isinstance(i, str)]
                unknown = [i for i in ids if i not in given]
                if unknown:
                    log_once(log, f"unknown-ids:{project}:{unknown[0]}", "consolidation: the LLM named memories it "
                             "was not given (%s); they are ignored", ", ".join(u[:40] for u in unknown[:5]))
                originals = [given.pop(i) for i in dict.fromkeys(ids) if i in given]
                summary = str(group.get("summary") or "").strip()
                content = str(group.get("full_content") or "").strip()
                if len(originals) < 2 or not summary or not content:
                    continue
                revise.consolidate(ctx.store, originals, summary[:300], content[:4000], job_type=CONSOLIDATE,
                                   reason=f"pass 2 of {project}")
                written += 1
    limit = max(settings.max_memories_per_project, 1)
    with write_transaction(conn):
        cold_sql.record_sweep(conn, project, 2, started, now_ms(), len(rows) / limit, 0, 0, written)
    log.info("sweep pass 2 %s: %d consolidated memories written", project, written)
    return written


def sweep_job(ctx: JobContext, job: JobRow) -> None:
    run_pass1(ctx, _project(job))


def consolidate_job(ctx: JobContext, job: JobRow) -> None:
    run_pass2(ctx, _project(job))


SWEEP_TYPE = JobType(SWEEP, sweep_job, priority=PRIORITY, uses_llm=False, due=find_sweeps)
CONSOLIDATE_TYPE = JobType(CONSOLIDATE, consolidate_job, priority=PRIORITY, uses_llm=True, due=find_consolidations)
