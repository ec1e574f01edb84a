"""The SQL the web viewer and the injection ledger need: timelines, projects, versions, spend, injections.

Callers own the transaction; these functions only run statements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import apsw

from processor.redaction import Redacted, redacted, redacted_json
from processor.store.episodes import EPISODE_COLUMNS, Episode

# --- injections: what reached the agent ----------------------------------------------------------


@dataclass(frozen=True)
class Injection:
    id: int
    session_id: str
    kind: str  # 'bites' | 'digest'
    message_uuid: str | None
    offered_at: int
    injected_at: int
    content: str  # bites as JSON, or the digest text
    answered: str | None = None  # the text of the user message the bites answered


def record_offer(conn: apsw.Connection, session_id: str, message_uuid: str, bites: list[dict[str, Any]],
                 now_ms: int) -> None:
    """The bites offered for one user message (a rewrite of its recollection file replaces them); stored as JSON,
    each string through the door."""
    conn.execute(
        "INSERT INTO recollection_offers (session_id, message_uuid, offered_at, content) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (session_id, message_uuid) DO UPDATE SET offered_at = excluded.offered_at, "
        "content = excluded.content",
        (session_id, message_uuid, now_ms, redacted_json(bites, ensure_ascii=False)),
    )


def mark_injected(conn: apsw.Connection, session_id: str, message_uuid: str, injected_at: int) -> int:
    """Record the hook's injection of an offer; returns 1 if this is news, else 0."""
    conn.execute(
        "INSERT OR IGNORE INTO injections (session_id, kind, message_uuid, offered_at, injected_at, content) "
        "SELECT session_id, 'bites', message_uuid, offered_at, ?, content FROM recollection_offers "
        "WHERE session_id = ? AND message_uuid = ?", (injected_at, session_id, message_uuid))
    return conn.changes()


def prune_offers(conn: apsw.Connection, before_ms: int) -> int:
    conn.execute("DELETE FROM recollection_offers WHERE offered_at < ?", (before_ms,))
    return conn.changes()


TOLD_PREFIX = "tool:"  # the message_uuid of a memory told about a tool call (once per session)


def not_told(conn: apsw.Connection, session_id: str, episode_ids: list[str]) -> list[str]:
    """Of these memories, those not yet recorded as told about a tool call in this session."""
    if not episode_ids:
        return []
    marks = ",".join("?" * len(episode_ids))
    recorded = {row[0][len(TOLD_PREFIX):] for row in conn.execute(
        f"SELECT message_uuid FROM injections WHERE kind = 'bites' AND session_id = ? AND message_uuid IN ({marks})",
        [session_id, *(TOLD_PREFIX + i for i in episode_ids)])}
    return [i for i in episode_ids if i not in recorded]


def insert_told(conn: apsw.Connection, session_id: str, episode_id: str, bites: list[dict[str, Any]],
                told_at: int) -> int:
    """Record a memory the PreToolUse hook told about a file or command (as its bites' JSON); 0 when it is
    recorded already."""
    conn.execute(
        "INSERT OR IGNORE INTO injections (session_id, kind, message_uuid, offered_at, injected_at, content) "
        "VALUES (?, 'bites', ?, ?, ?, ?)",
        (session_id, TOLD_PREFIX + episode_id, told_at, told_at, redacted_json(bites, ensure_ascii=False)))
    return conn.changes()


@dataclass(frozen=True)
class Told:
    """How often a memory reached the agent: in how many sessions, how many times, and when last."""

    sessions: int
    times: int
    last_at: int | None


def told_counts(conn: apsw.Connection, episode_ids: list[str]) -> dict[str, Told]:
    """Per memory: the sessions and times it was told (at a prompt, about a tool call, after a failure)."""
    found: dict[str, Told] = {}
    for start in range(0, len(episode_ids), 500):
        chunk = episode_ids[start:start + 500]
        rows = conn.execute(
            "SELECT json_extract(j.value, '$.id') AS memory, count(DISTINCT i.session_id), count(*), "
            "max(i.injected_at) FROM injections i, json_each(i.content) j WHERE i.kind = 'bites' "
            "AND json_valid(i.content) AND json_extract(j.value, '$.id') IN "
            f"({','.join('?' * len(chunk))}) GROUP BY memory", chunk)
        found.update((row[0], Told(row[1], row[2], row[3])) for row in rows)
    return found


