"""opencode's SQLite store, built as opencode 1.18.33 writes it, for tests and benchmarks: its schema (the tables
capture reads and those it must leave alone) and a session's rows written the way the CLI writes them — every
change of a message or part appended to the ``event`` log (seq 0, 1, 2… per session) and upserted into
``message``/``part`` — in WAL mode, as the running CLI keeps it. Written through apsw, the SQLite Engram reads
with: two SQLite libraries in one process would not see each other's locks.

The shapes are those the real CLI wrote against a fake model API (docs/agents.md), trimmed of fields Engram never
reads.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import apsw

# opencode 1.18.33's tables, as `opencode.db` holds them (its accounts and credentials among them: never read).
SCHEMA = """
CREATE TABLE IF NOT EXISTS project (id text PRIMARY KEY, worktree text NOT NULL, vcs text, name text,
    icon_url text, icon_url_override text, icon_color text, time_created integer NOT NULL,
    time_updated integer NOT NULL, time_initialized integer, sandboxes text NOT NULL, commands text);
CREATE TABLE IF NOT EXISTS session (id text PRIMARY KEY, project_id text NOT NULL, workspace_id text,
    parent_id text, slug text NOT NULL, directory text NOT NULL, path text, title text NOT NULL,
    version text NOT NULL, share_url text, summary_additions integer, summary_deletions integer,
    summary_files integer, summary_diffs text, metadata text, cost real DEFAULT 0 NOT NULL,
    tokens_input integer DEFAULT 0 NOT NULL, tokens_output integer DEFAULT 0 NOT NULL,
    tokens_reasoning integer DEFAULT 0 NOT NULL, tokens_cache_read integer DEFAULT 0 NOT NULL,
    tokens_cache_write integer DEFAULT 0 NOT NULL, revert text, permission text, agent text, model text,
    time_created integer NOT NULL, time_updated integer NOT NULL, time_compacting integer, time_archived integer);
CREATE TABLE IF NOT EXISTS message (id text PRIMARY KEY, session_id text NOT NULL, time_created integer NOT NULL,
    time_updated integer NOT NULL, data text NOT NULL);
CREATE TABLE IF NOT EXISTS part (id text PRIMARY KEY, message_id text NOT NULL, session_id text NOT NULL,
    time_created integer NOT NULL, time_updated integer NOT NULL, data text NOT NULL);
