"""The curator (priority 1): tidies the pending reviews whenever the set of open ones changed.

It runs when the open reviews' fingerprint differs from the one it recorded last (``meta``), and:
1. merges duplicates: reviews of the same memory and kind, or with the same question, become one
   (the oldest stays open; the others are closed as ``merged`` into it);
2. auto-resolves the obvious ones: the memory was forgotten or replaced meanwhile (dismissed); the code
   check now passes, so the cause is gone (kept as valid); a cited file was renamed and nothing else is
   wrong (rewritten with the new name); a cited file is now deleted (marked stale);
3. near the context budget, closes reviews older than a week as stale (the memory stays searchable).
Every action is recorded in ``cold_actions``. No LLM: the curator runs while the budget pauses LLM jobs.
"""

from __future__ import annotations

import logging

from processor.clock import now_ms
from processor.jobs.base import DueCheck, DueJob, JobContext, JobType
from processor.jobs.coldpath import log_once, strict
from processor.jobs.reviews import apply_choice
from processor.memory import revise
from processor.memory.citations import extract
from processor.memory.code_check import RepoSnapshot, RepoUnavailable, check
from processor.store import cold as cold_sql
from processor.store import episodes as episodes_sql
from processor.store import write_transaction
from processor.store.cold import Review
from processor.store.jobs import JobRow

log = logging.getLogger(__name__)

CURATOR = "curator"
PRIORITY = 1
FINGERPRINT_KEY = "curator.open_reviews"
OLD_REVIEW_MS = 7 * 86_400_000


def find_due(check: DueCheck) -> list[DueJob]:
    if not check.settings.cold_path:
        return []
    fingerprint = cold_sql.open_review_fingerprint(check.conn)
    if fingerprint == (episodes_sql.get_meta(check.conn, FINGERPRINT_KEY) or "0/0/0/0"):
        return []
    return [DueJob(CURATOR, {}, f"the open reviews changed since the curator's last run ({fingerprint})")]


def _key(review: Review) -> tuple[str, ...]:
    if review.episode_id:
        return ("memory", review.episode_id, review.kind)
    return ("question", " ".join(review.question.lower().split()))


class Curator:
    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self.counts: dict[str, int] = {}
        self._snapshots: dict[str, RepoSnapshot | None] = {}

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def run(self) -> dict[str, int]:
        conn = self.ctx.conn
        survivors = self._merge_duplicates(cold_sql.open_reviews(conn))
        tight = strict(conn, self.ctx.settings)
        now = now_ms()
        for review in survivors:
            if self.ctx.stop_requested():
                break
            self.ctx.make_way()
            if review.chosen is not None:
                continue  # a person chose; the review job applies it
            if not self._auto_resolve(review) and tight and now - review.created_at > OLD_REVIEW_MS:
                stale_option = next((i for i, o in enumerate(review.options, 1) if o.get("action") == "stale"), None)
                if stale_option:
                    apply_choice(self.ctx.store, review, stale_option, by=CURATOR)
                    self._count("expired_stale")
        with write_transaction(conn):
            episodes_sql.set_meta(conn, FINGERPRINT_KEY, cold_sql.open_review_fingerprint(conn))
        log.info("curator: %s", ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())) or "nothing to do")
        return self.counts

    def _merge_duplicates(self, open_reviews: list[Review]) -> list[Review]:
        keep: dict[tuple[str, ...], Review] = {}
        stamp = now_ms()
        with write_transaction(self.ctx.conn):
            for review in open_reviews:  # oldest first
                first = keep.setdefault(_key(review), review)
                if first is review:
                    continue
                cold_sql.close_review(self.ctx.conn, review.id, "merged", stamp, by=CURATOR,
                                      resolution=f"same as review {first.id}", merged_into=first.id)
                cold_sql.record_action(self.ctx.conn, stamp, CURATOR, "merge_review", episode_id=review.episode_id,
                                       review_id=review.id, detail=f"merged into review {first.id}")
                self._count("merged")
        return list(keep.values())

    def _settle(self, review: Review, state: str, resolution: str, action: str, detail: str, counted: str) -> bool:
        """Close a review the curator settled itself, the action recorded in the same transaction; returns True."""
        stamp = now_ms()
        with write_transaction(self.ctx.conn):
            cold_sql.close_review(self.ctx.conn, review.id, state, stamp, by=CURATOR, resolution=resolution)
            cold_sql.record_action(self.ctx.conn, stamp, CURATOR, action, episode_id=review.episode_id,
                                   review_id=review.id, detail=detail)
        self._count(counted)
        return True

    def _option(self, review: Review, action: str) -> int | None:
        return next((i for i, o in enumerate(review.options, 1) if o.get("action") == action), None)

    def _snapshot(self, project: str) -> RepoSnapshot | None:
        if project not in self._snapshots:
            try:
                self._snapshots[project] = RepoSnapshot(project, self.ctx.settings.git_timeout_seconds)
            except RepoUnavailable as exc:
                log_once(log, f"curator-repo:{project}", "curator: %s; its reviews wait for a person", exc)
                self._snapshots[project] = None
        return self._snapshots[project]

    def _auto_resolve(self, review: Review) -> bool:
        conn, store = self.ctx.conn, self.ctx.store
        if not review.episode_id:
            return False
        ep = episodes_sql.get_episode(conn, review.episode_id)
        if ep is None or ep.status in ("forgotten", "superseded"):
            what = "forgotten" if ep is None or ep.status == "forgotten" else f"replaced by {ep.superseded_by}"
            return self._settle(review, "dismissed", f"the memory was {what} meanwhile", "dismiss_review",
                                f"memory {what}", "dismissed")
        if review.kind != "inquisitor" or not ep.project:
            return False
        snapshot = self._snapshot(ep.project)
        if snapshot is None:
            return False
        citations = extract(ep.full_content, ep.entities, ep.project)
        snapshot.load_history(ep.created_at)
        snapshot.load_symbols(set(citations.symbols))
        finding = check(snapshot, citations, ep.created_at)
        if finding.verdict == "valid":
            option = self._option(review, "valid")
            reason = f"the cause is gone: {finding.reason}"
        elif finding.verdict == "stale":
            option = self._option(review, "stale")
            reason = finding.reason
        elif finding.verdict == "fix":
            revise.rewrite(store, ep, finding.replacements, job_type=CURATOR, reason=finding.reason,
                           head_commit=snapshot.head)
            return self._settle(review, "resolved", f"rewritten: {finding.reason}", "resolve_review",
                                f"rewritten: {finding.reason}", "rewritten")
        else:
            return False
        if option is None:
            return False
        done = apply_choice(store, review, option, by=CURATOR)
        log.info("curator resolved review %d (%s): %s", review.id, reason, done)
        self._count("resolved")
        return True


def curator_job(ctx: JobContext, job: JobRow) -> None:
    Curator(ctx).run()


JOB_TYPE = JobType(CURATOR, curator_job, priority=PRIORITY, uses_llm=False, due=find_due)
