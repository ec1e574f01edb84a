"""The cold path's SQL: memory checks, reviews, the action record, sweeps, context checks and stats.

Callers own the transaction; these functions only run statements (the episodes themselves are
written through ``processor.store.episodes``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import apsw

from processor.redaction import Redacted, redacted, redacted_json
from processor.store.episodes import EPISODE_COLUMNS, Episode
from processor.store.in_list import rows_in

# --- memories the inquisitor checks ------------------------------------------------------------


@dataclass(frozen=True)
class LastCheck:
    episode_id: str
    checked_at: int
    head_commit: str | None
    verdict: str
    reason: str


def memories_to_check(conn: apsw.Connection, project: str | None = None) -> list[tuple[Episode, LastCheck | None]]:
    """Active memories (not verbatim rounds) of a project, or of every project, with their last check."""
    where = "e.status = 'active' AND e.scope = 'project' AND e.project IS NOT NULL AND e.source_type != 'verbatim'"
    params: tuple[Any, ...] = ()
    if project is not None:
        where += " AND e.project = ?"
        params = (project,)
    cols = ", ".join(f"e.{c.strip()}" for c in EPISODE_COLUMNS.split(","))
    rows = conn.execute(
        f"SELECT {cols}, c.episode_id, c.checked_at, c.head_commit, c.verdict, c.reason FROM episodes e "
        f"LEFT JOIN memory_checks c ON c.episode_id = e.id WHERE {where} ORDER BY e.created_at", params).fetchall()
    out = []
    for row in rows:
        ep = Episode.from_row(row[:19])
        check = LastCheck(*row[19:]) if row[19] is not None else None
        out.append((ep, check))
    return out


def projects_with_memories(conn: apsw.Connection) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT DISTINCT project FROM episodes WHERE status = 'active' AND scope = 'project' "
        "AND project IS NOT NULL AND source_type != 'verbatim'")]


def record_check(conn: apsw.Connection, episode_id: str, now_ms: int, head_commit: str | None, verdict: str,
                 reason: Redacted) -> None:
    conn.execute(
        "INSERT INTO memory_checks(episode_id, checked_at, head_commit, verdict, reason) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT(episode_id) DO UPDATE SET checked_at = excluded.checked_at, head_commit = excluded.head_commit, "
        "verdict = excluded.verdict, reason = excluded.reason",
        (episode_id, now_ms, head_commit, verdict, redacted(reason[:1000])))


def checks_for(conn: apsw.Connection, episode_ids: list[str]) -> dict[str, LastCheck]:
    rows = rows_in(conn, "SELECT episode_id, checked_at, head_commit, verdict, reason FROM memory_checks "
                         "WHERE episode_id IN ({marks})", episode_ids)
    return {r[0]: LastCheck(*r) for r in rows}


def set_status(conn: apsw.Connection, episode_id: str, status: str, now_ms: int) -> None:
    """stale / archived / active: the content stays; only what the memory counts as changes."""
    conn.execute("UPDATE episodes SET status = ?, valid_to = CASE WHEN ? = 'active' THEN NULL "
                 "ELSE COALESCE(valid_to, ?) END WHERE id = ? AND status != 'forgotten'",
                 (status, status, now_ms, episode_id))


def supersede_into(conn: apsw.Connection, old_ids: list[str], new_id: str, now_ms: int) -> list[str]:
    """Mark these superseded by new_id; returns the ones that were still active (the others are left alone)."""
    return [old for old in old_ids if conn.execute(
        "UPDATE episodes SET status = 'superseded', superseded_by = ?, valid_to = COALESCE(valid_to, ?) "
        "WHERE id = ? AND status = 'active' RETURNING id", (new_id, now_ms, old)).fetchall()]


def superseded_by_change(conn: apsw.Connection, episode_ids: list[str]) -> set[str]:
    """Which of these were superseded because a newer episode stated a change (job type 'recency'), not as a
    version of the same memory."""
    return {row[0] for row in rows_in(conn, "SELECT episode_id FROM cold_actions WHERE job_type = 'recency' "
                                            "AND action = 'superseded' AND episode_id IN ({marks})", episode_ids)}


def reinstate(conn: apsw.Connection, episode_id: str, successor_id: str) -> None:
    """Active again: the memory that had superseded it is gone."""
    conn.execute("UPDATE episodes SET status = 'active', superseded_by = NULL, valid_to = NULL "
                 "WHERE id = ? AND status = 'superseded' AND superseded_by = ?", (episode_id, successor_id))


def archive(conn: apsw.Connection, ids: list[str], now_ms: int) -> list[str]:
    """Archive these; returns the ones that were still active (the others are left alone)."""
    return [i for i in ids if conn.execute(
        "UPDATE episodes SET status = 'archived', valid_to = COALESCE(valid_to, ?) "
        "WHERE id = ? AND status = 'active' RETURNING id", (now_ms, i)).fetchall()]


def episode_embedding(conn: apsw.Connection, episode_id: str) -> bytes | None:
    row = conn.execute("SELECT embedding FROM episodes WHERE id = ?", (episode_id,)).fetchone()
    return row[0] if row else None


# --- consolidation sweeps -----------------------------------------------------------------------


def active_counts_by_project(conn: apsw.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT project, count(*) FROM episodes WHERE status = 'active' AND scope = 'project' "
                             "AND project IS NOT NULL GROUP BY project").fetchall())


_SWEEP_COLUMNS = "rowid, id, created_at, importance, kind, source_type, access_count, content_hash, embedding, summary"


@dataclass(frozen=True)
class SweepRow:
    rowid: int
    id: str
    created_at: int
    importance: str
    kind: str
    source_type: str
    access_count: int
    content_hash: str
    embedding: bytes | None
    summary: str


def sweep_rows(conn: apsw.Connection, project: str) -> list[SweepRow]:
    """A project's active memories with what pass 1 decides on, oldest first."""
    return [SweepRow(*r) for r in conn.execute(
        f"SELECT {_SWEEP_COLUMNS} FROM episodes WHERE status = 'active' AND project = ? AND scope = 'project' "
        "ORDER BY created_at, rowid", (project,))]


