"""The SQL for episodes (memories), their full-text index, vectors and provenance.

Callers own the transaction; these functions only run statements.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

import apsw

from processor.redaction import Redacted, redacted, redacted_list

EPISODE_COLUMNS = (
    "rowid, id, session_id, project, scope, summary, entities, importance, kind, source_type, full_content, "
    "source_uuids, created_at, accessed_at, access_count, valid_from, valid_to, superseded_by, status"
)


@dataclass(frozen=True)
class Episode:
    rowid: int
    id: str
    session_id: str | None
    project: str | None
    scope: str
    summary: str
    entities: list[str]
    importance: str
    kind: str
    source_type: str
    full_content: str
    source_uuids: list[str]
    created_at: int
    accessed_at: int
    access_count: int
    valid_from: int
    valid_to: int | None
    superseded_by: str | None
    status: str

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Episode:
        values = list(row)
        values[6] = json_list(values[6])
        values[11] = json_list(values[11])
        return cls(*values)


def json_list(text: str | None) -> list[str]:
    """A JSON list column (entities, source_uuids) as strings; [] when it is not one."""
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


@dataclass(frozen=True)
class NewEpisode:
    """A memory to write. Its texts (summary, content, entities) are what a session said: they go through the
    door (``processor.redaction``) when the episode is made, so no writer can store them unredacted."""

    id: str
    session_id: str | None
    project: str | None
    scope: str
    summary: Redacted
    entities: list[Redacted]
    importance: str
    kind: str
    source_type: str
    full_content: Redacted
    source_uuids: list[str]
    content_hash: str
    created_at: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "summary", redacted(self.summary))
        object.__setattr__(self, "full_content", redacted(self.full_content))
        object.__setattr__(self, "entities", redacted_list(self.entities))


def insert_episode(conn: apsw.Connection, ep: NewEpisode, embedding: bytes | None) -> int:
    conn.execute(
        """
        INSERT INTO episodes (id, session_id, project, scope, summary, entities, importance, kind, source_type,
                              full_content, source_uuids, content_hash, embedding, created_at, accessed_at,
                              access_count, valid_from, status)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 'active')
        """,
        (ep.id, ep.session_id, ep.project, ep.scope, ep.summary, json.dumps(ep.entities), ep.importance, ep.kind,
         ep.source_type, ep.full_content, json.dumps(ep.source_uuids), ep.content_hash, embedding, ep.created_at,
         ep.created_at, ep.created_at),
    )
    return conn.last_insert_rowid()


def get_episode(conn: apsw.Connection, episode_id: str) -> Episode | None:
    row = conn.execute(f"SELECT {EPISODE_COLUMNS} FROM episodes WHERE id = ?", (episode_id,)).fetchone()
    return Episode.from_row(row) if row else None


def episodes_by_rowid(conn: apsw.Connection, rowids: list[int]) -> dict[int, Episode]:
    if not rowids:
        return {}
    marks = ",".join("?" * len(rowids))
    rows = conn.execute(f"SELECT {EPISODE_COLUMNS} FROM episodes WHERE rowid IN ({marks})", rowids)
    return {row[0]: Episode.from_row(row) for row in rows}


def episodes_by_id(conn: apsw.Connection, episode_ids: list[str]) -> list[Episode]:
    if not episode_ids:
        return []
    marks = ",".join("?" * len(episode_ids))
    return [Episode.from_row(row) for row in conn.execute(
        f"SELECT {EPISODE_COLUMNS} FROM episodes WHERE id IN ({marks})", episode_ids)]


class RankingFacts(NamedTuple):
    """The few columns ranking needs; full rows are read only for the winners."""

    id: str
    project: str | None
    scope: str
    status: str
    importance: str
    created_at: int
    access_count: int
    accessed_at: int
    superseded_by: str | None


_FACT_COLUMNS = "rowid, id, project, scope, status, importance, created_at, access_count, accessed_at, superseded_by"


def ranking_facts(conn: apsw.Connection, rowids: list[int]) -> dict[int, RankingFacts]:
    if not rowids:
        return {}
    marks = ",".join("?" * len(rowids))
    rows = conn.execute(f"SELECT {_FACT_COLUMNS} FROM episodes WHERE rowid IN ({marks})", rowids)
    return {row[0]: RankingFacts(*row[1:]) for row in rows}


def contents_with(conn: apsw.Connection, rowids: list[int], marker: str) -> dict[int, str]:
    """The full content of those of these episodes that contain marker (most hold none: few rows come back)."""
    if not rowids:
        return {}
    marks = ",".join("?" * len(rowids))
    return dict(conn.execute(f"SELECT rowid, full_content FROM episodes WHERE rowid IN ({marks}) "
                             "AND instr(full_content, ?) > 0", [*rowids, marker]).fetchall())


def ranking_facts_by_id(conn: apsw.Connection, episode_ids: list[str]) -> dict[int, RankingFacts]:
    if not episode_ids:
        return {}
    marks = ",".join("?" * len(episode_ids))
    rows = conn.execute(f"SELECT {_FACT_COLUMNS} FROM episodes WHERE id IN ({marks})", episode_ids)
    return {row[0]: RankingFacts(*row[1:]) for row in rows}


def active_days(conn: apsw.Connection, project: str | None, after_rowid: int = 0) -> list[int]:
    """The days (UTC, as days since the epoch) on which the project's active episodes were made, ascending;
    every project's for None. One pass over an index range (idx_episodes_active_project_created);
    after_rowid: only episodes added since (a rowid range, so a cache is brought up to date cheaply)."""
    if project is None:
        rows = conn.execute("SELECT DISTINCT created_at / 86400000 FROM episodes WHERE rowid > ? ORDER BY 1",
                            (after_rowid,))
    else:
        rows = conn.execute("SELECT DISTINCT created_at / 86400000 FROM episodes WHERE status = 'active' "
                            "AND project = ? AND rowid > ? ORDER BY 1", (project, after_rowid))
    return [row[0] for row in rows]


def newest_activity(conn: apsw.Connection, project: str | None) -> int | None:
    """When the project's newest active episode was made (its transcript's time); any project's for None.

    Both read one end of an index (idx_episodes_active_project_created, idx_episodes_created).
    """
    if project is None:
        row = conn.execute("SELECT max(created_at) FROM episodes").fetchone()
    else:
        row = conn.execute("SELECT max(created_at) FROM episodes WHERE status = 'active' AND project = ?",
                           (project,)).fetchone()
    return row[0] if row else None


def active_with_hash(conn: apsw.Connection, content_hash: str, *, memories_only: bool = False) -> str | None:
    """The id of an active episode with this content hash; memories_only leaves verbatim rounds out."""
    verbatim = " AND source_type != 'verbatim'" if memories_only else ""
    row = conn.execute(
        f"SELECT id FROM episodes WHERE content_hash = ? AND status = 'active'{verbatim} LIMIT 1", (content_hash,)
    ).fetchone()
    return row[0] if row else None


def fts_candidates(conn: apsw.Connection, match: str, limit: int) -> list[tuple[int, float]]:
    """(rowid, bm25) best first; bm25() is lower-is-better, so callers negate it.

    The summary column weighs 0: summaries are the head of full_content, so counting them
    again would rank by a term's position in the text rather than by its presence.
    """
    return conn.execute(
        "SELECT rowid, bm25(episodes_fts, 0.0, 1.0, 1.0) AS score FROM episodes_fts "
        "WHERE episodes_fts MATCH ? ORDER BY score LIMIT ?",
        (match, limit),
    ).fetchall()


def fts_documents_with(conn: apsw.Connection, match: str, cap: int) -> int:
    """How many episodes match, counted no further than cap (so the cost is bounded by cap)."""
    return conn.execute("SELECT count(*) FROM (SELECT 1 FROM episodes_fts WHERE episodes_fts MATCH ? LIMIT ?)",
                        (match, cap)).fetchone()[0]


def episode_rowid_bound(conn: apsw.Connection) -> int:
    """An upper bound of the number of episodes at the cost of one index lookup (rowids only grow)."""
    return conn.execute("SELECT coalesce(max(rowid), 0) FROM episodes").fetchone()[0]


def vectors_after(conn: apsw.Connection, after_rowid: int, *, memories_only: bool = False) -> list[tuple[int, bytes]]:
    """(rowid, vector) of episodes added after a rowid; memories_only leaves verbatim rounds out."""
    verbatim = " AND source_type != 'verbatim'" if memories_only else ""
    return conn.execute(
        f"SELECT rowid, embedding FROM episodes WHERE rowid > ? AND embedding IS NOT NULL{verbatim} ORDER BY rowid",
        (after_rowid,),
    ).fetchall()


def max_rowid(conn: apsw.Connection) -> int:
    return conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM episodes").fetchone()[0]


def all_embeddable(conn: apsw.Connection) -> list[tuple[int, str, str]]:
    return conn.execute(
        "SELECT rowid, summary, full_content FROM episodes WHERE status != 'forgotten' ORDER BY rowid"
    ).fetchall()


def set_embedding(conn: apsw.Connection, rowid: int, embedding: bytes) -> None:
    conn.execute("UPDATE episodes SET embedding = ? WHERE rowid = ?", (embedding, rowid))


def touch(conn: apsw.Connection, episode_ids: list[str], now_ms: int) -> None:
    conn.executemany(
        "UPDATE episodes SET accessed_at = ?, access_count = access_count + 1 WHERE id = ?",
        [(now_ms, eid) for eid in episode_ids],
    )


def add_sources(conn: apsw.Connection, episode_id: str, source_uuids: list[str]) -> None:
    """Add transcript lines to what a memory was built from (a second statement of the same fact)."""
    if not source_uuids:
        return
    row = conn.execute("SELECT source_uuids FROM episodes WHERE id = ?", (episode_id,)).fetchone()
    if row is None:
        return
    old = json_list(row[0])
    merged = list(dict.fromkeys(old + list(source_uuids)))
    if merged != old:
        conn.execute("UPDATE episodes SET source_uuids = ? WHERE id = ?", (json.dumps(merged), episode_id))


def carry_access(conn: apsw.Connection, new_id: str, old_id: str, now_ms: int) -> None:
    """A new version keeps its predecessor's access history, plus this touch."""
    conn.execute(
        "UPDATE episodes SET access_count = (SELECT access_count FROM episodes WHERE id = ?) + 1, accessed_at = ? "
        "WHERE id = ?", (old_id, now_ms, new_id))


