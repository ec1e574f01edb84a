"""The SQLite side of shared memory: the outbox of changes to push, the sync state, and replicas' bookkeeping.

Every change to a memory, however it is made, is caught by triggers on ``episodes`` (and on a session's
opt-out) and lands in ``share_outbox`` in the same transaction as the change: no code path can forget to
queue it, and a crash loses nothing. The outbox holds one row per memory (the push sends the memory as it
is then), ordered by the latest change. The triggers run only while sharing is enabled, and never while
pulled changes are being applied (``share_state.applying``, set and cleared inside that one transaction),
so a pulled change is not echoed back. Callers own the transaction; these functions only run statements.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import apsw

from processor.clock import utc_date
from processor.redaction import Redacted, redacted, redacted_json
from processor.store.episodes import EPISODE_COLUMNS, Episode, NewEpisode
from processor.store.in_list import rows_in

# --- the triggers that fill the outbox -------------------------------------------------------------

_NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
_SHARING = "(SELECT enabled = 1 AND applying = 0 FROM share_state WHERE id = 1)"
# The columns whose change is worth a push; access statistics (every expand touches them) are not shared.
SHARED_COLUMNS = ("summary", "full_content", "entities", "importance", "kind", "scope", "project", "status",
                  "superseded_by", "valid_to", "embedding", "source_uuids", "forgotten_reason", "session_id")


def _queue(id_expr: str) -> str:
    # DELETE then INSERT rather than INSERT OR REPLACE: an outer statement's conflict clause (INSERT OR
    # IGNORE INTO episodes …) would override the trigger's and keep the old row, whose push may already be
    # under way; a new row always gets a larger seq (AUTOINCREMENT), so the push that read the old state
    # cannot delete it.
    return (f"DELETE FROM share_outbox WHERE episode_id = {id_expr}; "
            f"INSERT INTO share_outbox(episode_id, queued_at) VALUES ({id_expr}, {_NOW_MS});")


TRIGGERS = (
    f"CREATE TRIGGER IF NOT EXISTS share_outbox_insert AFTER INSERT ON episodes WHEN {_SHARING} "
    f"BEGIN {_queue('new.id')} END",
    f"CREATE TRIGGER IF NOT EXISTS share_outbox_update AFTER UPDATE OF {', '.join(SHARED_COLUMNS)} ON episodes "
    f"WHEN {_SHARING} BEGIN {_queue('new.id')} END",
    f"CREATE TRIGGER IF NOT EXISTS share_outbox_delete AFTER DELETE ON episodes WHEN {_SHARING} "
    f"BEGIN {_queue('old.id')} END",
    # A session that opts out: whatever of it was pushed is taken back (the push sends tombstones).
    # A forgotten memory's pulled messages go with it (whoever forgot it, here or elsewhere).
    "CREATE TRIGGER IF NOT EXISTS share_messages_forget AFTER UPDATE OF status ON episodes "
    "WHEN new.status = 'forgotten' BEGIN DELETE FROM share_messages WHERE memory_id = new.id; END",
    f"CREATE TRIGGER IF NOT EXISTS share_outbox_opt_out AFTER UPDATE OF opt_out ON sessions "
    f"WHEN {_SHARING} AND new.opt_out IS NOT NULL BEGIN "
    f"DELETE FROM share_outbox WHERE episode_id IN (SELECT id FROM episodes WHERE session_id = new.session_id); "
    f"INSERT INTO share_outbox(episode_id, queued_at) SELECT id, {_NOW_MS} FROM episodes "
    f"WHERE session_id = new.session_id; END",
)


# What makes a memory tellable elsewhere changes without the episode changing: another session meets the failure
# it tells the fix of (its count), or it becomes the failure's fix. Its memory is pushed again (issue 32).
LESSON_TRIGGERS = (
    f"CREATE TRIGGER IF NOT EXISTS share_outbox_failure AFTER UPDATE OF sessions, memory_id, fix, uses "
    f"ON failure_signatures WHEN {_SHARING} AND new.memory_id IS NOT NULL AND (old.sessions IS NOT new.sessions "
    f"OR old.memory_id IS NOT new.memory_id OR old.fix IS NOT new.fix OR old.uses IS NOT new.uses) "
    f"BEGIN {_queue('new.memory_id')} END",
    # A forgotten memory's lesson as other machines sent it (its fix in a line) goes with its content.
    "CREATE TRIGGER IF NOT EXISTS share_lessons_forget AFTER UPDATE OF status ON episodes "
    "WHEN new.status = 'forgotten' BEGIN DELETE FROM share_lessons WHERE memory_id = new.id; END",
)


def ensure_triggers(conn: apsw.Connection) -> None:
    """Create the outbox triggers if missing (a later migration that rebuilds ``episodes`` or
    ``failure_signatures`` drops them)."""
    for statement in TRIGGERS + LESSON_TRIGGERS:
        conn.execute(statement)


def triggers_missing(conn: apsw.Connection) -> bool:
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' "
                                        "AND name LIKE 'share_%'")}
    return len(names) < len(TRIGGERS) + len(LESSON_TRIGGERS)


def create_tables(conn: apsw.Connection) -> None:
    """The sync layer's tables (migration m018_shared_memory)."""
    conn.execute(
        """
        -- One row: whether sharing is on, this machine's id, how far it pulled, and what last went wrong.
        CREATE TABLE share_state (
            id             INTEGER PRIMARY KEY CHECK (id = 1),
            enabled        INTEGER NOT NULL DEFAULT 0,
            applying       INTEGER NOT NULL DEFAULT 0,
            machine_id     TEXT,
            role           TEXT,
            server_id      TEXT,
            pull_cursor    INTEGER NOT NULL DEFAULT 0,
            server_seq     INTEGER NOT NULL DEFAULT 0,
            last_push_at   INTEGER,
            last_pull_at   INTEGER,
            last_ok_at     INTEGER,
            last_error     TEXT,
            last_error_fix TEXT,
            last_error_at  INTEGER,
            pushed         INTEGER NOT NULL DEFAULT 0,
            pulled         INTEGER NOT NULL DEFAULT 0
        );
        INSERT INTO share_state(id) VALUES (1);
        -- Memories changed since their last push: one row each, ordered by the latest change.
        CREATE TABLE share_outbox (
            seq        INTEGER PRIMARY KEY AUTOINCREMENT,
            episode_id TEXT NOT NULL UNIQUE,
            queued_at  INTEGER NOT NULL
        );
        -- Memories the shared database holds (pushed from here, or pulled): where they come from, and the
        -- server sequence of the state this machine last sent or applied.
        CREATE TABLE share_rows (
            episode_id     TEXT PRIMARY KEY,
            server_seq     INTEGER NOT NULL,
            origin_machine TEXT NOT NULL,
            owner          TEXT NOT NULL,
            team           TEXT,
            project_key    TEXT,
            pulled         INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID;
        CREATE INDEX idx_share_rows_pulled_key ON share_rows(project_key) WHERE pulled = 1;
        -- Each local project root's identity across machines (its normalised git remote, else its path).
        CREATE TABLE share_projects (
            project_root TEXT PRIMARY KEY,
            project_key  TEXT NOT NULL,
            has_remote   INTEGER NOT NULL,
            checked_at   INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX idx_share_projects_key ON share_projects(project_key);
        -- The projects this user shares with a team (mirrored from the server at each sync).
        CREATE TABLE share_teams (
            project_key TEXT PRIMARY KEY,
            team        TEXT NOT NULL
        ) WITHOUT ROWID;
        -- Names of the machines and people memories come from (for "where it came from").
        CREATE TABLE share_machines (
            machine_id TEXT PRIMARY KEY,
            owner      TEXT NOT NULL,
            hostname   TEXT NOT NULL
        ) WITHOUT ROWID;
        -- share_messages = true: the transcript messages pulled memories were made from, on another machine.
        CREATE TABLE share_messages (
            memory_id  TEXT NOT NULL,
            uuid       TEXT NOT NULL,
            session_id TEXT,
            role       TEXT NOT NULL,
            ts_ms      INTEGER,
            text       TEXT NOT NULL,
            PRIMARY KEY (memory_id, uuid)
        ) WITHOUT ROWID;
        -- What did not cross: pulled rows refused (bad server data) and memories kept local (too large).
        CREATE TABLE share_problems (
            episode_id TEXT NOT NULL,
            direction  TEXT NOT NULL CHECK (direction IN ('push', 'pull')),
            server_seq INTEGER,
            reason     TEXT NOT NULL,
            at         INTEGER NOT NULL,
            PRIMARY KEY (episode_id, direction)
        ) WITHOUT ROWID;
        """
    )
    # Which memories are commit messages (policy: teams get them) is looked up by the tool call's line.
    conn.execute("CREATE INDEX IF NOT EXISTS idx_tool_signals_use ON tool_signals(use_uuid)")
    for statement in TRIGGERS:  # the failure table's come with its own migration (create_lesson_tables)
        conn.execute(statement)