def told_sessions(conn: apsw.Connection, episode_ids: list[str]) -> dict[str, set[str]]:
    """The sessions each of these memories was told in (at a prompt, about a tool call, after a failure)."""
    found: dict[str, set[str]] = {}
    for start in range(0, len(episode_ids), 500):
        chunk = episode_ids[start:start + 500]
        rows = conn.execute(
            "SELECT DISTINCT json_extract(j.value, '$.id'), i.session_id FROM injections i, json_each(i.content) j "
            "WHERE i.kind = 'bites' AND json_valid(i.content) AND json_extract(j.value, '$.id') IN "
            f"({','.join('?' * len(chunk))})", chunk)
        for episode_id, session_id in rows:
            found.setdefault(episode_id, set()).add(session_id)
    return found


def injections_stamp(conn: apsw.Connection) -> int:
    """Changes whenever an injection is recorded."""
    return conn.execute("SELECT coalesce(max(id), 0) FROM injections").fetchone()[0]


def insert_digest(conn: apsw.Connection, session_id: str, text: Redacted, injected_at: int) -> int:
    """Record a digest shown at `injected_at`; 0 when that one is recorded already."""
    conn.execute(
        "INSERT OR IGNORE INTO injections (session_id, kind, offered_at, injected_at, content) "
        "VALUES (?, 'digest', ?, ?, ?)", (session_id, injected_at, injected_at, redacted(text)))
    return conn.changes()


_INJECTION_SELECT = (
    "SELECT i.id, i.session_id, i.kind, i.message_uuid, i.offered_at, i.injected_at, i.content, m.text "
    "FROM injections i LEFT JOIN messages m ON m.uuid = i.message_uuid "
)


def session_injections(conn: apsw.Connection, session_id: str, after_id: int = 0, since_ms: int = 0,
                       until_ms: int = 1 << 62) -> list[Injection]:
    """Injections that reached the agent in this session (newer than after_id, in a time window), oldest first."""
    rows = conn.execute(_INJECTION_SELECT + "WHERE i.session_id = ? AND i.id > ? AND i.injected_at >= ? "
                        "AND i.injected_at < ? ORDER BY i.id", (session_id, after_id, since_ms, until_ms))
    return [Injection(*row) for row in rows]


def project_injections(conn: apsw.Connection, project: str | None, limit: int = 20) -> list[Injection]:
    """The newest injections in the sessions of one project, newest first."""
    rows = conn.execute(_INJECTION_SELECT + "JOIN sessions s ON s.session_id = i.session_id WHERE s.project IS ? "
                        "ORDER BY i.injected_at DESC, i.id DESC LIMIT ?", (project, limit))
    return [Injection(*row) for row in rows]


# --- timeline ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimelineMessage:
    """One captured message as a timeline row shows it."""

    id: int
    uuid: str
    role: str
    ts_ms: int | None
    text: str


def session_info(conn: apsw.Connection, session_id: str) -> tuple[str, str | None, int | None, str] | None:
    """(transcript path, project, last activity, agent) of one session."""
    row = conn.execute("SELECT transcript_path, project, last_activity, agent FROM sessions WHERE session_id = ?",
                       (session_id,)).fetchone()
    return (row[0], row[1], row[2], row[3]) if row else None


def session_messages(conn: apsw.Connection, session_id: str, after_id: int = 0, before_id: int = 1 << 62,
                     limit: int = 100_000) -> list[TimelineMessage]:
    """The newest `limit` messages with after_id < id < before_id, oldest first."""
    rows = conn.execute("SELECT id, uuid, role, ts_ms, text FROM messages WHERE session_id = ? AND id > ? AND id < ? "
                        "ORDER BY id DESC LIMIT ?", (session_id, after_id, before_id, limit)).fetchall()
    rows.reverse()
    return [TimelineMessage(*row) for row in rows]


def message_time(conn: apsw.Connection, message_id: int) -> int | None:
    row = conn.execute("SELECT ts_ms FROM messages WHERE id = ?", (message_id,)).fetchone()
    return row[0] if row else None


class TimelineMemory(NamedTuple):
    rowid: int
    id: str
    created_at: int
    summary: str
    source_type: str
    kind: str
    status: str