def forget(conn: apsw.Connection, episode_id: str, now_ms: int, reason: Redacted | None = None) -> None:
    conn.execute(
        "UPDATE episodes SET status = 'forgotten', summary = '[forgotten]', full_content = '', entities = '[]', "
        "embedding = NULL, valid_to = COALESCE(valid_to, ?), forgotten_reason = ? WHERE id = ?",
        (now_ms, redacted(reason), episode_id),
    )


def earlier_versions(conn: apsw.Connection, episode_id: str) -> list[str]:
    """The ids of the versions this memory replaced (UPDATE keeps them, superseded), newest first."""
    rows = conn.execute(
        """
        WITH RECURSIVE older(id, depth) AS (
            SELECT id, 1 FROM episodes WHERE superseded_by = ?
            UNION SELECT e.id, older.depth + 1 FROM episodes e JOIN older ON e.superseded_by = older.id
            WHERE older.depth < 1000
        )
        SELECT id FROM older ORDER BY depth
        """, (episode_id,)).fetchall()
    return [row[0] for row in rows]


def forget_candidates(conn: apsw.Connection, match: str | None, before_ms: int | None,
                      project: str | None, limit: int) -> list[Episode]:
    """Memories not yet forgotten that match all of: an FTS query, created before a time, a project."""
    where = ["e.status != 'forgotten'"]
    params: list[Any] = []
    source = "episodes e"
    if match:
        source = "episodes_fts f JOIN episodes e ON e.rowid = f.rowid"
        where.append("episodes_fts MATCH ?")
        params.append(match)
    if before_ms is not None:
        where.append("e.created_at < ?")
        params.append(before_ms)
    if project is not None:
        where.append("e.project = ?")
        params.append(project)
    columns = ", ".join(f"e.{c.strip()}" for c in EPISODE_COLUMNS.split(","))
    rows = conn.execute(f"SELECT {columns} FROM {source} WHERE {' AND '.join(where)} "
                        "ORDER BY e.created_at LIMIT ?", (*params, limit))
    return [Episode.from_row(row) for row in rows]