def create_lesson_tables(conn: apsw.Connection) -> None:
    """What makes a memory tellable, as other machines know it (migration m024_shared_lessons)."""
    conn.execute(
        """
        -- A memory's lesson as last pulled (or merged from a copy learned elsewhere): a JSON object whose fields
        -- this version does not know are kept here and sent on with the memory (processor/share/lessons.py).
        CREATE TABLE share_lessons (
            memory_id TEXT PRIMARY KEY,
            payload   TEXT NOT NULL
        ) WITHOUT ROWID;
        """
    )
    for statement in LESSON_TRIGGERS:
        conn.execute(statement)
    # Memories mined before their lessons travelled go out again with them (an unchanged one's push changes
    # nothing but its lesson on the server).
    conn.execute(f"INSERT INTO share_outbox(episode_id, queued_at) SELECT episode_id, {_NOW_MS} FROM memory_origins "
                 "WHERE (SELECT enabled FROM share_state WHERE id = 1) = 1 "
                 "AND episode_id NOT IN (SELECT episode_id FROM share_outbox)")


# --- the sync state -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShareState:
    enabled: bool
    machine_id: str | None
    role: str | None
    pull_cursor: int
    server_seq: int
    last_push_at: int | None
    last_pull_at: int | None
    last_ok_at: int | None
    last_error: str | None
    last_error_fix: str | None
    last_error_at: int | None
    pushed: int
    pulled: int


