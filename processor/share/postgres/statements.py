"""Every statement the sync layer sends to the shared database: machines, teams, push, pull, and team search.

Functions take a psycopg connection (pgvector's types registered) and own no transaction unless they say
so. Row-level security decides what each role reads and writes; nothing here filters by owner for safety.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from processor.redaction import Redacted, redacted

# Taken by every change before it draws its sequence numbers and held until its commit: changes commit in
# sequence order, so a puller that has seen number N has seen every change numbered below N.
CHANGE_LOCK = 0x656E6772_00000002
NOTIFY_CHANNEL = "engram_changes"

# --- the server, machines, teams ---------------------------------------------------------------------


def server_clock_ms(conn: Any) -> int:
    return int(conn.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint").fetchone()[0])


def vector_schema(conn: Any) -> str | None:
    """The schema the `vector` extension lives in (public, extensions, …), None when not installed."""
    row = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
                       "WHERE e.extname = 'vector'").fetchone()
    return row[0] if row else None


def set_search_path(conn: Any, vector_schema: str) -> None:
    conn.execute("SELECT set_config('search_path', %s, false)", (f'engram, "{vector_schema}"',))


def instance_id(conn: Any) -> str:
    """This shared database's identity (made by its schema's first init)."""
    return str(conn.execute("SELECT id FROM engram.instance").fetchone()[0])


def machine_registration(conn: Any, machine_id: str) -> tuple[str, str] | None:
    """(fingerprint, hostname) this role registered for the id; None when it has none."""
    row = conn.execute("SELECT fingerprint, hostname FROM engram.machines WHERE machine_id = %s",
                       (machine_id,)).fetchone()
    return (row[0], row[1]) if row else None


def register_machine(conn: Any, machine_id: str, hostname: str, fingerprint: str, model: str | None) -> None:
    """Register (or refresh) this machine; the caller has checked that the id is not another machine's."""
    conn.execute(
        "INSERT INTO engram.machines (machine_id, hostname, fingerprint, embedding_model) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (machine_id) DO UPDATE SET hostname = excluded.hostname, fingerprint = excluded.fingerprint, "
        "embedding_model = excluded.embedding_model, last_seen = now()",
        (machine_id, hostname, fingerprint, model))


def machines(conn: Any) -> list[tuple[str, str, str]]:
    """(machine_id, owner, hostname) of this person's machines."""
    return [tuple(r) for r in conn.execute("SELECT machine_id, owner, hostname FROM engram.machines").fetchall()]


def current_role(conn: Any) -> str:
    return conn.execute("SELECT current_user").fetchone()[0]


def my_teams(conn: Any) -> list[str]:
    return [r[0] for r in conn.execute("SELECT team FROM engram.team_members WHERE member = current_user "
                                       "ORDER BY team").fetchall()]


def team_exists(conn: Any, team: str) -> bool:
    return conn.execute("SELECT 1 FROM engram.teams WHERE name = %s", (team,)).fetchone() is not None


def shared_projects(conn: Any) -> dict[str, str]:
    """project_key → team, for this person's projects shared with a team."""
    return dict(conn.execute("SELECT project_key, team FROM engram.shared_projects").fetchall())


def share_project(conn: Any, project_key: str, team: str) -> None:
    conn.execute("INSERT INTO engram.shared_projects (project_key, team) VALUES (%s, %s) "
                 "ON CONFLICT (owner, project_key) DO UPDATE SET team = excluded.team", (project_key, team))


def unshare_project(conn: Any, project_key: str) -> None:
    conn.execute("DELETE FROM engram.shared_projects WHERE project_key = %s", (project_key,))


def leave_team(conn: Any, team: str) -> int:
    """Drop this person's membership and project links of a team; returns how many memberships went."""
    conn.execute("DELETE FROM engram.shared_projects WHERE team = %s", (team,))
    return conn.execute("DELETE FROM engram.team_members WHERE team = %s AND member = current_user",
                        (team,)).rowcount


