"""The inquisitor (priority 3): is what a memory says about the code still true at the project's HEAD?

For a project's active memories that cite files or symbols, a deterministic pass first
(``processor.memory.code_check``: paths at HEAD, ``git grep -w`` for symbols, renames and deletions
since the memory). Per memory the outcome is one of:
- valid: the check and the commit are recorded;
- auto-fixed: a file or function was renamed: a new version with the new name, the old one superseded;
- stale: a cited file was deleted: status ``stale`` (never a bite or in the digest; memory_recall still
  finds it, with "stale: …" and the reason);
- uncertain: only these, and only with an LLM backend, go to an LLM check: the Claude child reads the
  project with read-only tools (``backends/readonly_tools.py``) through the LLM gate (budget, breaker,
  ledger); other backends get the evidence in the prompt. Without an LLM, or when the LLM is unsure,
  the memory becomes a pending review.
Throttle (seed 000): a memory checked within ``inquisitor_min_hours`` is skipped even at another commit;
at the same commit it is checked again after ``inquisitor_recheck_hours``. Near the context budget the
inquisitor is stricter: an uncertain normal-importance memory goes stale instead of waiting for a person.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from processor.clock import now_ms
from processor.config import Settings
from processor.jobs import reviews
from processor.jobs.backends.base import LLMRequest, OutputError
from processor.jobs.base import DueCheck, DueJob, JobContext, JobRejected, JobType
from processor.jobs.coldpath import log_once, strict
from processor.memory import revise
from processor.memory.citations import extract
from processor.memory.code_check import Finding, RepoSnapshot, RepoUnavailable, check, head_commit_fast
from processor.store import cold as cold_sql
from processor.store import write_transaction
from processor.store.cold import LastCheck
from processor.store.episodes import Episode
from processor.store.jobs import JobRow

log = logging.getLogger(__name__)

INQUISITOR = "inquisitor"
PRIORITY = 3
HOUR_MS = 3_600_000

SYSTEM_PROMPT = (
    "You check one memory of a coding assistant against the current code of its project. You may read files "
    "and run git log, git show, git diff and git blame (nothing else) in the project folder. Answer with the "
    "memory's id and a verdict: 'valid' (still true), 'stale' (no longer true: the thing it describes is gone "
    "or changed), 'fix' (true once a name or path is updated: give the corrected memory text in 'rewritten'), "
    "or 'unsure'. Give a one-sentence reason.")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "verdict": {"type": "string", "enum": ["valid", "stale", "fix", "unsure"]},
        "reason": {"type": "string"},
        "rewritten": {"type": "string"},
    },
    "required": ["id", "verdict", "reason", "rewritten"],
    "additionalProperties": False,
}


def is_due(ep: Episode, last: LastCheck | None, head: str | None, now: int, settings: Settings) -> bool:
    """Seed 000's throttle: skip within min_hours; at the same commit wait recheck_hours; else check."""
    if last is None:
        return True
    age = now - last.checked_at
    if age < settings.inquisitor_min_hours * HOUR_MS:
        return False
    same_commit = head is not None and last.head_commit is not None and head.startswith(last.head_commit[:12])
    if same_commit or head is None or last.head_commit is None:
        return age >= settings.inquisitor_recheck_hours * HOUR_MS
    return True


def _cites_code(ep: Episode) -> bool:
    return bool(extract(ep.full_content, ep.entities, ep.project))


def find_due(check: DueCheck) -> list[DueJob]:
    """One job per project with memories that cite code and are due a check (reads the DB and .git files only)."""
    if not check.settings.cold_path:
        return []
    by_project: dict[str, list[str]] = {}
    heads: dict[str, str | None] = {}
    for ep, last in cold_sql.memories_to_check(check.conn):
        project = ep.project or ""
        if project not in heads:
            heads[project] = head_commit_fast(project)
        if is_due(ep, last, heads[project], check.now_ms, check.settings) and _cites_code(ep):
            by_project.setdefault(project, []).append(ep.id)
    return [DueJob(f"{INQUISITOR}:{project}", {"project": project},
                   f"{len(ids)} memories of {project} cite code and are due a check (HEAD "
                   f"{(heads[project] or 'unknown')[:12]})")
            for project, ids in sorted(by_project.items())]