def sweep_rows_page(conn: apsw.Connection, project: str, after_rowid: int, limit: int) -> list[SweepRow]:
    """The next `limit` of a project's active memories by rowid: a long sweep reads its rows a page at a time."""
    return [SweepRow(*r) for r in conn.execute(
        f"SELECT {_SWEEP_COLUMNS} FROM episodes WHERE status = 'active' AND project = ? AND scope = 'project' "
        "AND rowid > ? ORDER BY rowid LIMIT ?", (project, after_rowid, limit))]


def record_sweep(conn: apsw.Connection, project: str | None, pass_no: int, started: int, finished: int,
                 pressure: float, merged: int, archived: int, consolidated: int) -> None:
    conn.execute("INSERT INTO sweeps(project, pass, started_at, finished_at, pressure, merged, archived, consolidated)"
                 " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 (project, pass_no, started, finished, pressure, merged, archived, consolidated))


def last_sweep_at(conn: apsw.Connection, project: str, pass_no: int) -> int | None:
    row = conn.execute("SELECT MAX(finished_at) FROM sweeps WHERE project = ? AND pass = ?",
                       (project, pass_no)).fetchone()
    return row[0] if row else None


# --- reviews ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Review:
    id: int
    episode_id: str | None
    project: str | None
    kind: str
    question: str
    options: list[dict[str, Any]]
    context: str
    created_commit: str | None
    created_at: int
    state: str
    chosen: int | None
    resolution: str | None
    merged_into: int | None
    resolved_at: int | None
    resolved_by: str | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


_REVIEW_COLUMNS = ("id, episode_id, project, kind, question, options, context, created_commit, created_at, state, "
                   "chosen, resolution, merged_into, resolved_at, resolved_by")


def _review(row: tuple[Any, ...]) -> Review:
    values = list(row)
    try:
        options = json.loads(values[5] or "[]")
    except ValueError:
        options = []
    values[5] = [o for o in options if isinstance(o, dict)] if isinstance(options, list) else []
    return Review(*values)


def insert_review(conn: apsw.Connection, episode_id: str | None, project: str | None, kind: str, question: Redacted,
                  options: list[dict[str, Any]], context: Redacted, created_commit: str | None, now_ms: int) -> int:
    """A judgement call for a person; its question, options and context quote memories: through the door."""
    conn.execute("INSERT INTO reviews(episode_id, project, kind, question, options, context, created_commit, "
                 "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 (episode_id, project, kind, redacted(question), redacted_json(options), redacted(context[:4000]),
                  created_commit, now_ms))
    return conn.last_insert_rowid()