def withdraw_from_team(conn: Any, team: str, machine_id: str) -> int:
    """This person's memories shared with a team become private again (teammates drop them at their next
    pull); returns how many."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (CHANGE_LOCK,))
    changed = conn.execute("UPDATE engram.memories SET team = NULL, seq = nextval('engram.change_seq'), "
                           "changed_by = %s, changed_at = now() WHERE owner = current_user AND team = %s",
                           (machine_id, team)).rowcount
    if changed:
        conn.execute(f"NOTIFY {NOTIFY_CHANNEL}")
    return changed


# --- push -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PushRow:
    """One memory's state as it leaves a machine, or its tombstone (status forgotten). Its texts go through the
    redaction door when the row is made (``processor.redaction``): nothing leaves the machine unredacted."""

    id: str
    machine_id: str  # where it was made
    team: str | None
    project_key: str | None
    project: str | None
    session_id: str | None
    scope: str
    kind: str
    importance: str
    source_type: str
    status: str
    summary: Redacted | None
    full_content: Redacted | None
    entities: Redacted | None  # JSON (redacted_json)
    source_uuids: str | None  # JSON
    content_hash: str | None
    superseded_by: str | None
    created_at: int
    valid_from: int
    valid_to: int | None
    forgotten_reason: Redacted | None
    embedding: np.ndarray | None
    embedding_model: str | None
    lesson: Redacted | None = None  # JSON: what makes it tellable elsewhere (processor/share/lessons.py)

    def __post_init__(self) -> None:
        for name in ("summary", "full_content", "entities", "forgotten_reason", "lesson"):
            object.__setattr__(self, name, redacted(getattr(self, name)))


_PUSH_COLUMNS = ("id", "machine_id", "team", "project_key", "project", "session_id", "scope", "kind", "importance",
                 "source_type", "status", "summary", "full_content", "entities", "source_uuids", "content_hash",
                 "superseded_by", "created_at", "valid_from", "valid_to", "forgotten_reason", "embedding",
                 "embedding_model", "lesson")
_PUSH_TYPES = ["integer"] + ["text"] * 17 + ["bigint", "bigint", "bigint", "text", "vector", "text", "text"]
_STAGING = (
    "CREATE TEMP TABLE IF NOT EXISTS engram_push (ord integer, id text, machine_id text, team text, "
    "project_key text, project text, session_id text, scope text, kind text, importance text, source_type text, "
    "status text, summary text, full_content text, entities text, source_uuids text, content_hash text, "
    "superseded_by text, created_at bigint, valid_from bigint, valid_to bigint, forgotten_reason text, "
    "embedding vector, embedding_model text, lesson text) ON COMMIT DELETE ROWS")
_STATE = ("team, project_key, project, session_id, scope, kind, importance, source_type, status, summary, "
          "full_content, entities, source_uuids, content_hash, superseded_by, created_at, valid_from, valid_to, "
          "forgotten_reason, embedding_model, lesson")
_UPSERT = f"""
    INSERT INTO engram.memories AS m (id, machine_id, changed_by, seq, {_STATE}, embedding)
    SELECT id, machine_id, %(me)s, nextval('engram.change_seq'), team, project_key, project, session_id, scope, kind,
           importance, source_type, status, summary, full_content, entities::jsonb, source_uuids::jsonb,
           content_hash, superseded_by, created_at, valid_from, valid_to, forgotten_reason, embedding_model,
           lesson::jsonb, embedding
    FROM engram_push WHERE status <> 'forgotten' ORDER BY ord
    ON CONFLICT (id) DO UPDATE SET
        changed_by = excluded.changed_by, seq = excluded.seq, changed_at = now(), team = excluded.team,
        project_key = excluded.project_key, project = excluded.project, session_id = excluded.session_id,
        scope = excluded.scope, kind = excluded.kind, importance = excluded.importance,
        source_type = excluded.source_type, status = excluded.status, summary = excluded.summary,
        full_content = excluded.full_content, entities = excluded.entities, source_uuids = excluded.source_uuids,
        content_hash = excluded.content_hash, superseded_by = excluded.superseded_by,
        created_at = excluded.created_at, valid_from = excluded.valid_from, valid_to = excluded.valid_to,
        forgotten_reason = excluded.forgotten_reason, embedding_model = excluded.embedding_model,
        lesson = excluded.lesson, embedding = excluded.embedding
    -- A forget wins over any change: a tombstone never comes back. An unchanged state is no change (a
    -- re-push after a crash, or of everything when sharing is turned back on, moves no sequence).
    WHERE m.status <> 'forgotten' AND (
        (m.team, m.project_key, m.project, m.session_id, m.scope, m.kind, m.importance, m.source_type, m.status,
         m.summary, m.full_content, m.entities, m.source_uuids, m.content_hash, m.superseded_by, m.created_at,
         m.valid_from, m.valid_to, m.forgotten_reason, m.embedding_model, m.lesson)
        IS DISTINCT FROM
        (excluded.team, excluded.project_key, excluded.project, excluded.session_id, excluded.scope, excluded.kind,
         excluded.importance, excluded.source_type, excluded.status, excluded.summary, excluded.full_content,
         excluded.entities, excluded.source_uuids, excluded.content_hash, excluded.superseded_by,
         excluded.created_at, excluded.valid_from, excluded.valid_to, excluded.forgotten_reason,
         excluded.embedding_model, excluded.lesson)
        -- vectors of two sizes cannot be compared with =: the model's name tells them apart first
        OR CASE WHEN m.embedding IS NULL OR excluded.embedding IS NULL
                     OR vector_dims(m.embedding) <> vector_dims(excluded.embedding)
                THEN (m.embedding IS NULL) <> (excluded.embedding IS NULL)
                     OR vector_dims(m.embedding) <> vector_dims(excluded.embedding)
                ELSE m.embedding <> excluded.embedding END)
    RETURNING m.id, m.seq