def active_ids(conn: apsw.Connection, episode_ids: list[str]) -> set[str]:
    """Which of these ids are active episodes."""
    if not episode_ids:
        return set()
    marks = ",".join("?" * len(episode_ids))
    return {row[0] for row in conn.execute(
        f"SELECT id FROM episodes WHERE id IN ({marks}) AND status = 'active'", episode_ids)}


def supersede(conn: apsw.Connection, old_id: str, new_id: str, now_ms: int) -> None:
    conn.execute(
        "UPDATE episodes SET valid_to = ?, superseded_by = ?, status = 'superseded' WHERE id = ?",
        (now_ms, new_id, old_id),
    )


def counts_by_status(conn: apsw.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT status, count(*) FROM episodes GROUP BY status").fetchall())


def get_meta(conn: apsw.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def set_meta(conn: apsw.Connection, key: str, value: str) -> None:
    conn.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                 (key, value))


# --- turning captured messages into episodes -------------------------------------------------

@dataclass(frozen=True)
class StoredMessage:
    id: int
    uuid: str
    role: str
    text: str
    ts_ms: int | None


def sessions_with_new_messages(conn: apsw.Connection) -> list[tuple[str, str | None, int]]:
    """(session_id, project, episodized_through) for sessions with messages not yet in episodes, the one whose
    first such message is oldest first: what a session learned is mined before the later sessions that may show
    it stale (a backfill captures transcripts in no particular order)."""
    return conn.execute(
        """
        SELECT s.session_id, s.project, s.episodized_through FROM sessions s
        WHERE EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.session_id AND m.id > s.episodized_through)
        ORDER BY (SELECT min(coalesce(m.ts_ms, 0)) FROM messages m
                  WHERE m.session_id = s.session_id AND m.id > s.episodized_through), s.rowid
        """
    ).fetchall()


def ended_turns_with_new_messages(conn: apsw.Connection) -> dict[str, str]:
    """{session_id: agent} of the sessions with messages not yet in episodes whose last line ended a turn."""
    return dict(conn.execute(
        """
        SELECT s.session_id, s.agent FROM sessions s
        WHERE s.turn_ended = 1
          AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.session_id AND m.id > s.episodized_through)
        """
    ).fetchall())


def unfinished_turns(conn: apsw.Connection, agent: str, captured_between: tuple[int, int]) -> list[tuple[str, str]]:
    """(session_id, the folder it ran in) of an agent's sessions last captured into within the span, whose last
    line did not end a turn and whose messages are not all in episodes yet."""
    return conn.execute(
        """
        SELECT s.session_id, s.project_root FROM sessions s
        WHERE s.agent = ? AND s.turn_ended = 0 AND s.updated_at >= ? AND s.updated_at < ? AND s.project_root IS NOT NULL
          AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.session_id AND m.id > s.episodized_through)
        """, (agent, *captured_between)).fetchall()


def last_messages(conn: apsw.Connection, session_id: str, role: str, limit: int) -> list[StoredMessage]:
    """A session's newest messages of one role, the newest first."""
    rows = conn.execute("SELECT id, uuid, role, text, ts_ms FROM messages WHERE session_id = ? AND role = ? "
                        "ORDER BY id DESC LIMIT ?", (session_id, role, limit)).fetchall()
    return [StoredMessage(*row) for row in rows]


def user_messages_after(conn: apsw.Connection, session_id: str, after_ms: int, limit: int) -> list[StoredMessage]:
    """A session's first user messages written after a moment, the oldest first."""
    rows = conn.execute("SELECT id, uuid, role, text, ts_ms FROM messages WHERE session_id = ? AND role = 'user' "
                        "AND ts_ms > ? ORDER BY ts_ms, id LIMIT ?", (session_id, after_ms, limit)).fetchall()
    return [StoredMessage(*row) for row in rows]


def other_prompts(conn: apsw.Connection, session_id: str, uuid: str) -> int:
    """How many user messages the session has besides this one (a compacted session's summary is one)."""
    return conn.execute("SELECT count(*) FROM messages WHERE session_id = ? AND role = 'user' AND uuid != ?",
                        (session_id, uuid)).fetchone()[0]


def session_commits(conn: apsw.Connection, session_id: str, limit: int) -> list[str]:
    """What a session committed, as its commit memories say it ("Committed 018c746 on `astral`: …"), in order."""
    return [row[0] for row in conn.execute(
        "SELECT summary FROM episodes WHERE session_id = ? AND status = 'active' AND summary LIKE 'Committed %' "
        "AND id IN (SELECT episode_id FROM memory_origins WHERE miner = 'signal') ORDER BY created_at LIMIT ?",
        (session_id, limit))]


def messages_after(conn: apsw.Connection, session_id: str, after_id: int, limit: int = 10_000) -> list[StoredMessage]:
    rows = conn.execute(
        "SELECT id, uuid, role, text, ts_ms FROM messages WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?",
        (session_id, after_id, limit),
    ).fetchall()
    return [StoredMessage(*row) for row in rows]


def session_progress(conn: apsw.Connection, session_id: str) -> tuple[str | None, int] | None:
    row = conn.execute("SELECT project, episodized_through FROM sessions WHERE session_id = ?",
                       (session_id,)).fetchone()
    return (row[0], row[1]) if row else None


def set_episodized_through(conn: apsw.Connection, session_id: str, message_id: int) -> None:
    conn.execute("UPDATE sessions SET episodized_through = MAX(episodized_through, ?) WHERE session_id = ?",
                 (message_id, session_id))


def recent_unepisodized(conn: apsw.Connection, session_id: str, limit: int) -> list[StoredMessage]:
    rows = conn.execute(
        """
        SELECT m.id, m.uuid, m.role, m.text, m.ts_ms FROM messages m JOIN sessions s USING (session_id)
        WHERE m.session_id = ? AND m.id > s.episodized_through ORDER BY m.id DESC LIMIT ?
        """,
        (session_id, limit),
    ).fetchall()
    return [StoredMessage(*row) for row in rows]


def idle_sessions_with_new_messages(conn: apsw.Connection, captured_before_ms: int) -> set[str]:
    """Sessions not captured into since a time that still have messages outside episodes."""
    rows = conn.execute(
        "SELECT s.session_id FROM sessions s WHERE s.updated_at < ? AND EXISTS "
        "(SELECT 1 FROM messages m WHERE m.session_id = s.session_id AND m.id > s.episodized_through)",
        (captured_before_ms,),
    ).fetchall()
    return {row[0] for row in rows}


def project_memories(conn: apsw.Connection, project: str | None, limit: int) -> list[Episode]:
    """The newest active memories (not verbatim rounds) in the project's scope: its own and global ones."""
    # Two reads of the partial index idx_episodes_active_memories (an OR across project and scope would scan).
    memories = " status = 'active' AND source_type != 'verbatim' "
    if project is None:
        rows = conn.execute(f"SELECT {EPISODE_COLUMNS} FROM episodes WHERE{memories}AND project IS NULL "
                            "ORDER BY created_at DESC LIMIT ?", (limit,)).fetchall()
        return [Episode.from_row(row) for row in rows]
    rows = conn.execute(
        f"SELECT * FROM (SELECT {EPISODE_COLUMNS} FROM episodes WHERE{memories}AND project IS ? "
        "ORDER BY created_at DESC LIMIT ?) UNION ALL "
        f"SELECT * FROM (SELECT {EPISODE_COLUMNS} FROM episodes WHERE{memories}AND project IS NULL "
        "AND scope = 'global' ORDER BY created_at DESC LIMIT ?)", (project, limit, limit)).fetchall()
    return [Episode.from_row(row) for row in rows]


def project_round_rowids(conn: apsw.Connection, project: str | None, limit: int) -> list[int]:
    """The rowids of the project's newest verbatim rounds (one index range: idx_episodes_active_project_created)."""
    rows = conn.execute("SELECT rowid FROM episodes WHERE status = 'active' AND project IS ? "
                        "AND source_type = 'verbatim' ORDER BY created_at DESC LIMIT ?", (project, limit))
    return [row[0] for row in rows]


def memories_signature(conn: apsw.Connection, project: str | None) -> tuple[int, int]:
    """(how many, newest rowid) of the project's active memories: changes when one is added, forgotten or
    superseded (two reads of the partial index idx_episodes_active_memories)."""
    row = conn.execute("SELECT count(*), coalesce(max(rowid), 0) FROM episodes WHERE status = 'active' "
                       "AND source_type != 'verbatim' AND project IS ?", (project,)).fetchone()
    return (row[0], row[1])


def newest_session_episode_ids(conn: apsw.Connection, session_id: str, limit: int) -> frozenset[str]:
    """The ids of a session's newest episodes."""
    rows = conn.execute(
        "SELECT id FROM episodes WHERE session_id = ? ORDER BY created_at DESC, rowid DESC LIMIT ?",
        (session_id, limit),
    ).fetchall()
    return frozenset(row[0] for row in rows)


# --- rebuilding verbatim episodes (processor/memory/rebuild.py) ----------------------------------

def episodized_sessions(conn: apsw.Connection) -> list[str]:
    """Sessions some of whose messages are already in episodes, oldest first."""
    return [row[0] for row in conn.execute(
        "SELECT session_id FROM sessions WHERE episodized_through > 0 ORDER BY rowid").fetchall()]


def verbatim_episodes(conn: apsw.Connection, session_id: str) -> list[Episode]:
    """The verbatim round pieces of a session, in the order they were made."""
    rows = conn.execute(f"SELECT {EPISODE_COLUMNS} FROM episodes WHERE session_id = ? AND source_type = 'verbatim' "
                        "ORDER BY rowid", (session_id,)).fetchall()
    return [Episode.from_row(row) for row in rows]


def acted_on_ids(conn: apsw.Connection, episode_ids: list[str]) -> set[str]:
    """Of these ids, those another row or a person's record names: a newer version's predecessor link,
    a review, an inquisitor verdict or a cold-path action. Such ids must survive a rebuild."""
    found: set[str] = set()
    for start in range(0, len(episode_ids), 500):
        chunk = episode_ids[start:start + 500]
        marks = ",".join("?" * len(chunk))
        found.update(row[0] for row in conn.execute(
            f"SELECT superseded_by FROM episodes WHERE superseded_by IN ({marks}) "
            f"UNION SELECT episode_id FROM reviews WHERE episode_id IN ({marks}) "
            f"UNION SELECT episode_id FROM cold_actions WHERE episode_id IN ({marks})", chunk * 3))
    return found


def delete_episodes(conn: apsw.Connection, episode_ids: list[str]) -> None:
    """Remove rows outright (the FTS trigger follows); only a rebuild does this, for pieces it remakes."""
    conn.executemany("DELETE FROM memory_checks WHERE episode_id = ?", [(i,) for i in episode_ids])
    conn.executemany("DELETE FROM episodes WHERE id = ?", [(i,) for i in episode_ids])


def rewrite_episode(conn: apsw.Connection, episode_id: str, ep: NewEpisode, embedding: bytes | None,
                    dated: bool = False) -> None:
    """New text for a kept id: its status, importance, access history and creation time stay (`dated`: the
    creation time becomes the new text's, when what it says is as of then)."""
    conn.execute(
        "UPDATE episodes SET summary = ?, full_content = ?, entities = ?, source_uuids = ?, content_hash = ?, "
        "embedding = ?, created_at = CASE WHEN ? THEN ? ELSE created_at END WHERE id = ?",
        (ep.summary, ep.full_content, json.dumps(ep.entities), json.dumps(ep.source_uuids), ep.content_hash,
         embedding, dated, ep.created_at, episode_id),
    )