_STATE_COLUMNS = ("enabled, machine_id, role, pull_cursor, server_seq, last_push_at, last_pull_at, last_ok_at, "
                  "last_error, last_error_fix, last_error_at, pushed, pulled")


def state(conn: apsw.Connection) -> ShareState:
    row = conn.execute(f"SELECT {_STATE_COLUMNS} FROM share_state WHERE id = 1").fetchone()
    return ShareState(bool(row[0]), *row[1:])


def set_machine_id(conn: apsw.Connection, machine_id: str) -> None:
    conn.execute("UPDATE share_state SET machine_id = ? WHERE id = 1", (machine_id,))


def change_server(conn: apsw.Connection, server_id: str) -> bool:
    """Note which shared database this machine syncs with; True when it is another one than before (its cursor
    is reset, and every memory queued again: the new one has none of them)."""
    previous = conn.execute("SELECT server_id FROM share_state WHERE id = 1").fetchone()[0]
    if previous == server_id:
        return False
    conn.execute("UPDATE share_state SET server_id = ? WHERE id = 1", (server_id,))
    if previous is None:
        return False
    conn.execute("UPDATE share_state SET pull_cursor = 0, server_seq = 0, enabled = 0 WHERE id = 1")
    return True


def server_id(conn: apsw.Connection) -> str | None:
    return conn.execute("SELECT server_id FROM share_state WHERE id = 1").fetchone()[0]


def set_role(conn: apsw.Connection, role: str) -> None:
    """The database role this machine syncs as (the person): tells own memories from teammates'."""
    conn.execute("UPDATE share_state SET role = ? WHERE id = 1 AND role IS NOT ?", (role, role))


def enable(conn: apsw.Connection, now_ms: int) -> int:
    """Turn the outbox triggers on; when they were off, queue every memory (changes made meanwhile were not
    caught; a push of an unchanged memory changes nothing on the server). Returns how many were queued."""
    if conn.execute("SELECT enabled FROM share_state WHERE id = 1").fetchone()[0]:
        return 0
    conn.execute("UPDATE share_state SET enabled = 1 WHERE id = 1")
    conn.execute("INSERT INTO share_outbox(episode_id, queued_at) SELECT id, ? FROM episodes "
                 "WHERE id NOT IN (SELECT episode_id FROM share_outbox) ORDER BY rowid", (now_ms,))
    return conn.changes()


def disable(conn: apsw.Connection) -> None:
    """Sharing is no longer configured: stop queueing (what is queued stays for when it comes back)."""
    conn.execute("UPDATE share_state SET enabled = 0 WHERE id = 1")


def set_applying(conn: apsw.Connection, applying: bool) -> None:
    """Inside the transaction that applies pulled changes: the triggers must not queue them for a push."""
    conn.execute("UPDATE share_state SET applying = ? WHERE id = 1", (1 if applying else 0,))


def record_push(conn: apsw.Connection, count: int, now_ms: int) -> None:
    conn.execute("UPDATE share_state SET last_push_at = ?, last_ok_at = ?, pushed = pushed + ? WHERE id = 1",
                 (now_ms, now_ms, count))