"""
_TOMBSTONE = """
    INSERT INTO engram.memories AS m (id, machine_id, changed_by, seq, team, project_key, project, session_id,
                                      scope, kind, importance, source_type, status, created_at, valid_from,
                                      valid_to, forgotten_reason)
    SELECT id, machine_id, %(me)s, nextval('engram.change_seq'), team, project_key, project, session_id, scope,
           kind, importance, source_type, 'forgotten', created_at, valid_from, valid_to, forgotten_reason
    FROM engram_push WHERE status = 'forgotten' ORDER BY ord
    ON CONFLICT (id) DO UPDATE SET
        changed_by = excluded.changed_by, seq = excluded.seq, changed_at = now(), status = 'forgotten',
        summary = NULL, full_content = NULL, entities = NULL, source_uuids = NULL, content_hash = NULL,
        embedding = NULL, embedding_model = NULL, lesson = NULL, forgotten_reason = excluded.forgotten_reason,
        valid_to = coalesce(m.valid_to, excluded.valid_to)
    -- the team stays: its members' copies must see the tombstone to erase theirs
    WHERE m.status <> 'forgotten'
    RETURNING m.id, m.seq
"""
# A memory another machine gave a successor to, and this push gives another: two concurrent edits. Both
# versions stay; the one this push names is later by sequence, so it is current and the other becomes its
# earlier version.
_FORKS = """
    SELECT m.superseded_by, p.superseded_by FROM engram_push p JOIN engram.memories m ON m.id = p.id
    WHERE p.status <> 'forgotten' AND m.status <> 'forgotten' AND m.superseded_by IS NOT NULL
      AND p.superseded_by IS NOT NULL AND m.superseded_by <> p.superseded_by AND m.changed_by <> %(me)s
"""
_RESOLVE_FORK = """
    UPDATE engram.memories SET status = 'superseded', superseded_by = %(newer)s,
        valid_to = coalesce(valid_to, %(now)s), seq = nextval('engram.change_seq'), changed_by = %(me)s,
        changed_at = now()
    WHERE id = %(older)s AND id <> %(newer)s AND status IN ('active', 'stale', 'archived')
    RETURNING id, seq