CREATE TABLE IF NOT EXISTS event_sequence (aggregate_id text PRIMARY KEY, seq integer NOT NULL, owner_id text);
CREATE TABLE IF NOT EXISTS event (id text PRIMARY KEY, aggregate_id text NOT NULL, seq integer NOT NULL,
    type text NOT NULL, data text NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS event_aggregate_seq_idx ON event (aggregate_id, seq);
CREATE INDEX IF NOT EXISTS event_aggregate_type_seq_idx ON event (aggregate_id, type, seq);
CREATE TABLE IF NOT EXISTS account (id text PRIMARY KEY, email text NOT NULL, url text NOT NULL,
    access_token text NOT NULL, refresh_token text NOT NULL, token_expiry integer, time_created integer NOT NULL,
    time_updated integer NOT NULL);
CREATE TABLE IF NOT EXISTS credential (id text PRIMARY KEY, integration_id text, label text NOT NULL,
    value text NOT NULL, connector_id text, method_id text, active integer, time_created integer NOT NULL,
    time_updated integer NOT NULL);
CREATE TABLE IF NOT EXISTS session_message (id text PRIMARY KEY, session_id text NOT NULL, type text NOT NULL,
    seq integer NOT NULL, time_created integer NOT NULL, time_updated integer NOT NULL, data text NOT NULL);
CREATE TABLE IF NOT EXISTS todo (session_id text NOT NULL, content text NOT NULL, status text NOT NULL,
    priority text NOT NULL, position integer NOT NULL, time_created integer NOT NULL, time_updated integer NOT NULL);
CREATE TABLE IF NOT EXISTS "migration" (id TEXT PRIMARY KEY, time_completed INTEGER NOT NULL);
"""

_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):026d}"


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))  # opencode stores compact JSON


class OpencodeStore:
    """An ``opencode.db`` in a data folder, open for writing as the CLI keeps it (WAL)."""

    def __init__(self, data_dir: Path, name: str = "opencode.db") -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / name
        self.conn = apsw.Connection(str(self.path))
        self.conn.set_busy_timeout(5000)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(SCHEMA)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> OpencodeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def session(self, directory: str = "/tmp/project", *, session_id: str | None = None,
                parent_id: str | None = None, start_ms: int = 1_795_845_462_735, logged: bool = True) -> Session:
        """A new session; `logged`: its changes go to the event log too (False: as an opencode older than the log
        wrote it, its rows only)."""
        return Session(self, directory, session_id or _id("ses"), parent_id, start_ms, logged)


class Session:
    """One session, written change by change as opencode writes it: ``prompt``, ``answer``, ``tool``…"""

    def __init__(self, store: OpencodeStore, directory: str, session_id: str, parent_id: str | None,
                 start_ms: int, logged: bool = True) -> None:
        self.store, self.id, self.directory, self.at = store, session_id, directory, start_ms
        self.seq = -1
        self.logged = logged
        self.info = {"id": session_id, "slug": "sunny-tiger", "projectID": "global", "directory": directory,
                     "title": "New session", "version": "1.18.33", "time": {"created": start_ms, "updated": start_ms}}
        with store.conn:
            store.conn.execute(
                "INSERT INTO session (id, project_id, parent_id, slug, directory, path, title, version, time_created, "
                "time_updated) VALUES (?, 'global', ?, 'sunny-tiger', ?, ?, 'New session', '1.18.33', ?, ?)",
                (session_id, parent_id, directory, directory.lstrip("/"), start_ms, start_ms))
        self.event("session.created.1", {"sessionID": session_id, "info": self.info})

    def _tick(self) -> int:
        self.at += 7
        return self.at

    def resume(self) -> None:
        """The session taken up again now: its later changes are of today."""
        self.at = int(time.time() * 1000)

    def event(self, kind: str, data: dict[str, Any]) -> int:
        """One change, appended to the event log (when the session is logged) in the transaction that upserts the
        row it describes."""
        conn = self.store.conn
        with conn:
            if self.logged:
                self.seq += 1
                conn.execute("INSERT INTO event (id, aggregate_id, seq, type, data) VALUES (?, ?, ?, ?, ?)",
                             (_id("evt"), self.id, self.seq, kind, _compact(data)))
                conn.execute("INSERT INTO event_sequence (aggregate_id, seq) VALUES (?, ?) ON CONFLICT(aggregate_id) "
                             "DO UPDATE SET seq = excluded.seq", (self.id, self.seq))
            if kind == "message.updated.1":
                info = data["info"]
                row = {k: v for k, v in info.items() if k not in ("id", "sessionID")}
                conn.execute("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES "
                             "(?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET data = excluded.data, time_updated = "
                             "excluded.time_updated", (info["id"], self.id, self.at, self.at, _compact(row)))
            elif kind == "message.part.updated.1":
                part = data["part"]
                row = {k: v for k, v in part.items() if k not in ("id", "sessionID", "messageID")}
                conn.execute("INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES "
                             "(?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET data = excluded.data, time_updated = "
                             "excluded.time_updated", (part["id"], part["messageID"], self.id, self.at, self.at,
                                                       _compact(row)))
            conn.execute("UPDATE session SET time_updated = ? WHERE id = ?", (self.at, self.id))
        return self.seq

    def message(self, role: str, **fields: Any) -> str:
        message_id = _id("msg")
        self.event("message.updated.1", {"sessionID": self.id, "info": {
            "id": message_id, "sessionID": self.id, "role": role, "time": {"created": self._tick()}, **fields}})
        return message_id

    def part(self, message_id: str, part_id: str, body: dict[str, Any]) -> None:
        self.event("message.part.updated.1", {"sessionID": self.id, "part": {
            "id": part_id, "sessionID": self.id, "messageID": message_id, **body}, "time": self._tick()})

    def prompt(self, text: str, *, injected: str | None = None) -> str:
        """The user's message: its text part, and (a plugin's chat.message) a synthetic part of injected context."""
        message_id = self.message("user", agent="build", model={"providerID": "fake", "modelID": "fake-model"})
        part_id = _id("prt")
        self.part(message_id, part_id, {"type": "text", "text": text})
        if injected is not None:
            self.part(message_id, part_id + "engram", {"type": "text", "text": injected, "synthetic": True})
        return message_id

    def step(self) -> str:
        """An assistant message (one model step), started."""
        message_id = self.message("assistant", parentID="msg", modelID="fake-model", providerID="fake", mode="build",
                                  agent="build", path={"cwd": self.directory, "root": "/"}, cost=0)
        self.part(message_id, _id("prt"), {"type": "step-start"})
        return message_id

    def answer(self, message_id: str, text: str) -> str:
        """An assistant's text part: written when it starts (empty) and again when it ends."""
        part_id, start = _id("prt"), self._tick()
        self.part(message_id, part_id, {"type": "text", "text": "", "time": {"start": start}})
        self.part(message_id, part_id, {"type": "text", "text": text, "time": {"start": start, "end": self._tick()}})
        return part_id

    def tool(self, message_id: str, tool: str, args: dict[str, Any], output: str, *, exit_code: int | None = 0,
             error: str | None = None, appended: str = "") -> str:
        """A tool part through its states: pending, running (with the output so far), completed — or error, for a
        tool that threw. `appended`: what a plugin's tool.execute.after added to the result the model reads."""
        part_id, call_id, start = _id("prt"), _id("call"), self._tick()
        base = {"type": "tool", "callID": call_id, "tool": tool}
        self.part(message_id, part_id, {**base, "state": {"status": "pending", "input": {}, "raw": ""}})
        self.part(message_id, part_id, {**base, "state": {"status": "running", "input": args,
                                                          "time": {"start": start}}})
        times = {"start": start, "end": self._tick()}
        if error is not None:
            self.part(message_id, part_id, {**base, "state": {"status": "error", "input": args, "error": error,
                                                              "time": times}})
            return part_id
        metadata: dict[str, Any] = {"output": output, "truncated": False} if tool == "bash" else {"truncated": False}
        if tool == "bash":
            self.part(message_id, part_id, {**base, "state": {"status": "running", "input": args,
                                                              "metadata": {"output": output}, "time": times}})
            metadata["exit"] = exit_code
        self.part(message_id, part_id, {**base, "state": {"status": "completed", "input": args,
                                                          "output": output + appended, "title": tool,
                                                          "metadata": metadata, "time": times}})
        return part_id

    def finish(self, message_id: str, reason: str) -> None:
        """The step's end: ``tool-calls`` (more steps follow) or ``stop`` (the turn is over)."""
        self.part(message_id, _id("prt"), {"type": "step-finish", "reason": reason, "cost": 0,
                                           "tokens": {"total": 110, "input": 100, "output": 10}})

    def touch(self) -> None:
        """The session's row updated (its title, its tokens): an event capture skips."""
        self.event("session.updated.1", {"sessionID": self.id, "info": {**self.info, "title": "Fake session title"}})