def record_pull(conn: apsw.Connection, cursor: int, server_seq: int, count: int, now_ms: int) -> None:
    conn.execute("UPDATE share_state SET pull_cursor = max(pull_cursor, ?), server_seq = max(server_seq, ?), "
                 "last_pull_at = ?, last_ok_at = ?, pulled = pulled + ? WHERE id = 1",
                 (cursor, server_seq, now_ms, now_ms, count))


def record_contact(conn: apsw.Connection, now_ms: int) -> None:
    """The shared database answered and nothing waited on either side (the sync is current as of now)."""
    conn.execute("UPDATE share_state SET last_ok_at = ? WHERE id = 1", (now_ms,))


def reset_cursor(conn: apsw.Connection) -> None:
    """Pull everything again from the start (a new shared database, or a team left)."""
    conn.execute("UPDATE share_state SET pull_cursor = 0, server_seq = 0 WHERE id = 1")


def record_error(conn: apsw.Connection, error: Redacted | None, fix: Redacted | None, now_ms: int) -> None:
    """The last error and its fix (None clears it: the last sync succeeded)."""
    if error is None:
        conn.execute("UPDATE share_state SET last_error = NULL, last_error_fix = NULL, last_error_at = NULL "
                     "WHERE id = 1 AND last_error IS NOT NULL")
    else:
        conn.execute("UPDATE share_state SET last_error = ?, last_error_fix = ?, last_error_at = ? WHERE id = 1",
                     (redacted(error[:2000]), redacted((fix or "")[:2000] or None), now_ms))


# --- the outbox -----------------------------------------------------------------------------------


def pending_count(conn: apsw.Connection) -> int:
    return conn.execute("SELECT count(*) FROM share_outbox").fetchone()[0]


def newest_outbox_seq(conn: apsw.Connection) -> int:
    """Changes queued since a previous call show as a larger number (one index lookup)."""
    return conn.execute("SELECT coalesce(max(seq), 0) FROM share_outbox").fetchone()[0]


def oldest_pending_at(conn: apsw.Connection) -> int | None:
    return conn.execute("SELECT min(queued_at) FROM share_outbox").fetchone()[0]


def outbox_batch(conn: apsw.Connection, limit: int) -> list[tuple[int, str]]:
    """(seq, episode_id) of the oldest queued changes."""
    return conn.execute("SELECT seq, episode_id FROM share_outbox ORDER BY seq LIMIT ?", (limit,)).fetchall()


def outbox_done(conn: apsw.Connection, entries: list[tuple[int, str]]) -> None:
    """Remove pushed entries; one queued again meanwhile has a larger seq and stays."""
    conn.executemany("DELETE FROM share_outbox WHERE seq = ? AND episode_id = ?", entries)


def queue(conn: apsw.Connection, episode_ids: list[str], now_ms: int) -> None:
    """Queue these memories for a push (a project newly shared with a team)."""
    conn.executemany("DELETE FROM share_outbox WHERE episode_id = ?", [(i,) for i in episode_ids])
    conn.executemany("INSERT INTO share_outbox(episode_id, queued_at) VALUES (?, ?)",
                     [(i, now_ms) for i in episode_ids])


def queued_ids(conn: apsw.Connection, episode_ids: list[str]) -> set[str]:
    return {r[0] for r in rows_in(conn, "SELECT episode_id FROM share_outbox WHERE episode_id IN ({marks})",
                                  episode_ids)}


def drop_from_outbox(conn: apsw.Connection, episode_ids: list[str]) -> None:
    conn.executemany("DELETE FROM share_outbox WHERE episode_id = ?", [(i,) for i in episode_ids])


# --- memories as the push reads them ---------------------------------------------------------------


@dataclass(frozen=True)
class LocalMemory(Episode):
    """An episode as it leaves the machine, with what decides whether and to whom it goes."""

    content_hash: str
    embedding: bytes | None
    forgotten_reason: str | None
    session_opt_out: str | None


# The episode's columns, then LocalMemory's own (the episode's table is `e`: its session's joins it).
_PUSH_COLUMNS = (", ".join(f"e.{column}" for column in EPISODE_COLUMNS.split(", "))
                 + ", e.content_hash, e.embedding, e.forgotten_reason, s.opt_out")


def memories_for_push(conn: apsw.Connection, episode_ids: list[str]) -> dict[str, LocalMemory]:
    """The current state of these episodes (absent ids were deleted), with their session's opt-out."""
    rows = rows_in(conn, f"SELECT {_PUSH_COLUMNS} FROM episodes e LEFT JOIN sessions s ON s.session_id = e.session_id "
                         "WHERE e.id IN ({marks})", episode_ids)
    return {memory.id: memory for memory in map(LocalMemory.from_row, rows)}


