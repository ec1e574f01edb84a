"""Pending reviews: the judgement calls the cold path leaves to a person, and the `review` job that applies a choice.

A review asks one question about one memory with numbered options; each option names an action:
``stale`` (keep it, never show it), ``valid`` (keep it as it is), ``rewrite`` (a new version with
the given replacements or text), ``archive`` or ``forget``. `engram review ID --choose N` records
the choice and queues a ``review`` job; the job applies it (so the processor's one worker makes every
change) and closes the review. A review whose memory was forgotten meanwhile is closed as dismissed.
"""

from __future__ import annotations

import logging
from typing import Any

import apsw

from processor.clock import now_ms
from processor.jobs.base import DueCheck, DueJob, JobContext, JobRejected, JobType
from processor.memory import revise
from processor.memory.episode_store import EpisodeStore
from processor.store import cold as cold_sql
from processor.store import episodes as episodes_sql
from processor.store import write_transaction
from processor.store.cold import Review
from processor.store.jobs import JobRow

log = logging.getLogger(__name__)

REVIEW = "review"
ACTIONS = ("stale", "valid", "rewrite", "archive", "forget")


def review_options(replacements: tuple[tuple[str, str], ...] = ()) -> list[dict[str, Any]]:
    """The usual options for a memory the code may no longer support."""
    options: list[dict[str, Any]] = []
    if replacements:
        change = ", ".join(f"{a} → {b}" for a, b in replacements)
        options.append({"label": f"Rewrite it ({change})", "action": "rewrite",
                        "replacements": [list(r) for r in replacements]})
    options += [{"label": "Mark it stale (kept and searchable, never injected)", "action": "stale"},
                {"label": "Keep it: it is still true", "action": "valid"},
                {"label": "Forget it", "action": "forget"}]
    return options


def open_review(conn: apsw.Connection, *, episode_id: str | None, project: str | None, kind: str, question: str,
                options: list[dict[str, Any]], context: str, commit: str | None, job_type: str) -> int:
    """Add a review (inside the caller's transaction) unless the memory already has an open one of this kind."""
    if episode_id:
        existing = cold_sql.open_review_for(conn, episode_id, kind)
        if existing is not None:
            return existing
    stamp = now_ms()
    review_id = cold_sql.insert_review(conn, episode_id, project, kind, question, options, context, commit, stamp)
    cold_sql.record_action(conn, stamp, job_type, "review_opened", episode_id=episode_id, review_id=review_id,
                           detail=question)
    return review_id


def apply_choice(store: EpisodeStore, review: Review, chosen: int, *, by: str) -> str:
    """Carry out option `chosen` (1-based) of an open review and close it; returns what was done."""
    if review.state != "open":
        return f"review {review.id} is already {review.state}"
    if not 1 <= chosen <= len(review.options):
        raise ValueError(f"review {review.id} has options 1 to {len(review.options)}, not {chosen}")
    option = review.options[chosen - 1]
    action = option.get("action")
    ep = episodes_sql.get_episode(store.conn, review.episode_id) if review.episode_id else None
    if review.episode_id and (ep is None or ep.status == "forgotten"):
        done = f"memory {review.episode_id} was forgotten meanwhile; nothing to apply"
        log.info("review %d: %s", review.id, done)
        _close(store, review, "dismissed", done, chosen, by)
        return done
    if ep is not None and ep.status == "superseded" and action != "forget":
        done = f"memory {ep.id} was replaced by {ep.superseded_by} meanwhile; nothing to apply"
        _close(store, review, "dismissed", done, chosen, by)
        return done
    reason = f"review {review.id}: {option.get('label', action)}"
    if ep is None or action not in ACTIONS:
        raise JobRejected(f"review {review.id} option {chosen} has no action Engram knows ({action!r})")
    if action == "stale":
        revise.mark(store, ep.id, "stale", job_type=REVIEW, reason=f"{reason} ({review.context[:300]})",
                    head_commit=review.created_commit)
        done = f"{ep.id} marked stale"
    elif action == "archive":
        revise.mark(store, ep.id, "archived", job_type=REVIEW, reason=reason)
        done = f"{ep.id} archived"
    elif action == "valid":
        revise.mark(store, ep.id, "active", job_type=REVIEW, reason=reason, verdict="valid",
                    head_commit=review.created_commit)
        done = f"{ep.id} kept as it is"
    elif action == "forget":
        store.forget(ep.id)
        with write_transaction(store.conn):
            cold_sql.record_action(store.conn, now_ms(), REVIEW, "forget", episode_id=ep.id, detail=reason)
        done = f"{ep.id} forgotten"
    else:
        replacements = tuple((str(a), str(b)) for a, b in option.get("replacements") or [])
        text = option.get("text")
        if isinstance(text, str) and text.strip():
            new_id = revise.new_version(store, ep, text.strip()[:200], text.strip(), ep.entities, job_type=REVIEW,
                                        reason=reason)
        elif replacements:
            new_id = revise.rewrite(store, ep, replacements, job_type=REVIEW, reason=reason)
        else:
            raise JobRejected(f"review {review.id} option {chosen} says rewrite but gives no text or replacements")
        done = f"{ep.id} rewritten as {new_id}"
    _close(store, review, "resolved", done, chosen, by)
    return done


def _close(store: EpisodeStore, review: Review, state: str, resolution: str, chosen: int | None, by: str) -> None:
    stamp = now_ms()
    with write_transaction(store.conn):
        cold_sql.close_review(store.conn, review.id, state, stamp, by=by, resolution=resolution, chosen=chosen)
        cold_sql.record_action(store.conn, stamp, by if by in ("curator", REVIEW) else REVIEW, f"review_{state}",
                               episode_id=review.episode_id, review_id=review.id, detail=resolution)


def dedupe_key(review_id: int) -> str:
    return f"{REVIEW}:{review_id}"


def find_due(check: DueCheck) -> list[DueJob]:
    """A job for every open review someone has chosen an option for."""
    return [DueJob(dedupe_key(r.id), {"review": r.id}, f"review {r.id}: option {r.chosen} was chosen")
            for r in cold_sql.chosen_open_reviews(check.conn)]


def review_job(ctx: JobContext, job: JobRow) -> None:
    review_id = job.payload.get("review")
    if not isinstance(review_id, int):
        raise JobRejected(f"review job #{job.id} has no review id in {job.payload!r}")
    review = cold_sql.get_review(ctx.conn, review_id)
    if review is None:
        raise JobRejected(f"review {review_id} does not exist")
    if review.state != "open" or review.chosen is None:
        log.info("review %d is %s; nothing to apply", review_id, review.state)
        return
    log.info("review %d: %s", review_id, apply_choice(ctx.store, review, review.chosen, by="person"))


# No LLM: a person's choice is applied while the budget or the breaker pauses LLM jobs.
JOB_TYPE = JobType(REVIEW, review_job, priority=0, uses_llm=False, due=find_due)