def parse_answer(text: str) -> dict[str, str]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise OutputError(f"the inquisitor's answer is not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("verdict") not in ("valid", "stale", "fix", "unsure"):
        raise OutputError(f"the inquisitor's answer has no valid verdict: {str(data)[:200]}")
    return {k: str(data.get(k) or "") for k in ("id", "verdict", "reason", "rewritten")}


def _request(ep: Episode, finding: Finding, snapshot: RepoSnapshot, settings: Settings) -> LLMRequest:
    prompt = (f"Project folder: {snapshot.root} (HEAD {snapshot.head[:12]})\nMemory id: {ep.id}\n"
              f"Written: {ep.created_at} ms since epoch\nMemory summary: {ep.summary}\n"
              f"Memory content:\n{ep.full_content[:4000]}\n\nWhat a deterministic check found: {finding.reason}\n"
              "Is this memory still true of the code?")
    return LLMRequest(system=SYSTEM_PROMPT, prompt=prompt, schema=SCHEMA, schema_name="engram_inquiry",
                      max_output_tokens=600, timeout=max(settings.llm_timeout_seconds, 120.0),
                      read_only_root=snapshot.root)


class Inquisitor:
    """Runs one project's checks; every outcome is committed as it is decided (a rerun skips done ones)."""

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.counts: dict[str, int] = {}

    def run(self, project: str) -> dict[str, int]:
        ctx, settings = self.ctx, self.settings
        now = now_ms()
        try:
            snapshot = RepoSnapshot(project, settings.git_timeout_seconds)
        except RepoUnavailable as exc:
            log_once(log, f"repo:{project}:{exc}", "inquisitor: %s; its memories are left as they are", exc)
            self._skip_all(project, str(exc), now)
            return self.counts
        if snapshot.detached:
            log_once(log, f"detached:{project}", "inquisitor: %s is at a detached HEAD (%s); checking that commit",
                     project, snapshot.head[:12], level=logging.INFO)
        due = [(ep, extract(ep.full_content, ep.entities, project))
               for ep, last in cold_sql.memories_to_check(ctx.conn, project)
               if is_due(ep, last, snapshot.head, now, settings)]
        # A memory that cites no code has nothing to check (the scheduler never queued for it either).
        due = [(ep, c) for ep, c in due if c][: settings.inquisitor_batch]
        if not due:
            return self.counts
        try:
            snapshot.load_history(min(ep.created_at for ep, _ in due))
            symbols = {s for _, c in due for s in c.symbols}
            snapshot.load_symbols(symbols)
            snapshot.find_renames(symbols, min(ep.created_at for ep, _ in due))
            snapshot._searched.update(symbols)  # searched together: no per-symbol search after this
        except RepoUnavailable as exc:
            log_once(log, f"history:{project}", "inquisitor: %s; checking paths only", exc)
        budget = [20]
        tight = strict(ctx.conn, settings)
        for ep, citations in due:
            if ctx.stop_requested():
                break
            ctx.make_way()
            try:
                finding = check(snapshot, citations, ep.created_at, symbol_budget=budget)
            except RepoUnavailable as exc:
                log_once(log, f"check:{project}", "inquisitor: %s; the rest waits for the next run", exc)
                break
            self._apply(ep, finding, snapshot, tight)
        log.info("inquisitor %s: %s", project, ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())))
        return self.counts

    def _count(self, verdict: str) -> None:
        self.counts[verdict] = self.counts.get(verdict, 0) + 1

    def _skip_all(self, project: str, reason: str, now: int) -> None:
        with write_transaction(self.ctx.conn):
            for ep, last in cold_sql.memories_to_check(self.ctx.conn, project):
                if is_due(ep, last, None, now, self.settings) and _cites_code(ep):
                    cold_sql.record_check(self.ctx.conn, ep.id, now, None, "skipped", reason)
                    self._count("skipped")

    def _apply(self, ep: Episode, finding: Finding, snapshot: RepoSnapshot, tight: bool) -> None:
        store, head = self.ctx.store, snapshot.head
        if finding.verdict in ("valid", "skipped"):
            with write_transaction(self.ctx.conn):
                cold_sql.record_check(self.ctx.conn, ep.id, now_ms(), head, finding.verdict, finding.reason)
        elif finding.verdict == "fix":
            revise.rewrite(store, ep, finding.replacements, job_type=INQUISITOR, reason=finding.reason,
                           head_commit=head)
        elif finding.verdict == "stale":
            revise.mark(store, ep.id, "stale", job_type=INQUISITOR, reason=finding.reason, head_commit=head)
        else:
            self._uncertain(ep, finding, snapshot, tight)
            return
        self._count(finding.verdict)

    def _uncertain(self, ep: Episode, finding: Finding, snapshot: RepoSnapshot, tight: bool) -> None:
        answer = None
        if self.ctx.backend is not None:
            # Budget and breaker stops propagate: the job waits, the memory is not judged without them.
            answer = self.ctx.call_llm(_request(ep, finding, snapshot, self.settings), parse_answer)
            if answer["id"] != ep.id:
                log_once(log, f"wrong-id:{ep.id}", "inquisitor: the LLM answered about %r, not memory %s; "
                         "left for a person", answer["id"][:40], ep.id)
                answer = None
        store, head = self.ctx.store, snapshot.head
        reason = finding.reason
        if answer and answer["verdict"] == "valid":
            with write_transaction(self.ctx.conn):
                cold_sql.record_check(self.ctx.conn, ep.id, now_ms(), head, "valid", f"LLM: {answer['reason']}")
            self._count("valid")
        elif answer and answer["verdict"] == "stale":
            revise.mark(store, ep.id, "stale", job_type=INQUISITOR, reason=f"{reason}; LLM: {answer['reason']}",
                        head_commit=head)
            self._count("stale")
        elif answer and answer["verdict"] == "fix" and answer["rewritten"].strip():
            text = answer["rewritten"].strip()
            revise.new_version(store, ep, text[:200], text, ep.entities, job_type=INQUISITOR,
                               reason=f"LLM: {answer['reason']}", head_commit=head)
            self._count("fix")
        elif tight and ep.importance == "normal":
            revise.mark(store, ep.id, "stale", job_type=INQUISITOR,
                        reason=f"{reason} (memory is near its context budget: uncertain memories go stale)",
                        head_commit=head)
            self._count("stale")
        else:
            if answer:
                reason += f"; LLM unsure: {answer['reason']}"
            with write_transaction(self.ctx.conn):
                reviews.open_review(
                    self.ctx.conn, episode_id=ep.id, project=ep.project, kind=INQUISITOR,
                    question=f"Is this memory still true? “{ep.summary[:200]}”",
                    options=reviews.review_options(finding.replacements), context=reason, commit=head,
                    job_type=INQUISITOR)
                cold_sql.record_check(self.ctx.conn, ep.id, now_ms(), head, "review", reason)
            self._count("review")


def inquisitor_job(ctx: JobContext, job: JobRow) -> None:
    project = job.payload.get("project")
    if not isinstance(project, str) or not project:
        raise JobRejected(f"inquisitor job #{job.id} has no project in {job.payload!r}")
    Inquisitor(ctx).run(project)


JOB_TYPE = JobType(INQUISITOR, inquisitor_job, priority=PRIORITY, uses_llm=False, due=find_due)