def own_projects_of(conn: apsw.Connection, episode_ids: list[str]) -> list[str]:
    """The projects of these episodes, of those made here (not pulled replicas): the roots a push keys."""
    if not episode_ids:
        return []
    marks = ",".join("?" * len(episode_ids))
    rows = conn.execute(f"SELECT DISTINCT e.project FROM episodes e LEFT JOIN share_rows r ON r.episode_id = e.id "
                        f"WHERE e.id IN ({marks}) AND coalesce(r.pulled, 0) = 0 AND e.project IS NOT NULL",
                        episode_ids)
    return [r[0] for r in rows]


# --- what makes a memory tellable elsewhere (processor/share/lessons.py) --------------------------------------


def pulled_lessons(conn: apsw.Connection, memory_ids: list[str]) -> dict[str, str]:
    """memory id → its lesson as other machines know it (JSON), for those that have one."""
    return dict(rows_in(conn, "SELECT memory_id, payload FROM share_lessons WHERE memory_id IN ({marks})",
                        memory_ids))


def save_lesson(conn: apsw.Connection, memory_id: str, payload: Redacted) -> None:
    conn.execute("INSERT INTO share_lessons(memory_id, payload) VALUES (?, ?) ON CONFLICT(memory_id) DO UPDATE "
                 "SET payload = excluded.payload WHERE payload IS NOT excluded.payload", (memory_id, redacted(payload)))


def drop_lessons(conn: apsw.Connection, memory_ids: list[str]) -> None:
    conn.executemany("DELETE FROM share_lessons WHERE memory_id = ?", [(i,) for i in memory_ids])


def session_agents(conn: apsw.Connection, memory_ids: list[str]) -> dict[str, str]:
    """memory id → the agent whose session it was learned in, for memories of a session captured here."""
    return dict(rows_in(conn, "SELECT e.id, s.agent FROM episodes e JOIN sessions s ON s.session_id = e.session_id "
                              "WHERE e.id IN ({marks})", memory_ids))


def captured_sessions(conn: apsw.Connection, session_ids: list[str]) -> set[str]:
    """Which of these sessions were captured here (the others were met on another machine)."""
    return {r[0] for r in rows_in(conn, "SELECT session_id FROM sessions WHERE session_id IN ({marks})",
                                  session_ids)}


@dataclass(frozen=True)
class PulledFix:
    """A fix made elsewhere whose lesson this machine holds, and where it came from (engram status, the viewer)."""

    memory_id: str
    project: str | None
    created_at: int
    filed: bool  # filed under its failure here (a clone of its project is here)
    origin: Origin


def pulled_fixes(conn: apsw.Connection, limit: int = 10_000) -> list[PulledFix]:
    """The active memories made on another machine that tell a failure's fix, newest first."""
    try:
        rows = _pulled_fixes(conn, limit)
    except apsw.SQLError:  # a database from before lessons travelled
        return []
    return [PulledFix(r[0], r[1], r[2], bool(r[3]), Origin(r[4], r[5], r[6], r[7], True, bool(r[8]))) for r in rows]


def _pulled_fixes(conn: apsw.Connection, limit: int) -> list[tuple]:
    return conn.execute(
        "SELECT l.memory_id, e.project, e.created_at, EXISTS (SELECT 1 FROM failure_signatures f "
        "WHERE f.memory_id = l.memory_id AND f.project IS e.project), r.origin_machine, r.owner, m.hostname, r.team, "
        "r.owner = coalesce(s.role, r.owner) FROM share_lessons l JOIN episodes e ON e.id = l.memory_id "
        "JOIN share_rows r ON r.episode_id = l.memory_id AND r.pulled = 1 "
        "LEFT JOIN share_machines m ON m.machine_id = r.origin_machine LEFT JOIN share_state s ON s.id = 1 "
        "WHERE e.status = 'active' AND json_extract(l.payload, '$.failure') IS NOT NULL "
        "ORDER BY e.created_at DESC LIMIT ?", (limit,)).fetchall()


# --- what the shared database holds -------------------------------------------------------------------


@dataclass(frozen=True)
class SharedRow:
    episode_id: str
    server_seq: int
    origin_machine: str
    owner: str
    team: str | None
    project_key: str | None
    pulled: bool