"""


@dataclass(frozen=True)
class MessageRow:
    """A transcript message a pushed memory was made from (share_messages = true); its text goes through the
    redaction door when the row is made."""

    memory_id: str
    uuid: str
    session_id: str | None
    role: str
    ts_ms: int | None
    text: Redacted

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", redacted(self.text))


def may_write_messages(conn: Any) -> bool:
    """Whether this role was granted the messages table (grants printed before schema version 2 lack it)."""
    return bool(conn.execute("SELECT has_table_privilege('engram.messages', 'INSERT, DELETE')").fetchone()[0])


def pulled_messages(conn: Any, memory_ids: list[str]) -> list[MessageRow]:
    """The messages this role may read of these memories (its own: never a teammate's)."""
    if not memory_ids:
        return []
    rows = conn.execute("SELECT memory_id, uuid, session_id, role, ts_ms, text FROM engram.messages "
                        "WHERE memory_id = ANY(%s)", (memory_ids,)).fetchall()
    return [MessageRow(*r) for r in rows]


@dataclass
class PushResult:
    changed: dict[str, int]  # memory id → its new sequence number
    forgotten: dict[str, str | None]  # pushed as a change, but the server holds its tombstone: id → reason
    notified: bool = False


def push(conn: Any, rows: Sequence[PushRow], me: str, now_ms: int, *,
         messages: Sequence[MessageRow] = (), erase_messages: bool = False) -> PushResult:
    """Send these memories (and their messages) in one transaction; unchanged ones move no sequence, tombstones
    always win. erase_messages: a tombstone also erases the messages its memory was made from."""
    result = PushResult({}, {})
    if not rows:
        return result
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(_STAGING)
        with cur.copy(f"COPY engram_push (ord, {', '.join(_PUSH_COLUMNS)}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_PUSH_TYPES)
            for ord_, row in enumerate(rows):
                copy.write_row((ord_, *(getattr(row, c) for c in _PUSH_COLUMNS)))
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (CHANGE_LOCK,))
        forks = cur.execute(_FORKS, {"me": me}).fetchall()
        for cur_rows in (cur.execute(_UPSERT, {"me": me}).fetchall(), cur.execute(_TOMBSTONE, {"me": me}).fetchall()):
            result.changed.update({r[0]: r[1] for r in cur_rows})
        for older, newer in forks:
            for r in cur.execute(_RESOLVE_FORK, {"older": older, "newer": newer, "me": me, "now": now_ms}):
                result.changed[r[0]] = r[1]
        gone = [r.id for r in rows if r.status == "forgotten"]
        if erase_messages and gone:
            cur.execute("DELETE FROM engram.messages WHERE memory_id = ANY(%s)", (gone,))
        if messages:
            cur.executemany("INSERT INTO engram.messages (memory_id, uuid, session_id, role, ts_ms, text) "
                            "SELECT %s, %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM engram.memories "
                            "WHERE id = %s AND status <> 'forgotten') ON CONFLICT (memory_id, uuid) DO UPDATE "
                            "SET text = excluded.text, role = excluded.role, ts_ms = excluded.ts_ms",
                            [(m.memory_id, m.uuid, m.session_id, m.role, m.ts_ms, m.text, m.memory_id)
                             for m in messages])
        live = [r.id for r in rows if r.status != "forgotten" and r.id not in result.changed]
        if live:
            result.forgotten = dict(cur.execute(
                "SELECT id, forgotten_reason FROM engram.memories WHERE id = ANY(%s) AND status = 'forgotten'",
                (live,)).fetchall())
        if result.changed:
            cur.execute(f"NOTIFY {NOTIFY_CHANNEL}")
            result.notified = True
    return result


# --- pull -------------------------------------------------------------------------------------------

# What row-level security lets a role read, said again in Engram's own queries: the tables' owner has no row
# security forced on memories (migration p003), and its machines must not pull other people's private rows.
_VISIBLE = ("(owner = current_user OR team = ANY (ARRAY(SELECT t.team FROM engram.team_members t "
            "WHERE t.member = current_user)))")


_PULL_COLUMNS = ("id, owner, machine_id, changed_by, seq, team, project_key, project, session_id, scope, kind, "
                 "importance, source_type, status, summary, full_content, entities, source_uuids, content_hash, "
                 "superseded_by, created_at, valid_from, valid_to, forgotten_reason, embedding, embedding_model, "
                 "lesson")


@dataclass(frozen=True)
class PulledRow:
    """A memory's latest change as the server holds it (not yet validated: the server is not trusted)."""

    id: Any
    owner: Any
    machine_id: Any
    changed_by: Any
    seq: Any
    team: Any
    project_key: Any
    project: Any
    session_id: Any
    scope: Any
    kind: Any
    importance: Any
    source_type: Any
    status: Any
    summary: Any
    full_content: Any
    entities: Any
    source_uuids: Any
    content_hash: Any
    superseded_by: Any
    created_at: Any
    valid_from: Any
    valid_to: Any
    forgotten_reason: Any
    embedding: Any
    embedding_model: Any
    lesson: Any = None  # a JSON object (psycopg: a dict), None from an older client


def pull(conn: Any, after_seq: int, limit: int, *, others: bool) -> list[PulledRow]:
    """The changes after a sequence number that this role may read, in sequence order; others=False leaves
    out teammates' memories (teams too large to replicate are searched on the server instead)."""
    with conn.cursor(binary=True) as cur:
        cur.execute(f"SELECT {_PULL_COLUMNS} FROM engram.memories WHERE seq > %s AND {_VISIBLE} "
                    f"AND (%s OR owner = current_user) ORDER BY seq LIMIT %s", (after_seq, others, limit))
        return [PulledRow(*row) for row in cur.fetchall()]


def waiting_count(conn: Any, after_seq: int, *, others: bool, cap: int = 100_000) -> int:
    """How many changes this role may read after a sequence number (counted up to cap)."""
    return int(conn.execute(f"SELECT count(*) FROM (SELECT 1 FROM engram.memories WHERE seq > %s AND {_VISIBLE} "
                            "AND (%s OR owner = current_user) LIMIT %s) AS waiting",
                            (after_seq, others, cap)).fetchone()[0])


def visible_ids(conn: Any, ids: Iterable[str], *, others: bool) -> set[str]:
    """Which of these memories this role may still read (a team left, a project withdrawn: the rest)."""
    wanted = list(ids)
    if not wanted:
        return set()
    return {r[0] for r in conn.execute(f"SELECT id FROM engram.memories WHERE id = ANY(%s) AND {_VISIBLE} "
                                       "AND (%s OR owner = current_user)", (wanted, others)).fetchall()}


def listen(conn: Any) -> None:
    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")


# --- team search: the same fusion as local search, on the server ------------------------------------


@dataclass(frozen=True)
class TeamCandidate:
    id: str
    owner: str
    machine_id: str
    team: str | None
    project_key: str | None
    project: str | None
    kind: str
    importance: str
    status: str
    summary: str
    full_content: str
    created_at: int
    cosine: float
    lexical: float  # ts_rank_cd, not yet normalised


def team_candidates(conn: Any, query_vector: np.ndarray | None, model: str | None, terms: list[str], *,
                    fetch: int, project_key: str | None, lexical_cap: int, exact: bool = False,
                    ef_search: int = 100, common: float = 0.5) -> list[TeamCandidate]:
    """Team memories near the query by vector (HNSW on this model's rows) and by words (the full-text index),
    with both scores for each, from the server's engram.team_search (see migration p003_team_search).
    exact=True scans every row instead of the HNSW index (the benchmark's baseline).

    terms: the query's content words (letters, digits, underscores: nothing to escape). The words' side ranks
    at most lexical_cap memories holding all of them plus lexical_cap holding any: a common word in half the
    memories is not worth ranking them all (local search leaves such words out altogether), and the ones
    holding every word are the likeliest answers. Words in more than `common` of the memories are left out
    (the rarest stays if all are).
    """
    vector = np.asarray(query_vector, dtype=np.float32) if query_vector is not None and model else None
    with conn.transaction():  # the function's settings (ef_search, iterative scans) last until its end
        rows = conn.execute(
            "SELECT * FROM engram.team_search(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (vector, model if vector is not None else None, terms, fetch, lexical_cap, project_key, exact,
             ef_search, common)).fetchall()
    return [TeamCandidate(*r[:12], float(r[12] or 0.0), float(r[13] or 0.0)) for r in rows]


def team_memory(conn: Any, memory_id: str) -> PulledRow | None:
    """One memory this role may read, as the server holds it (memory_expand of a team search hit)."""
    with conn.cursor(binary=True) as cur:
        cur.execute(f"SELECT {_PULL_COLUMNS} FROM engram.memories WHERE id = %s AND status <> 'forgotten' "
                    f"AND {_VISIBLE}", (memory_id,))
        row = cur.fetchone()
    return PulledRow(*row) if row else None
