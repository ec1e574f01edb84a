"""What `engram review` does: list the open reviews, walk them in the terminal, and apply a choice as a job.

A choice is recorded on the review and applied by a ``review`` job, run here at once (the running
processor's worker may take it first: the queue hands a job to exactly one worker).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

import apsw

from processor.config import Settings
from processor.jobs.queue import JobRunner
from processor.jobs.reviews import JOB_TYPE, REVIEW, dedupe_key
from processor.store import cold as cold_sql
from processor.store import jobs as jobs_sql
from processor.store import open_store, write_transaction
from processor.store.cold import Review


def list_open(settings: Settings) -> list[dict[str, Any]]:
    conn = open_store(settings.db_path)
    try:
        return [r.as_dict() for r in cold_sql.open_reviews(conn)]
    finally:
        conn.close()


def choose(settings: Settings, review_id: int, option: int) -> str:
    """Record option `option` (1-based) of an open review, and apply it through the queue; returns the outcome."""
    conn = open_store(settings.db_path)
    try:
        record_choice(conn, review_id, option)
    finally:
        conn.close()
    JobRunner(settings, backend=None).run_until_idle(sweep=False, only={REVIEW})
    conn = open_store(settings.db_path)
    try:
        after = cold_sql.get_review(conn, review_id)
    finally:
        conn.close()
    if after is None or after.state == "open":
        return f"review {review_id}: option {option} recorded; the processor applies it"
    return f"review {review_id} {after.state}: {after.resolution}"


def record_choice(conn: apsw.Connection, review_id: int, option: int) -> None:
    """Option `option` (1-based) of an open review, recorded with the review job that applies it, in one
    transaction (the CLI then runs that job; in the processor its worker does)."""
    review = cold_sql.get_review(conn, review_id)
    if review is None:
        raise LookupError(f"no review {review_id}; `engram review --list` shows the open ones")
    if review.state != "open":
        raise LookupError(f"review {review_id} is already {review.state} ({review.resolution})")
    if not 1 <= option <= len(review.options):
        raise ValueError(f"review {review_id} has options 1 to {len(review.options)}, not {option}")
    with write_transaction(conn):
        cold_sql.choose_review(conn, review_id, option)
        jobs_sql.insert_job(conn, REVIEW, dedupe_key(review_id), JOB_TYPE.priority, {"review": review_id}, _now())


def _now() -> int:
    from processor.clock import now_ms
    return now_ms()


def format_review(r: Review | dict[str, Any]) -> str:
    d = r.as_dict() if isinstance(r, Review) else r
    lines = [f"Review {d['id']} ({d['kind']}, memory {d['episode_id'] or '-'}): {d['question']}"]
    if d["context"]:
        lines.append(f"  why: {d['context']}")
    lines += [f"  {i}. {o.get('label', o.get('action'))}" for i, o in enumerate(d["options"], 1)]
    return "\n".join(lines)


def walk(settings: Settings, read: Callable[[str], str] = input, out: TextIO | None = None) -> int:
    """Each open review in turn: a number applies that option, s skips, q quits; returns how many were applied."""
    out = out or sys.stdout
    applied = 0
    reviews = list_open(settings)
    if not reviews:
        print("No open reviews.", file=out)
        return 0
    for review in reviews:
        print(format_review(review), file=out)
        while True:
            try:
                answer = read(f"[1-{len(review['options'])}, s=skip, q=quit] ").strip().lower()
            except EOFError:
                return applied
            if answer == "q":
                return applied
            if answer in ("s", ""):
                break
            if answer.isdigit() and 1 <= int(answer) <= len(review["options"]):
                print(choose(settings, review["id"], int(answer)), file=out)
                applied += 1
                break
            print("type an option's number, s or q", file=out)
    return applied