def shared_rows(conn: apsw.Connection, episode_ids: list[str]) -> dict[str, SharedRow]:
    rows = rows_in(conn, "SELECT episode_id, server_seq, origin_machine, owner, team, project_key, pulled "
                         "FROM share_rows WHERE episode_id IN ({marks})", episode_ids)
    return {r[0]: SharedRow(*r[:6], bool(r[6])) for r in rows}


def record_shared(conn: apsw.Connection, rows: list[SharedRow]) -> None:
    conn.executemany(
        "INSERT INTO share_rows(episode_id, server_seq, origin_machine, owner, team, project_key, pulled) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(episode_id) DO UPDATE SET "
        "server_seq = max(server_seq, excluded.server_seq), origin_machine = excluded.origin_machine, "
        "owner = excluded.owner, team = excluded.team, project_key = excluded.project_key, "
        "pulled = excluded.pulled",
        [(r.episode_id, r.server_seq, r.origin_machine, r.owner, r.team, r.project_key, int(r.pulled))
         for r in rows])


def replica_ids_of_others(conn: apsw.Connection, owner_not: str, after: str, limit: int) -> list[str]:
    """Replicas of other people's memories, a page at a time in id order (still visible on the server?)."""
    return [r[0] for r in conn.execute("SELECT episode_id FROM share_rows WHERE pulled = 1 AND owner != ? "
                                       "AND episode_id > ? ORDER BY episode_id LIMIT ?", (owner_not, after, limit))]


def forget_shared_rows(conn: apsw.Connection, episode_ids: list[str]) -> None:
    conn.executemany("DELETE FROM share_rows WHERE episode_id = ?", [(i,) for i in episode_ids])


@dataclass(frozen=True)
class Origin:
    """Where a replicated memory was made: the machine and its person, as this machine knows them."""

    machine_id: str
    owner: str
    hostname: str | None
    team: str | None
    pulled: bool
    mine: bool  # made by this person (on another of their machines), not by a teammate

    def describe(self) -> str:
        machine = f"{self.hostname} ({self.machine_id})" if self.hostname else self.machine_id
        if self.mine:
            return f"your machine {machine}"
        return f"teammate {self.owner}, machine {machine}" + (f", team {self.team}" if self.team else "")

    def source(self) -> str:
        """Where a memory told here came from: "learned on laptop" (one of your machines, by its name) or "from
        teammate bob" (a person: never their machine or their paths)."""
        return f"learned on {self.hostname or self.machine_id}" if self.mine else f"from teammate {self.owner}"

    def learned(self, created_at: int) -> str:
        """The source with the day it was learned: "learned on laptop, 2026-11-20"."""
        return f"{self.source()}, {utc_date(created_at)}"


def origins_of(conn: apsw.Connection, episode_ids: list[str]) -> dict[str, Origin]:
    """Where these memories were made, for those made on another machine (pulled here)."""
    if not episode_ids:
        return {}
    marks = ",".join("?" * len(episode_ids))
    try:
        rows = conn.execute(f"SELECT r.episode_id, r.origin_machine, r.owner, m.hostname, r.team, r.pulled, "
                            f"r.owner = coalesce(s.role, r.owner) FROM share_rows r "
                            f"LEFT JOIN share_machines m ON m.machine_id = r.origin_machine "
                            f"LEFT JOIN share_state s ON s.id = 1 "
                            f"WHERE r.episode_id IN ({marks}) AND r.pulled = 1", episode_ids).fetchall()
    except apsw.SQLError:  # a database from before shared memory
        return {}
    return {r[0]: Origin(r[1], r[2], r[3], r[4], bool(r[5]), bool(r[6])) for r in rows}


def machine_names(conn: apsw.Connection) -> list[tuple[str, str, str]]:
    return [tuple(r) for r in conn.execute("SELECT machine_id, owner, hostname FROM share_machines")]


def set_machines(conn: apsw.Connection, machines: list[tuple[str, str, str]]) -> None:
    conn.executemany("INSERT INTO share_machines(machine_id, owner, hostname) VALUES (?, ?, ?) "
                     "ON CONFLICT(machine_id) DO UPDATE SET owner = excluded.owner, hostname = excluded.hostname",
                     machines)


# --- projects across machines ---------------------------------------------------------------------


def project_keys(conn: apsw.Connection) -> dict[str, tuple[str, bool]]:
    """project_root → (project_key, whether it came from a git remote)."""
    return {r[0]: (r[1], bool(r[2])) for r in conn.execute(
        "SELECT project_root, project_key, has_remote FROM share_projects")}