def session_episodes(conn: apsw.Connection, session_id: str, after_rowid: int = 0, since_ms: int = 0,
                     until_ms: int = 1 << 62) -> list[TimelineMemory]:
    """The memories built from this session (in a time window), oldest first: the columns a timeline row shows."""
    rows = conn.execute("SELECT rowid, id, created_at, summary, source_type, kind, status FROM episodes "
                        "WHERE session_id = ? AND rowid > ? AND created_at >= ? AND created_at < ? "
                        "ORDER BY created_at, rowid", (session_id, after_rowid, since_ms, until_ms))
    return [TimelineMemory(*row) for row in rows]


@dataclass(frozen=True)
class ProjectSummary:
    project: str | None
    sessions: int
    messages: int
    last_activity: int | None


def projects(conn: apsw.Connection) -> list[ProjectSummary]:
    rows = conn.execute(
        "SELECT s.project, count(*), "
        "COALESCE(SUM((SELECT count(*) FROM messages m WHERE m.session_id = s.session_id)), 0), MAX(s.last_activity) "
        "FROM sessions s GROUP BY s.project ORDER BY MAX(s.last_activity) DESC")
    return [ProjectSummary(*row) for row in rows]


@dataclass(frozen=True)
class SessionRow:
    session_id: str
    project: str | None
    last_activity: int | None
    messages: int
    memories: int
    injections: int
    agent: str


def project_sessions(conn: apsw.Connection, project: str | None, limit: int = 200) -> list[SessionRow]:
    rows = conn.execute(
        "SELECT s.session_id, s.project, s.last_activity, "
        "(SELECT count(*) FROM messages m WHERE m.session_id = s.session_id), "
        "(SELECT count(*) FROM episodes e WHERE e.session_id = s.session_id), "
        "(SELECT count(*) FROM injections i WHERE i.session_id = s.session_id), s.agent "
        "FROM sessions s WHERE s.project IS ? ORDER BY s.last_activity DESC LIMIT ?", (project, limit))
    return [SessionRow(*row) for row in rows]


def project_statements(conn: apsw.Connection, project: str | None, limit: int = 500) -> list[Episode]:
    """The project's active memories that are not verbatim rounds, newest first: what may be told unasked is
    among them."""
    rows = conn.execute(f"SELECT {EPISODE_COLUMNS} FROM episodes WHERE project IS ? AND status = 'active' "
                        "AND source_type != 'verbatim' ORDER BY created_at DESC LIMIT ?", (project, limit))
    return [Episode.from_row(row) for row in rows]


def project_memories(conn: apsw.Connection, project: str | None, limit: int = 50) -> list[Episode]:
    rows = conn.execute(f"SELECT {EPISODE_COLUMNS} FROM episodes WHERE project IS ? AND status = 'active' "
                        "ORDER BY created_at DESC LIMIT ?", (project, limit))
    return [Episode.from_row(row) for row in rows]


# --- one memory ----------------------------------------------------------------------------------


def predecessors(conn: apsw.Connection, episode_id: str) -> list[Episode]:
    """The versions this one replaced, newest first (following superseded_by backwards)."""
    rows = conn.execute(
        f"""
        WITH RECURSIVE chain(id, depth) AS (
            SELECT id, 1 FROM episodes WHERE superseded_by = ?
            UNION SELECT e.id, c.depth + 1 FROM episodes e JOIN chain c ON e.superseded_by = c.id WHERE c.depth < 100
        )
        SELECT {EPISODE_COLUMNS} FROM episodes WHERE id IN (SELECT id FROM chain) ORDER BY created_at DESC
        """, (episode_id,))
    return [Episode.from_row(row) for row in rows]


def successors(conn: apsw.Connection, episode_id: str) -> list[Episode]:
    """The versions that replaced this one, oldest first."""
    found: list[Episode] = []
    current = conn.execute("SELECT superseded_by FROM episodes WHERE id = ?", (episode_id,)).fetchone()
    next_id = current[0] if current else None
    while next_id and len(found) < 100 and all(e.id != next_id for e in found):
        row = conn.execute(f"SELECT {EPISODE_COLUMNS} FROM episodes WHERE id = ?", (next_id,)).fetchone()
        if row is None:
            break
        found.append(Episode.from_row(row))
        next_id = found[-1].superseded_by
    return found


