"""The SQL of sessions and their messages: capture's writes, and the reads that report on them.

Callers own the transaction (see write_transaction); these functions only run statements.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from processor.redaction import Redacted, redacted

# apsw only in annotations: capture's line types build on MessageLine, and its line parsers load no database
# driver.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import apsw


@dataclass(frozen=True)
class MessageLine:
    """A transcript line that carries conversation text, as its message row keeps it (capture's CapturedLine
    adds what else it read on the line). Its text, cwd and branch came from a session: redacted
    (``processor.redaction``), and passed through the door again here."""

    uuid: str
    parent_uuid: str | None
    role: str
    timestamp: str | None
    ts_ms: int | None
    cwd: Redacted | None
    git_branch: Redacted | None
    text: Redacted
    api_message_id: str | None
    # A later copy of a message written again under the same id (the Gemini CLI: its tool calls and results
    # known): it replaces the stored text, the last copy wins.
    replaces: bool = False


@dataclass(frozen=True)
class SessionState:
    byte_offset: int
    inode: int | None
    last_line_hash: str | None
    last_line_len: int


def session_state(conn: apsw.Connection, session_id: str) -> SessionState | None:
    row = conn.execute(
        "SELECT byte_offset, inode, last_line_hash, last_line_len FROM sessions WHERE session_id = ?",
        (session_id,),
    ).fetchone()
    return SessionState(*row) if row else None


def cursors(conn: apsw.Connection, transcript_path: str) -> list[tuple[str, int, int | None]]:
    """(session id, cursor, inode) of every session captured from one file: a database of sessions (opencode's)
    keeps each session's cursor in ``byte_offset``."""
    return [tuple(row) for row in conn.execute(
        "SELECT session_id, byte_offset, inode FROM sessions WHERE transcript_path = ?", (transcript_path,))]


def set_turn_ended(conn: apsw.Connection, session_id: str, ended: bool) -> None:
    """Whether the session's last conversation line ended its turn (in the transaction that stores that line)."""
    conn.execute("UPDATE sessions SET turn_ended = ? WHERE session_id = ?", (int(ended), session_id))


def upsert_session(
    conn: apsw.Connection,
    *,
    session_id: str,
    transcript_path: str,
    project: str | None,
    checkout: str | None,
    inode: int,
    byte_offset: int,
    last_line_hash: str | None,
    last_line_len: int,
    last_activity: int | None,
    now_ms: int,
    agent: str,
) -> None:
    """Create or advance a session's row. Its project (``processor/capture/project.py``) and its checkout (the
    worktree or clone it ran in, kept in the ``project_root`` column) are those of its first lines: a session that
    moves to another folder stays in its project."""
    conn.execute(
        """
        INSERT INTO sessions (session_id, transcript_path, project, project_root, inode, byte_offset,
                              last_line_hash, last_line_len, last_activity, created_at, updated_at, agent)
        VALUES (:sid, :path, :project, :checkout, :inode, :offset, :hash, :hlen, :activity, :now, :now, :agent)
        ON CONFLICT(session_id) DO UPDATE SET
            transcript_path = excluded.transcript_path,
            project = COALESCE(sessions.project, excluded.project),
            project_root = COALESCE(sessions.project_root, excluded.project_root),
            inode = excluded.inode,
            byte_offset = excluded.byte_offset,
            last_line_hash = excluded.last_line_hash,
            last_line_len = excluded.last_line_len,
            last_activity = MAX(COALESCE(sessions.last_activity, 0), COALESCE(excluded.last_activity, 0)),
            updated_at = excluded.updated_at
        """,
        {
            "sid": session_id,
            "path": transcript_path,
            "project": project,
            "checkout": checkout,
            "inode": inode,
            "offset": byte_offset,
            "hash": last_line_hash,
            "hlen": last_line_len,
            "activity": last_activity,
            "now": now_ms,
            "agent": agent,
        },
    )


def store_line(conn: apsw.Connection, session_id: str, line: MessageLine, line_offset: int) -> bool:
    """Store one captured line; returns False when it was already stored.

    Assistant lines sharing message.id are parts of one message: later parts are
    appended to the row of the first part, and message_lines records each merged
    part so that re-reading the file never appends it twice.
    """
    unindexed: list[int] = []
    new = _store_line(conn, session_id, line, line_offset, unindexed)
    index_new_messages(conn, unindexed)
    return new


def _store_line(conn: apsw.Connection, session_id: str, line: MessageLine, line_offset: int,
                unindexed: list[int]) -> bool:
    if line.replaces:
        return _store_copy(conn, session_id, line, line_offset, unindexed)
    target = _message_row(conn, session_id, line.api_message_id)
    if target is None:
        return _insert_message(conn, session_id, line, line_offset, line.text, unindexed)
    if target == line.uuid:
        return False  # the first part itself, read again
    conn.execute("INSERT OR IGNORE INTO message_lines (line_uuid, message_uuid) VALUES (?, ?)", (line.uuid, target))
    if conn.changes() == 0:
        return False
    # The update trigger replaces the row's full-text entry, so the row must have one first.
    index_new_messages(conn, unindexed)
    # The whole text goes through the door again, not only the new part: two clean halves can make a secret.
    [stored] = conn.execute("SELECT text FROM messages WHERE uuid = ?", (target,)).fetchone()
    conn.execute("UPDATE messages SET text = ? WHERE uuid = ?", (redacted(f"{stored}\n{line.text}"), target))
    return True


def _store_copy(conn: apsw.Connection, session_id: str, line: MessageLine, line_offset: int,
                unindexed: list[int]) -> bool:
    """A message written again under its id: inserted when new, else its text replaced where it changed (the
    last copy wins; re-reading the file replays the copies in order and ends on the same text). Returns
    whether anything was written."""
    if _insert_message(conn, session_id, line, line_offset, line.text, unindexed):
        return True
    row = conn.execute("SELECT session_id, text FROM messages WHERE uuid = ?", (line.uuid,)).fetchone()
    if row is None or row[0] != session_id or row[1] == line.text:
        return False  # another session's id (never overwritten), or the same copy read again
    # The update trigger replaces the row's full-text entry, so the row must have one first.
    index_new_messages(conn, unindexed)
    conn.execute("UPDATE messages SET text = ?, ts_ms = COALESCE(ts_ms, ?), timestamp = COALESCE(timestamp, ?) "
                 "WHERE uuid = ?", (redacted(line.text), line.ts_ms, line.timestamp, line.uuid))
    return True


def rewind(conn: apsw.Connection, session_id: str, uuid: str) -> int | None:
    """Remove the session's messages from `uuid` on, as the agent did (the Gemini CLI's ``$rewindTo``); returns
    how many were removed, or None when `uuid` is not a stored message of this session (nothing is removed).

    The session's progress markers move back before the rewound messages: a message stored later may reuse
    their row ids, and must not be taken as already turned into episodes or extracted. Episodes already made
    from the rewound messages stay: what they describe did happen.
    """
    row = conn.execute("SELECT id FROM messages WHERE uuid = ? AND session_id = ?", (uuid, session_id)).fetchone()
    if row is None:
        return None
    first = row[0]
    gone = [r[0] for r in conn.execute("SELECT uuid FROM messages WHERE session_id = ? AND id >= ?",
                                      (session_id, first))]
    marked = json.dumps(gone)
    conn.execute("DELETE FROM message_lines WHERE message_uuid IN (SELECT value FROM json_each(?))", (marked,))
    conn.execute("DELETE FROM tool_calls WHERE session_id = ? AND (use_uuid IN (SELECT value FROM json_each(?)) "
                 "OR result_uuid IN (SELECT value FROM json_each(?)))", (session_id, marked, marked))
    conn.execute("DELETE FROM tool_signals WHERE session_id = ? AND state = 'pending' "
                 "AND use_uuid IN (SELECT value FROM json_each(?))", (session_id, marked))
    conn.execute("DELETE FROM messages WHERE session_id = ? AND id >= ?", (session_id, first))
    conn.execute("UPDATE sessions SET episodized_through = MIN(episodized_through, ?) WHERE session_id = ?",
                 (first - 1, session_id))
    conn.execute("UPDATE extraction_state SET extracted_through = MIN(extracted_through, ?) WHERE session_id = ?",
                 (first - 1, session_id))
    return len(gone)


def stored_uuids(conn: apsw.Connection, uuids: list[str]) -> list[str]:
    """Those of `uuids` that are stored messages."""
    if not uuids:
        return []
    return [r[0] for r in conn.execute("SELECT uuid FROM messages WHERE uuid IN (SELECT value FROM json_each(?))",
                                       (json.dumps(uuids),))]


def session_agent(conn: apsw.Connection, session_id: str) -> str | None:
    row = conn.execute("SELECT agent FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
    return row[0] if row else None


def agents_of(conn: apsw.Connection, session_ids: list[str]) -> dict[str, str]:
    """session id → the agent that wrote it, for the ids stored (one statement)."""
    if not session_ids:
        return {}
    rows = conn.execute("SELECT session_id, agent FROM sessions WHERE session_id IN (SELECT value FROM json_each(?))",
                        (json.dumps(sorted(set(session_ids))),))
    return {sid: agent for sid, agent in rows}


def _message_row(conn: apsw.Connection, session_id: str, api_message_id: str | None) -> str | None:
    """The uuid of the row that holds this API message's parts, if any."""
    if not api_message_id:
        return None
    row = conn.execute("SELECT uuid FROM messages WHERE session_id = ? AND api_message_id = ?",
                       (session_id, api_message_id)).fetchone()
    return row[0] if row else None


def _insert_message(conn: apsw.Connection, session_id: str, line: MessageLine, line_offset: int, text: Redacted,
                    unindexed: list[int]) -> bool:
    """Insert the row (not yet in the full-text index: its id is added to `unindexed`); False when this
    uuid is stored already (a re-read, or a resumed session's copy)."""
    conn.execute(
        """
        INSERT OR IGNORE INTO messages (uuid, session_id, parent_uuid, role, timestamp, ts_ms, cwd, git_branch,
                                        text, line_offset, api_message_id)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """,
        (line.uuid, session_id, line.parent_uuid, line.role, line.timestamp, line.ts_ms, redacted(line.cwd),
         redacted(line.git_branch), redacted(text), line_offset, line.api_message_id),
    )
    if conn.changes() != 1:
        return False
    unindexed.append(conn.last_insert_rowid())
    return True


def index_new_messages(conn: apsw.Connection, unindexed: list[int]) -> None:
    """Add these new rows to the messages' full-text index, in one statement, and clear the list.

    One statement per batch, not a trigger per row: FTS5 writes a segment at the end of each statement
    that adds to it (see migration m015). Every insert reaches here before its transaction commits.
    """
    if unindexed:
        conn.execute("INSERT INTO messages_fts(rowid, text) SELECT id, text FROM messages "
                     "WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id", (json.dumps(unindexed),))
        unindexed.clear()


def store_lines(conn: apsw.Connection, session_id: str, lines: list[tuple[MessageLine, int]]) -> list[bool]:
    """store_line for a batch of (line, its byte offset), in order; returns, per line, whether it was new (for
    a message written several times in the batch, its last copy says whether the message was written).

    The parts of one assistant message (Claude Code writes a line per content block, all with the
    message's id) that arrive in one batch are written at once: the row is inserted with their texts
    joined, instead of inserted and then appended to once per part. Each append rewrote the row's
    full-text entry, so a message of k parts was tokenised k times. The stored text is the same.
    The batch's new rows are indexed for full-text search together, at the end.
    """
    given, lines = lines, _last_copies(lines)
    parts: dict[str, list[int]] = {}  # api message id → indexes of its parts in this batch
    for index, (line, _) in enumerate(lines):
        if line.api_message_id and not line.replaces:
            parts.setdefault(line.api_message_id, []).append(index)
    new = [False] * len(lines)
    merged: set[int] = set()
    unindexed: list[int] = []
    for index, (line, offset) in enumerate(lines):
        if index in merged:
            continue
        group = parts.get(line.api_message_id or "", [])
        if len(group) > 1 and group[0] == index and _store_as_one(conn, session_id, [lines[i] for i in group],
                                                                   unindexed):
            for i in group:
                new[i] = True
            merged.update(group)
            continue
        new[index] = _store_line(conn, session_id, line, offset, unindexed)
    index_new_messages(conn, unindexed)
    if lines is not given:
        # Per line given: a copy stands for its message when it is the last one (the one stored).
        stored = {line.uuid: is_new for (line, _), is_new in zip(lines, new, strict=True)}
        final = {line.uuid: index for index, (line, _) in enumerate(given)}
        return [stored.get(line.uuid, False) and final[line.uuid] == index for index, (line, _) in enumerate(given)]
    return new


def _last_copies(lines: list[tuple[MessageLine, int]]) -> list[tuple[MessageLine, int]]:
    """A message written again within the batch (``replaces``) is stored once: its last copy, where its first
    copy stood, so the row is written with its final text (no update, no second full-text entry)."""
    last: dict[str, int] = {}
    for index, (line, _) in enumerate(lines):
        if line.replaces:
            last[line.uuid] = index
    if len(last) == sum(1 for line, _ in lines if line.replaces):
        return lines  # no copy repeats in this batch
    placed: set[str] = set()
    kept = []
    for line, offset in lines:
        if line.replaces:
            if line.uuid in placed:
                continue
            placed.add(line.uuid)
            line = lines[last[line.uuid]][0]
        kept.append((line, offset))
    return kept


def _store_as_one(conn: apsw.Connection, session_id: str, parts: list[tuple[MessageLine, int]],
                  unindexed: list[int]) -> bool:
    """A new message's parts as one row; False (nothing written) when the message has a row already,
    or its first line is stored under another message: then the parts go one by one."""
    first, offset = parts[0]
    if _message_row(conn, session_id, first.api_message_id) is not None:
        return False
    # Joined parts go through the door again: two clean halves can make a secret.
    joined = redacted("\n".join(line.text for line, _ in parts))
    if not _insert_message(conn, session_id, first, offset, joined, unindexed):
        return False
    conn.executemany("INSERT OR IGNORE INTO message_lines (line_uuid, message_uuid) VALUES (?, ?)",
                     [(line.uuid, first.uuid) for line, _ in parts[1:]])
    return True


def counts(conn: apsw.Connection) -> dict[str, int]:
    sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
    messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    return {"sessions": sessions, "messages": messages}


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    transcript_path: str
    project: str | None
    byte_offset: int
    last_activity: int | None
    messages: int
    agent: str


def counts_by_agent(conn: apsw.Connection) -> dict[str, int]:
    """Sessions per agent, for the agents with any."""
    return {agent: n for agent, n in conn.execute("SELECT agent, count(*) FROM sessions GROUP BY agent ORDER BY agent")}


def recent_sessions(conn: apsw.Connection, since_ms: int) -> list[SessionSummary]:
    rows = conn.execute(
        """
        SELECT s.session_id, s.transcript_path, s.project, s.byte_offset, s.last_activity,
               (SELECT count(*) FROM messages m WHERE m.session_id = s.session_id), s.agent
        FROM sessions s
        WHERE s.last_activity >= ?
        ORDER BY s.last_activity DESC
        """,
        # Active by its newest message's time, not by when Engram captured it: a backfill of last
        # month's transcripts must not list them all as active, nor a session without any message.
        (since_ms,),
    ).fetchall()
    return [SessionSummary(*row) for row in rows]


def session_activity(conn: apsw.Connection, session_id: str) -> int | None:
    """The session's last message time (or, before one is known, when it was last captured)."""
    row = conn.execute("SELECT COALESCE(last_activity, updated_at) FROM sessions WHERE session_id = ?",
                       (session_id,)).fetchone()
    return row[0] if row else None


def newest_prompt_uuid(conn: apsw.Connection, session_id: str, not_prefix: str) -> str | None:
    """The uuid of the session's newest user message that does not start with `not_prefix`."""
    row = conn.execute(
        "SELECT uuid FROM messages WHERE session_id = ? AND role = 'user' AND substr(text, 1, ?) != ? "
        "ORDER BY id DESC LIMIT 1",
        (session_id, len(not_prefix), not_prefix),
    ).fetchone()
    return row[0] if row else None


@dataclass(frozen=True)
class MessageSource:
    uuid: str
    session_id: str
    role: str
    text: str
    ts_ms: int | None
    timestamp: str | None


def round_of(conn: apsw.Connection, uuid: str) -> int | None:
    """The id of the user message that opened the round this message belongs to (None: not captured, or
    before the session's first user message). One index range of the session (idx_messages_session)."""
    row = conn.execute(
        "SELECT (SELECT max(u.id) FROM messages u WHERE u.session_id = m.session_id AND u.id <= m.id "
        "AND u.role = 'user') FROM messages m WHERE m.uuid = ?", (uuid,)).fetchone()
    return row[0] if row else None


def message_sources(conn: apsw.Connection, uuids: list[str]) -> list[MessageSource]:
    """The stored messages with these uuids, in the order given (missing ones left out)."""
    found = {}
    for uuid in uuids:
        row = conn.execute("SELECT uuid, session_id, role, text, ts_ms, timestamp FROM messages WHERE uuid = ?",
                           (uuid,)).fetchone()
        if row:
            found[uuid] = MessageSource(*row)
    return [found[u] for u in uuids if u in found]


# --- opting out (processor/capture/optout.py decides; these only record and apply it) ----------------

OPT_OUT_LEVELS = (None, "memory", "record")  # weakest first: a session's opt-out only ever grows


from processor.store.digest import session_opt_out  # noqa: E402,F401 - one query, stdlib-usable by the hook


def set_opt_out(conn: apsw.Connection, session_id: str, level: str) -> None:
    conn.execute("UPDATE sessions SET opt_out = ? WHERE session_id = ?", (level, session_id))


def drop_session_content(conn: apsw.Connection, session_id: str, now_ms: int) -> list[str]:
    """Delete the session's captured messages and erase the episodes made from them; returns those ids.

    The episodes are erased as a forget does (content, entities and vector gone, status 'forgotten'),
    not deleted: their rowids stay taken, so the processor's vector index can never mistake a later
    episode for one of them. Memories the user stored on purpose (memory_remember: source_type
    'manual') are kept. The session row stays: its opt-out must outlive the content.
    """
    ids = [row[0] for row in conn.execute(
        "SELECT id FROM episodes WHERE session_id = ? AND source_type != 'manual' AND status != 'forgotten'",
        (session_id,))]
    conn.execute(
        "UPDATE episodes SET status = 'forgotten', summary = '[forgotten]', full_content = '', entities = '[]', "
        "embedding = NULL, source_uuids = '[]', valid_to = COALESCE(valid_to, ?), "
        "forgotten_reason = 'off the record' "
        "WHERE session_id = ? AND source_type != 'manual' AND status != 'forgotten'", (now_ms, session_id))
    conn.execute("DELETE FROM message_lines WHERE message_uuid IN "
                 "(SELECT uuid FROM messages WHERE session_id = ?)", (session_id,))
    conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
    conn.execute("DELETE FROM extraction_state WHERE session_id = ?", (session_id,))
    conn.execute("DELETE FROM tool_calls WHERE session_id = ?", (session_id,))
    conn.execute("DELETE FROM queued_messages WHERE session_id = ?", (session_id,))
    return ids


def current_branch(conn: apsw.Connection, session_id: str) -> str | None:
    """The git branch the session's newest captured line named (Claude Code stamps every line with it)."""
    row = conn.execute("SELECT git_branch FROM messages WHERE session_id = ? AND git_branch IS NOT NULL "
                       "AND git_branch != '' ORDER BY id DESC LIMIT 1", (session_id,)).fetchone()
    return row[0] if row else None