def set_project_key(conn: apsw.Connection, root: str, key: str, has_remote: bool, now_ms: int) -> None:
    conn.execute("INSERT INTO share_projects(project_root, project_key, has_remote, checked_at) VALUES (?, ?, ?, ?) "
                 "ON CONFLICT(project_root) DO UPDATE SET project_key = excluded.project_key, "
                 "has_remote = excluded.has_remote, checked_at = excluded.checked_at",
                 (root, key, int(has_remote), now_ms))


def session_projects(conn: apsw.Connection) -> list[str]:
    """The project roots of this machine's captured sessions (the projects worked on here)."""
    return [r[0] for r in conn.execute("SELECT DISTINCT project FROM sessions WHERE project IS NOT NULL")]


def team_projects(conn: apsw.Connection) -> dict[str, str]:
    """project_key → team, for the projects this user shares with a team."""
    return dict(conn.execute("SELECT project_key, team FROM share_teams").fetchall())


def set_team_projects(conn: apsw.Connection, mapping: dict[str, str]) -> bool:
    """Mirror the server's list; True when it changed."""
    if team_projects(conn) == mapping:
        return False
    conn.execute("DELETE FROM share_teams")
    conn.executemany("INSERT INTO share_teams(project_key, team) VALUES (?, ?)", list(mapping.items()))
    return True


def memories_of_projects(conn: apsw.Connection, roots: list[str]) -> list[str]:
    """Ids of the memories (not verbatim rounds) of these project roots: queued again when a team is set."""
    if not roots:
        return []
    marks = ",".join("?" * len(roots))
    return [r[0] for r in conn.execute(f"SELECT id FROM episodes WHERE project IN ({marks}) "
                                       f"AND source_type != 'verbatim' ORDER BY rowid", roots)]


def replicas_to_relocate(conn: apsw.Connection, key: str, root: str) -> list[str]:
    """Pulled memories of a project known here by another root (made elsewhere, before this root was known), and
    pulled fixes already under this root whose failure is not filed yet (they came before any session here named
    the root its project: a clone that joined the project by its remote)."""
    return [r[0] for r in conn.execute(
        "SELECT e.id FROM share_rows r JOIN episodes e ON e.id = r.episode_id WHERE r.pulled = 1 "
        "AND r.project_key = ?1 AND e.scope = 'project' AND (e.project IS NULL OR e.project != ?2 "
        "OR (e.id IN (SELECT memory_id FROM share_lessons WHERE json_extract(payload, '$.failure') IS NOT NULL) "
        "AND e.id NOT IN (SELECT memory_id FROM failure_signatures WHERE memory_id IS NOT NULL)))", (key, root))]


def move_replica(conn: apsw.Connection, episode_id: str, root: str, entities: list[str]) -> None:
    """A pulled memory moved to this machine's clone of its project, with the paths it names under that clone."""
    conn.execute("UPDATE episodes SET project = ?, entities = ? WHERE id = ?",
                 (root, redacted_json(entities), episode_id))


# --- applying pulled memories ---------------------------------------------------------------------


@dataclass(frozen=True)
class Replica(NewEpisode):
    """A memory as pulled, ready for the episodes table (validated, its vector in this machine's model): a new
    episode with the lifecycle it has elsewhere."""

    valid_from: int
    valid_to: int | None
    superseded_by: str | None
    status: str


@dataclass(frozen=True)
class LocalVersion:
    """What a pulled change is compared with: the local row's state, and whether it waits to be pushed."""

    status: str
    content_hash: str
    # (summary, entities, importance, kind, scope, status, superseded_by, valid_to, content_hash, project,
    # source_uuids): the columns a pulled change may differ in
    fingerprint: tuple[Any, ...]


def fingerprint_of(r: Replica) -> tuple[Any, ...]:
    return (r.summary, json.dumps(r.entities), r.importance, r.kind, r.scope, r.status, r.superseded_by,
            r.valid_to, r.content_hash, r.project, json.dumps(r.source_uuids))


def local_versions(conn: apsw.Connection, episode_ids: list[str]) -> dict[str, LocalVersion]:
    rows = rows_in(conn, "SELECT id, summary, entities, importance, kind, scope, status, superseded_by, valid_to, "
                         "content_hash, project, source_uuids FROM episodes WHERE id IN ({marks})", episode_ids)
    return {r[0]: LocalVersion(r[6], r[9], tuple(r[1:])) for r in rows}