def open_reviews(conn: apsw.Connection) -> list[Review]:
    return [_review(r) for r in conn.execute(
        f"SELECT {_REVIEW_COLUMNS} FROM reviews WHERE state = 'open' ORDER BY created_at, id")]


def get_review(conn: apsw.Connection, review_id: int) -> Review | None:
    row = conn.execute(f"SELECT {_REVIEW_COLUMNS} FROM reviews WHERE id = ?", (review_id,)).fetchone()
    return _review(row) if row else None


def open_review_for(conn: apsw.Connection, episode_id: str, kind: str) -> int | None:
    row = conn.execute("SELECT id FROM reviews WHERE episode_id = ? AND kind = ? AND state = 'open' LIMIT 1",
                       (episode_id, kind)).fetchone()
    return row[0] if row else None


def close_review(conn: apsw.Connection, review_id: int, state: str, now_ms: int, *, by: str,
                 resolution: Redacted, chosen: int | None = None, merged_into: int | None = None) -> None:
    conn.execute("UPDATE reviews SET state = ?, chosen = ?, resolution = ?, merged_into = ?, resolved_at = ?, "
                 "resolved_by = ? WHERE id = ? AND state = 'open'",
                 (state, chosen, redacted(resolution[:1000]), merged_into, now_ms, by, review_id))


def choose_review(conn: apsw.Connection, review_id: int, chosen: int) -> None:
    """Record a person's choice; the review job applies it and closes the review."""
    conn.execute("UPDATE reviews SET chosen = ? WHERE id = ? AND state = 'open'", (chosen, review_id))


def open_review_fingerprint(conn: apsw.Connection) -> str:
    """Changes whenever the set of open reviews changes (the curator's trigger)."""
    row = conn.execute("SELECT count(*), COALESCE(MAX(id), 0), COALESCE(SUM(id), 0), "
                       "COALESCE(SUM(chosen IS NOT NULL), 0) FROM reviews WHERE state = 'open'").fetchone()
    return "/".join(str(v) for v in row)


from processor.store.digest import open_review_count  # noqa: E402,F401 - the hook's query, any connection


def chosen_open_reviews(conn: apsw.Connection) -> list[Review]:
    return [_review(r) for r in conn.execute(
        f"SELECT {_REVIEW_COLUMNS} FROM reviews WHERE state = 'open' AND chosen IS NOT NULL ORDER BY id")]


# --- the action record ----------------------------------------------------------------------------


def record_action(conn: apsw.Connection, now_ms: int, job_type: str, action: str, *, episode_id: str | None = None,
                  review_id: int | None = None, detail: Redacted | str = "") -> None:
    conn.execute("INSERT INTO cold_actions(at, job_type, action, episode_id, review_id, detail) "
                 "VALUES (?, ?, ?, ?, ?, ?)", (now_ms, job_type, action, episode_id, review_id,
                                               redacted(detail[:2000])))


