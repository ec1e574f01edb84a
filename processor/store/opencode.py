"""opencode's own SQLite store, read-only: its schema as Engram knows it, and every statement capture sends it.

opencode keeps its sessions in ``opencode.db`` (WAL mode, written by the running CLI). Engram opens it read-only
through SQLite (never a copy of the file: its write-ahead log holds the newest rows until a checkpoint) and reads
what is new in a session by opencode's own cursor: the insert-only ``event`` log, ``(aggregate_id, seq)`` unique,
``seq`` 0, 1, 2… per session, each row the whole message or part as it then was. Only the tables and columns
below are read; what a newer opencode adds is listed (``unknown``) and left alone; a table or column that is
gone is a schema problem, reported and not read. A database opencode holds locked past the busy timeout raises
``apsw.BusyError`` (the capture loop retries it).
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import apsw

BUSY_TIMEOUT_MS = 2000
# What capture reads, table by column; the other tables of opencode 1.18 are known and never read (accounts and
# credentials among them).
READ: dict[str, tuple[str, ...]] = {
    "event": ("aggregate_id", "seq", "type", "data"),
    "session": ("id", "directory", "parent_id", "time_updated"),
}
OPTIONAL: dict[str, tuple[str, ...]] = {
    "event_sequence": ("aggregate_id", "seq"),  # the last seq of each session (else computed from event)
    # a message's role, when its own event came before the rows read; a session older than the event log
    "message": ("id", "session_id", "time_created", "data"),
    "part": ("id", "message_id", "session_id", "time_updated", "data"),
}
KNOWN_TABLES = frozenset({*READ, *OPTIONAL, "workspace", "data_migration", "account_state", "account",
                          "control_account", "credential", "permission", "project_directory", "project",
                          "session_context_epoch", "session_input", "session_message", "todo", "session_share",
                          "migration", "sqlite_sequence", "sqlite_stat1", "sqlite_stat4"})
# Columns of the tables read, as opencode 1.18.33 has them: any other is a newer opencode's, counted.
KNOWN_COLUMNS: dict[str, frozenset[str]] = {
    "event": frozenset({"id", "aggregate_id", "seq", "type", "data"}),
    "session": frozenset({"id", "project_id", "workspace_id", "parent_id", "slug", "directory", "path", "title",
                          "version", "share_url", "summary_additions", "summary_deletions", "summary_files",
                          "summary_diffs", "metadata", "cost", "tokens_input", "tokens_output",
                          "tokens_reasoning", "tokens_cache_read", "tokens_cache_write", "revert", "permission",
                          "agent", "model", "time_created", "time_updated", "time_compacting", "time_archived"}),
    "event_sequence": frozenset({"aggregate_id", "seq", "owner_id"}),
    "message": frozenset({"id", "session_id", "time_created", "time_updated", "data"}),
    "part": frozenset({"id", "message_id", "session_id", "time_created", "time_updated", "data"}),
}
EVENT_ROWS = 500  # rows per statement; a batch stops earlier once it holds enough bytes


@dataclass(frozen=True)
class StoredSession:
    """A row of opencode's ``session`` table: the directory it ran in, its parent (a subagent's session), when
    it last changed (epoch ms)."""

    session_id: str
    directory: str | None
    parent_id: str | None
    time_updated: int | None


@dataclass(frozen=True)
class Schema:
    """What Engram found of the tables it reads: what is missing (nothing is read then), what it does not know."""

    missing: tuple[str, ...]
    unknown: tuple[str, ...]
    sequences: bool  # event_sequence is there
    messages: bool  # message and part are there
    fresh: bool  # none of the tables read is there yet: opencode is creating the database


class OpencodeDatabase:
    """One read-only connection to an ``opencode.db``; close it (or use ``with``) when done."""

    def __init__(self, path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
        self.conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        self.conn.set_busy_timeout(busy_timeout_ms)
        self._schema: Schema | None = None

    def __enter__(self) -> OpencodeDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def schema(self) -> Schema:
        """The tables and columns read, checked once per connection."""
        if self._schema is None:
            tables = {name for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            missing: list[str] = []
            usable: set[str] = set()  # the optional tables there with every column read
            unknown = [f"table {name}" for name in sorted(tables - KNOWN_TABLES)]
            for table, needed in (*READ.items(), *OPTIONAL.items()):
                if table not in tables:
                    if table in READ:
                        missing.append(f"table {table}")
                    continue
                columns = {row[1] for row in self.conn.execute(f"PRAGMA table_info({table})")}
                gone = [f"{table}.{column}" for column in needed if column not in columns]
                if table in READ:
                    missing += gone
                elif not gone:
                    usable.add(table)
                unknown += [f"column {table}.{column}" for column in sorted(columns - KNOWN_COLUMNS[table])]
            self._schema = Schema(tuple(missing), tuple(unknown), "event_sequence" in usable,
                                  {"message", "part"} <= usable, fresh=not tables & set(READ))
        return self._schema

    def heads(self) -> dict[str, int]:
        """Each session's last event seq (its newest row)."""
        if self.schema().sequences:
            sql = "SELECT aggregate_id, seq FROM event_sequence"
        else:
            sql = "SELECT aggregate_id, max(seq) FROM event GROUP BY aggregate_id"
        return {aggregate: seq for aggregate, seq in self.conn.execute(sql) if isinstance(seq, int)}

    def sessions(self, session_ids: list[str]) -> dict[str, StoredSession]:
        """The session rows of these ids (a session id without a row is not a session: another aggregate)."""
        if not session_ids:
            return {}
        rows = self.conn.execute("SELECT id, directory, parent_id, time_updated FROM session "
                                 "WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(session_ids),))
        return {row[0]: StoredSession(*row) for row in rows}

    def events(self, session_id: str, start: int, max_bytes: int) -> list[tuple[int, str, bytes | None]]:
        """The session's events from seq `start` on, in order, about `max_bytes` of them at most (at least one):
        (seq, type, data as bytes; None for a NULL)."""
        found: list[tuple[int, str, bytes | None]] = []
        size = 0
        # The data as bytes straight from SQLite (the reader parses bytes: no decoding to str and back).
        cursor = self.conn.execute("SELECT seq, type, CAST(data AS BLOB) FROM event WHERE aggregate_id = ? "
                                   "AND seq >= ? ORDER BY seq LIMIT ?", (session_id, start, EVENT_ROWS))
        try:
            for seq, kind, raw in cursor:
                found.append((seq, kind if isinstance(kind, str) else "", raw))
                size += len(raw or b"") + 64
                if size >= max_bytes:
                    break
        finally:
            cursor.close()
        return found

    def first_event(self, session_id: str) -> str | None:
        """The type of the session's event 0 (None: it has none): ``session.created.1`` when its log is whole."""
        row = self.conn.execute("SELECT type FROM event WHERE aggregate_id = ? AND seq = 0", (session_id,)).fetchone()
        return row[0] if row else None

    def unlogged(self, known: list[str], since_ms: int | None) -> list[StoredSession]:
        """The sessions with no event at all (made before opencode kept its event log), not among `known`, changed
        since `since_ms` (None: any)."""
        if not self.schema().messages:
            return []
        heads = "SELECT aggregate_id FROM event_sequence" if self.schema().sequences else \
            "SELECT DISTINCT aggregate_id FROM event"
        rows = self.conn.execute(
            f"SELECT id, directory, parent_id, time_updated FROM session WHERE id NOT IN ({heads}) "
            "AND id NOT IN (SELECT value FROM json_each(?)) AND time_updated >= ?",
            (json.dumps(known), since_ms or 0))
        return [StoredSession(*row) for row in rows]

    def stored_rows(self, session_id: str) -> list[tuple[str, bytes]]:
        """A session's messages and parts as they are now, as the events that would have written them: (type,
        data), each message before its parts, in the order they were made. For a session whose event log does not
        go back to its start."""
        return [(kind, data) for kind, data in self.conn.execute(
            "SELECT kind, data FROM ("
            " SELECT m.time_created AS t, m.id AS mid, 0 AS k, '' AS pid, 'message.updated.1' AS kind,"
            "  CAST(json_object('sessionID', m.session_id, 'info', json(json_set(m.data, '$.id', m.id,"
            "  '$.sessionID', m.session_id))) AS BLOB) AS data FROM message m WHERE m.session_id = ?1"
            " UNION ALL"
            " SELECT m.time_created, m.id, 1, p.id, 'message.part.updated.1',"
            "  CAST(json_object('sessionID', p.session_id, 'part', json(json_set(p.data, '$.id', p.id,"
            "  '$.sessionID', p.session_id, '$.messageID', p.message_id)), 'time', p.time_updated) AS BLOB)"
            "  FROM part p JOIN message m ON m.id = p.message_id WHERE p.session_id = ?1"
            ") ORDER BY t, mid, k, pid", (session_id,))]

    def role_of(self, message_id: str) -> str | None:
        """The role of a message (``user``, ``assistant``) as its row says, when its own event was read earlier."""
        if not self.schema().messages:
            return None
        try:
            row = self.conn.execute("SELECT json_extract(data, '$.role') FROM message WHERE id = ?",
                                    (message_id,)).fetchone()
        except apsw.SQLError:  # its data is no JSON
            return None
        return row[0] if row and isinstance(row[0], str) else None