@dataclass(frozen=True)
class SourceLine:
    uuid: str
    session_id: str
    role: str
    text: str
    ts_ms: int | None
    transcript_path: str | None
    line_offset: int


def source_lines(conn: apsw.Connection, uuids: list[str]) -> list[SourceLine]:
    """The captured messages a memory came from, with the transcript file and byte offset of each line."""
    found: dict[str, SourceLine] = {}
    for uuid in uuids:
        row = conn.execute(
            "SELECT m.uuid, m.session_id, m.role, m.text, m.ts_ms, s.transcript_path, m.line_offset "
            "FROM messages m LEFT JOIN sessions s ON s.session_id = m.session_id WHERE m.uuid = ?", (uuid,)).fetchone()
        if row:
            found[uuid] = SourceLine(*row)
    return [found[u] for u in uuids if u in found]


def set_status(conn: apsw.Connection, episode_id: str, status: str, now_ms: int) -> int:
    """Mark an active memory stale, or restore a stale one that nothing superseded; returns rows changed."""
    if status == "stale":
        conn.execute("UPDATE episodes SET status = 'stale', valid_to = ? WHERE id = ? AND status = 'active'",
                     (now_ms, episode_id))
    elif status == "active":
        conn.execute("UPDATE episodes SET status = 'active', valid_to = NULL WHERE id = ? AND status = 'stale' "
                     "AND superseded_by IS NULL", (episode_id,))
    else:
        raise ValueError(f"cannot set status {status!r} here")
    return conn.changes()


def set_importance(conn: apsw.Connection, episode_id: str, importance: str) -> int:
    conn.execute("UPDATE episodes SET importance = ? WHERE id = ? AND status != 'forgotten'", (importance, episode_id))
    return conn.changes()


# --- spend and jobs ------------------------------------------------------------------------------


def llm_calls_per_day(conn: apsw.Connection, since_ms: int) -> list[tuple[str, int, float, int]]:
    """(UTC day, calls, USD, failed calls) per day since since_ms, oldest first."""
    rows = conn.execute(
        "SELECT date(started_at / 1000, 'unixepoch'), count(*), COALESCE(SUM(cost_usd), 0), SUM(ok = 0) "
        "FROM llm_calls WHERE started_at >= ? GROUP BY 1 ORDER BY 1", (since_ms,))
    return [(day, int(calls), float(usd), int(failed or 0)) for day, calls, usd, failed in rows]


@dataclass(frozen=True)
class Failure:
    at: int
    what: str
    error: str


def recent_failures(conn: apsw.Connection, limit: int = 20) -> list[Failure]:
    """Failed jobs and failed LLM calls, newest first, each with its error."""
    rows = conn.execute(
        "SELECT at, what, error FROM ("
        " SELECT updated_at AS at, 'job ' || id || ' (' || type || ', ' || state || ', ' || attempts || ' attempts)'"
        " AS what, last_error AS error FROM jobs WHERE last_error IS NOT NULL AND state IN ('failed', 'pending')"
        " UNION ALL"
        " SELECT started_at, 'LLM call ' || backend || ' ' || model, COALESCE(error, 'failed') FROM llm_calls"
        " WHERE ok = 0"
        ") ORDER BY at DESC LIMIT ?", (limit,))
    return [Failure(*row) for row in rows]


# --- what changed: the live updates' cursor --------------------------------------------------------


class Cursor(NamedTuple):
    """How far the live updates have seen: the newest message, episode and injection, compared as one."""

    message_id: int
    episode_rowid: int
    injection_id: int


def cursor(conn: apsw.Connection) -> Cursor:
    row = conn.execute(
        "SELECT (SELECT COALESCE(MAX(id), 0) FROM messages), (SELECT COALESCE(MAX(rowid), 0) FROM episodes), "
        "(SELECT COALESCE(MAX(id), 0) FROM injections)").fetchone()
    return Cursor(*row)


def sessions_changed(conn: apsw.Connection, since: Cursor) -> list[str]:
    """Sessions with messages, memories or injections newer than `since`."""
    rows = conn.execute(
        "SELECT session_id FROM messages WHERE id > ? UNION SELECT session_id FROM episodes WHERE rowid > ? "
        "AND session_id IS NOT NULL UNION SELECT session_id FROM injections WHERE id > ?",
        (since.message_id, since.episode_rowid, since.injection_id))
    return sorted(row[0] for row in rows)