def actions(conn: apsw.Connection, job_type: str | None = None) -> list[tuple[Any, ...]]:
    where, params = ("WHERE job_type = ?", (job_type,)) if job_type else ("", ())
    return conn.execute(f"SELECT at, job_type, action, episode_id, review_id, detail FROM cold_actions {where} "
                        "ORDER BY id", params).fetchall()


# --- context checks -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContextCheck:
    measured_at: int
    digest_tokens: int
    bites_per_message: float
    bite_tokens: float
    messages_per_session: float
    session_tokens: int
    budget_tokens: int
    ratio: float
    detail: dict[str, Any]


def record_context_check(conn: apsw.Connection, c: ContextCheck) -> None:
    conn.execute("INSERT INTO context_checks(measured_at, digest_tokens, bites_per_message, bite_tokens, "
                 "messages_per_session, session_tokens, budget_tokens, ratio, detail) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (c.measured_at, c.digest_tokens, c.bites_per_message, c.bite_tokens, c.messages_per_session,
                  c.session_tokens, c.budget_tokens, c.ratio, redacted_json(c.detail)))


def latest_context_check(conn: apsw.Connection) -> ContextCheck | None:
    try:
        row = conn.execute("SELECT measured_at, digest_tokens, bites_per_message, bite_tokens, messages_per_session, "
                           "session_tokens, budget_tokens, ratio, detail FROM context_checks "
                           "ORDER BY measured_at DESC, id DESC LIMIT 1").fetchone()
    except apsw.SQLError:  # a database from before the cold path
        return None
    if row is None:
        return None
    try:
        detail = json.loads(row[8])
    except ValueError:
        detail = {}
    return ContextCheck(*row[:8], detail=detail if isinstance(detail, dict) else {})


def recent_user_message_counts(conn: apsw.Connection, since_ms: int) -> list[int]:
    """User messages per session active since a time (how many prompts a session has, on average)."""
    return [r[0] for r in conn.execute(
        "SELECT count(*) FROM messages m JOIN sessions s USING (session_id) WHERE s.last_activity >= ? "
        "AND m.role = 'user' GROUP BY m.session_id", (since_ms,))]


def recent_projects(conn: apsw.Connection, since_ms: int) -> list[str]:
    return [r[0] for r in conn.execute("SELECT DISTINCT project FROM sessions WHERE last_activity >= ? "
                                       "AND project IS NOT NULL", (since_ms,))]


# --- stats --------------------------------------------------------------------------------------


def memory_breakdown(conn: apsw.Connection) -> list[tuple[str | None, str, str, int]]:
    """(project, kind, status, count) for every combination present."""
    return conn.execute("SELECT project, kind, status, count(*) FROM episodes GROUP BY project, kind, status "
                        "ORDER BY project, kind, status").fetchall()


def sweep_totals(conn: apsw.Connection) -> dict[str, int]:
    row = conn.execute("SELECT count(*), COALESCE(SUM(merged), 0), COALESCE(SUM(archived), 0), "
                       "COALESCE(SUM(consolidated), 0) FROM sweeps").fetchone()
    return {"sweeps": row[0], "merged": row[1], "archived": row[2], "consolidated": row[3]}


def verdict_counts(conn: apsw.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT verdict, count(*) FROM memory_checks GROUP BY verdict").fetchall())


def review_counts(conn: apsw.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT state, count(*) FROM reviews GROUP BY state").fetchall())


def spend_by_job_type(conn: apsw.Connection) -> dict[str, dict[str, float]]:
    return {r[0] or "(none)": {"calls": r[1], "usd": round(r[2], 6)} for r in conn.execute(
        "SELECT job_type, count(*), COALESCE(SUM(cost_usd), 0) FROM llm_calls GROUP BY job_type")}


def action_counts(conn: apsw.Connection) -> dict[str, int]:
    return {f"{r[0]}.{r[1]}": r[2] for r in conn.execute(
        "SELECT job_type, action, count(*) FROM cold_actions GROUP BY job_type, action")}
