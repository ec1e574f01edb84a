"""Stored text through the redaction door again, when the rules that find secrets change.

The door (``processor.redaction``) redacts what the rules of the day recognise. An upgrade that widens the rules
(a new kind of key) would leave every secret of that kind captured before it in the store, to be recalled into
later sessions, sent to an LLM or pushed to a shared database. So the rules in force are fingerprinted
(``rules_fingerprint``); while the store's stamp differs, the processor's periodic sweep calls ``rescan`` with
a time budget, which reads each column that holds captured text in rowid order, redacts it, and writes back only
what changed. A JSON column is compared and rewritten as JSON (its strings redacted, never its serialised form).
Progress (table, last rowid) is committed with each batch it describes, so a restart resumes where it stopped;
when every table is done the stamp is the current fingerprint. If any row changed, the full-text indexes are
merged (FTS5 ``optimize``: a deleted entry's tokens otherwise stay in older segments) and the WAL is checkpointed,
so the old text is gone from the file too (``secure_delete`` zeroes freed space). Vectors are kept: a vector is
not text.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import apsw

from processor.redaction import redacted, redacted_json, rules_fingerprint
from processor.store.connection import write_transaction
from processor.store.episodes import get_meta, set_meta

log = logging.getLogger(__name__)

STAMP_KEY = "redaction.rules"  # the fingerprint the whole store was last redacted with
PROGRESS_KEY = "redaction.rescan"  # {"rules", "table", "after"}: where a rescan in progress stands
BATCH_ROWS = 100  # rows a transaction: a user message that arrives meanwhile waits for one batch at most
ROWID = ("rowid",)
# (table, the key it is walked by, text columns, JSON columns): every place captured text is kept. A table a
# migration has not made yet (an older store) is skipped; a WITHOUT ROWID table is walked by its primary key.
COLUMNS: tuple[tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]], ...] = (
    ("messages", ROWID, ("text", "cwd", "git_branch"), ()),
    ("tool_calls", ROWID, ("target", "error"), ()),
    ("tool_signals", ROWID, ("text",), ("pending",)),
    ("queued_messages", ("session_id", "seq"), ("text",), ()),
    ("episodes", ROWID, ("summary", "full_content", "forgotten_reason"), ("entities",)),
    ("automem_sections", ROWID, ("heading",), ()),
    ("share_messages", ("memory_id", "uuid"), ("text",), ()),
    ("reviews", ROWID, ("question", "context", "resolution"), ("options",)),
    ("memory_checks", ("episode_id",), ("reason",), ()),
    ("cold_actions", ROWID, ("detail",), ()),
    ("extraction_state", ROWID, ("rolling_summary",), ()),
    ("jobs", ROWID, ("last_error",), ("payload",)),
    ("llm_calls", ROWID, ("error",), ()),
    ("recollection_offers", ("session_id", "message_uuid"), (), ("content",)),
    ("injections", ROWID, (), ("content",)),  # bites as JSON, or a digest's text
)


def needed(conn: apsw.Connection) -> bool:
    return get_meta(conn, STAMP_KEY) != rules_fingerprint()


def _json_redacted(value: str) -> str | None:
    """The JSON text with its strings redacted (text that is not JSON: redacted as text), or None when nothing
    in it changed."""
    try:
        data = json.loads(value)
    except ValueError:
        clean_text = redacted(value)
        return None if clean_text == value else clean_text
    clean = json.loads(redacted_json(data))
    return None if clean == data else json.dumps(clean, ensure_ascii=False)


def _redacted_row(values: tuple[Any, ...], text: tuple[str, ...], structured: tuple[str, ...]) -> dict[str, str]:
    changes: dict[str, str] = {}
    for name, value in zip(text + structured, values, strict=True):
        if not isinstance(value, str) or not value:
            continue
        if name in structured:
            clean = _json_redacted(value)
            if clean is not None:
                changes[name] = clean
        elif (clean := redacted(value)) != value:
            changes[name] = clean
    return changes


def _columns_present(conn: apsw.Connection, table: str, wanted: tuple[str, ...]) -> tuple[str, ...] | None:
    present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    if not present:
        return None
    return tuple(c for c in wanted if c in present)


def rescan(conn: apsw.Connection, budget_seconds: float = 1.0, between: Callable[[], None] | None = None) -> int:
    """Redact stored text again under the current rules, for up to `budget_seconds`; returns rows rewritten.
    Nothing happens when the store was last redacted with these rules. `between` is called after each batch's
    commit: the memory thread serves the user messages that arrived meanwhile (a message never waits for the
    whole budget, only for one batch)."""
    current = rules_fingerprint()
    if get_meta(conn, STAMP_KEY) == current:
        return 0
    progress = json.loads(get_meta(conn, PROGRESS_KEY) or "{}")
    if progress.get("rules") != current:
        progress = {"rules": current, "table": 0, "after": None, "changed": 0}
        log.info("the redaction rules changed: stored text is redacted again, a batch at each sweep")
    deadline = time.monotonic() + budget_seconds
    # Every page this rescan frees is zeroed (a long text's overflow pages too, which FAST leaves as they were).
    conn.execute("PRAGMA secure_delete = ON")
    try:
        return _rescan(conn, current, progress, deadline, between or (lambda: None))
    finally:
        conn.execute("PRAGMA secure_delete = FAST")


def _rescan(conn: apsw.Connection, current: str, progress: dict[str, Any], deadline: float,
            between: Callable[[], None]) -> int:
    rewritten = 0
    batches = 0
    # At least one batch per call, however small the budget: every call moves the rescan on.
    while progress["table"] < len(COLUMNS) and (batches == 0 or time.monotonic() < deadline):
        table, key, text, structured = COLUMNS[progress["table"]]
        text = _columns_present(conn, table, text)
        structured = _columns_present(conn, table, structured) if text is not None else None
        if text is None or structured is None or not (text or structured):
            progress = {**progress, "table": progress["table"] + 1, "after": None}
            continue
        keys = ", ".join(key)
        after = progress["after"]
        where = f"WHERE ({keys}) > ({', '.join('?' * len(key))})" if after is not None else ""
        matches = " AND ".join(f"{k} = ?" for k in key)
        batches += 1
        with write_transaction(conn):  # read under the write lock: a row changed meanwhile is never overwritten
            rows = conn.execute(f"SELECT {', '.join(key + text + structured)} FROM {table} {where} "
                                f"ORDER BY {keys} LIMIT ?", (*(after or ()), BATCH_ROWS)).fetchall()
            for row in rows:
                changes = _redacted_row(row[len(key):], text, structured)
                if changes:
                    assignments = ", ".join(f"{name} = ?" for name in changes)
                    conn.execute(f"UPDATE {table} SET {assignments} WHERE {matches}",
                                 (*changes.values(), *row[:len(key)]))
                    rewritten += 1
                    progress["changed"] = progress.get("changed", 0) + 1
            if len(rows) < BATCH_ROWS:
                progress = {**progress, "table": progress["table"] + 1, "after": None}
            else:
                progress = {**progress, "after": list(rows[-1][:len(key)])}
            set_meta(conn, PROGRESS_KEY, json.dumps(progress))
            if progress["table"] >= len(COLUMNS):
                set_meta(conn, STAMP_KEY, current)
                if progress.get("changed"):
                    for index in ("messages_fts", "episodes_fts"):
                        conn.execute(f"INSERT INTO {index}({index}) VALUES ('optimize')")
        if progress["table"] >= len(COLUMNS) and progress.get("changed"):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            log.info("stored text redacted again under the current rules: %d rows changed", progress["changed"])
        elif progress["table"] < len(COLUMNS):
            between()
    return rewritten