def insert_replica(conn: apsw.Connection, r: Replica, embedding: bytes | None) -> int:
    conn.execute(
        """
        INSERT INTO episodes (id, session_id, project, scope, summary, entities, importance, kind, source_type,
                              full_content, source_uuids, content_hash, embedding, created_at, accessed_at,
                              access_count, valid_from, valid_to, superseded_by, status)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?)
        """,
        (r.id, r.session_id, r.project, r.scope, r.summary, json.dumps(r.entities), r.importance, r.kind,
         r.source_type, r.full_content, json.dumps(r.source_uuids), r.content_hash, embedding, r.created_at,
         r.created_at, r.valid_from, r.valid_to, r.superseded_by, r.status))
    return conn.last_insert_rowid()


def update_replica(conn: apsw.Connection, r: Replica, embedding: bytes | None, *, new_vector: bool) -> None:
    """A pulled change to a memory this machine holds; its vector is replaced only when the text changed."""
    vector = ", embedding = ?" if new_vector else ""
    conn.execute(
        f"UPDATE episodes SET project = ?, scope = ?, summary = ?, entities = ?, importance = ?, kind = ?, "
        f"source_type = ?, full_content = ?, source_uuids = ?, content_hash = ?, valid_from = ?, valid_to = ?, "
        f"superseded_by = ?, status = ?{vector} WHERE id = ? AND status != 'forgotten'",
        (r.project, r.scope, r.summary, json.dumps(r.entities), r.importance, r.kind, r.source_type,
         r.full_content, json.dumps(r.source_uuids), r.content_hash, r.valid_from, r.valid_to, r.superseded_by,
         r.status, *((embedding,) if new_vector else ()), r.id))


def record_problem(conn: apsw.Connection, episode_id: str, direction: str, reason: Redacted, now_ms: int,
                   server_seq: int | None = None) -> None:
    conn.execute("INSERT INTO share_problems(episode_id, direction, server_seq, reason, at) VALUES (?, ?, ?, ?, ?) "
                 "ON CONFLICT(episode_id, direction) DO UPDATE SET server_seq = excluded.server_seq, "
                 "reason = excluded.reason, at = excluded.at",
                 (episode_id, direction, server_seq, redacted(reason[:500]), now_ms))


def problems(conn: apsw.Connection, limit: int = 20) -> list[tuple[str, str, str, int]]:
    """(episode_id, direction, reason, at), newest first."""
    return conn.execute("SELECT episode_id, direction, reason, at FROM share_problems ORDER BY at DESC LIMIT ?",
                        (limit,)).fetchall()


def problem_counts(conn: apsw.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT direction, count(*) FROM share_problems GROUP BY direction").fetchall())


def commit_ids(conn: apsw.Connection, episode_ids: list[str]) -> set[str]:
    """Which of these memories are commit messages (built from a `git commit` tool call that succeeded)."""
    return {r[0] for r in rows_in(
        conn, "SELECT e.id FROM episodes e JOIN tool_signals t ON t.use_uuid = json_extract(e.source_uuids, '$[0]') "
              "WHERE e.id IN ({marks}) AND json_extract(t.pending, '$.source') = 'commit'", episode_ids)}


# --- transcript messages of shared memories (share_messages = true) -----------------------------------


def captured_messages(conn: apsw.Connection, uuids: list[str]) -> list[tuple[str, str, str, int | None, str]]:
    """(uuid, session_id, role, ts_ms, text) of these captured messages (the ones still held here)."""
    return rows_in(conn, "SELECT uuid, session_id, role, ts_ms, text FROM messages WHERE uuid IN ({marks})", uuids)


def save_pulled_messages(conn: apsw.Connection,
                         rows: list[tuple[str, str, str | None, str, int | None, Redacted]]) -> None:
    """(memory_id, uuid, session_id, role, ts_ms, text) rows pulled with their memories; another machine redacted
    the text, and it goes through this machine's door too (its rules may be newer)."""
    conn.executemany("INSERT INTO share_messages(memory_id, uuid, session_id, role, ts_ms, text) "
                     "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(memory_id, uuid) DO UPDATE SET text = excluded.text, "
                     "role = excluded.role, ts_ms = excluded.ts_ms", [(*row[:5], redacted(row[5])) for row in rows])


def pulled_messages_of(conn: apsw.Connection, memory_id: str) -> list[tuple[str, str | None, str, int | None, str]]:
    """(uuid, session_id, role, ts_ms, text) of a pulled memory's messages, in time order."""
    try:
        return conn.execute("SELECT uuid, session_id, role, ts_ms, text FROM share_messages WHERE memory_id = ? "
                            "ORDER BY ts_ms, uuid", (memory_id,)).fetchall()
    except apsw.SQLError:  # a database from before shared memory
        return []
