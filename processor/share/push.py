"""Pushing the outbox: each queued memory's current state (redacted again), or its tombstone, to the server.

A batch is read from the outbox, sent in one server transaction, and only then removed from the outbox in
one local transaction. A processor killed between the two pushes the batch again at its next start: the
server compares, and an unchanged memory moves no sequence (no duplicate, no gap). A memory changed again
while its push was under way has a newer outbox entry, which stays.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import apsw
import numpy as np

from processor.clock import now_ms
from processor.config import Settings
from processor.redaction import Redacted, redact, redacted_json, redacted_list
from processor.share import lessons, policy
from processor.share.connection import SharedDatabase
from processor.share.postgres import statements as pg
from processor.share.projects import project_key
from processor.store import episodes as episodes_sql
from processor.store import read_transaction, write_transaction
from processor.store import share as sql
from processor.store.share import LocalMemory, SharedRow

log = logging.getLogger(__name__)

WITHDRAWN = "withdrawn: its session opted out of memory"
DELETED = "removed on the machine that made it"


@dataclass
class PushReport:
    sent: int = 0  # rows sent to the server
    changed: int = 0  # of those, the ones that changed something there
    withdrawn: int = 0  # tombstones for memories of sessions that opted out after their push
    kept_local: list[tuple[str, str]] = field(default_factory=list)  # (id, why): too large, stays here
    forgotten_here: list[str] = field(default_factory=list)  # the server held their tombstone: erased here too


class ProjectKeys:
    """Project root → key, from the local cache, computed (git) once for a root not seen before."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn
        self.known = sql.project_keys(conn)
        self.new: dict[str, tuple[str, bool]] = {}

    def key(self, root: str | None) -> str | None:
        if not root:
            return None
        found = self.known.get(root) or self.new.get(root)
        if found is None:
            found = self.new[root] = project_key(root)
            if not found[1]:
                log.info("project %s has no git remote: it is shared as its path, so it matches only clones at "
                         "the same path on other machines (add one with `git remote add origin URL`)", root)
        return found[0]

    def save(self, stamp: int) -> None:
        for root, (key, has_remote) in self.new.items():
            sql.set_project_key(self.conn, root, key, has_remote, stamp)
        self.known.update(self.new)
        self.new.clear()


def _tombstone(memory_id: str, machine_id: str, shared: SharedRow | None, memory: LocalMemory | None,
               reason: str | None, stamp: int) -> pg.PushRow:
    return pg.PushRow(
        id=memory_id, machine_id=shared.origin_machine if shared else machine_id,
        team=shared.team if shared else None, project_key=shared.project_key if shared else None,
        project=None, session_id=None, scope=memory.scope if memory else "project",
        kind=memory.kind if memory else "other", importance=memory.importance if memory else "normal",
        source_type=memory.source_type if memory else "auto", status="forgotten", summary=None, full_content=None,
        entities=None, source_uuids=None, content_hash=None, superseded_by=None,
        created_at=memory.created_at if memory else stamp, valid_from=memory.valid_from if memory else stamp,
        valid_to=(memory.valid_to if memory and memory.valid_to else stamp),
        forgotten_reason=redact(redact(reason)[:500]) if reason else None, embedding=None, embedding_model=None)


def _live_row(memory: LocalMemory, machine_id: str, shared: SharedRow | None, key: str | None, team: str | None,
              model: str | None, dims: int, lesson: Redacted | None) -> pg.PushRow:
    summary, content = redact(memory.summary), redact(memory.full_content)
    entities = redacted_list(memory.entities)
    vector = None
    # A vector made from text that held a secret would carry it in another form: the receivers embed the
    # redacted text themselves instead.
    if memory.embedding and model and summary == memory.summary and content == memory.full_content:
        candidate = np.frombuffer(memory.embedding, dtype=np.float32)
        vector = candidate if len(candidate) == dims else None
    return pg.PushRow(
        id=memory.id, machine_id=shared.origin_machine if shared else machine_id, team=team, project_key=key,
        project=memory.project, session_id=memory.session_id, scope=memory.scope, kind=memory.kind,
        importance=memory.importance, source_type=memory.source_type, status=memory.status, summary=summary,
        full_content=content, entities=redacted_json(entities), source_uuids=json.dumps(memory.source_uuids),
        content_hash=memory.content_hash, superseded_by=memory.superseded_by, created_at=memory.created_at,
        valid_from=memory.valid_from, valid_to=memory.valid_to, forgotten_reason=None,
        embedding=vector, embedding_model=model if vector is not None else None, lesson=lesson)


def prepare(conn: apsw.Connection, entries: list[tuple[int, str]], db_role: str, machine_id: str,
            settings: Settings, keys: ProjectKeys, report: PushReport) -> list[pg.PushRow]:
    """The rows to send for these outbox entries (some send nothing: see policy)."""
    ids = [episode_id for _, episode_id in entries]
    memories = sql.memories_for_push(conn, ids)
    shared = sql.shared_rows(conn, ids)
    commits = sql.commit_ids(conn, ids)
    told_by = lessons.outgoing(conn, ids, machine_id)  # what makes each tellable elsewhere
    teams = sql.team_projects(conn)
    model = episodes_sql.get_meta(conn, "embedding_model")
    dims = int(episodes_sql.get_meta(conn, "embedding_dim") or 0)
    max_bytes = settings.share_max_memory_kb * 1024
    stamp = now_ms()
    rows: list[pg.PushRow] = []
    for episode_id in ids:
        memory, known = memories.get(episode_id), shared.get(episode_id)
        if known is not None and known.owner != db_role:
            continue  # a teammate's memory: changes to it stay on this machine
        if memory is None:
            if known is not None:
                rows.append(_tombstone(episode_id, machine_id, known, None, DELETED, stamp))
            continue
        if policy.stays_local(memory):
            if known is not None:
                rows.append(_tombstone(episode_id, machine_id, known, memory, WITHDRAWN, stamp))
                report.withdrawn += 1
            continue
        if memory.status == "forgotten":
            rows.append(_tombstone(episode_id, machine_id, known, memory, memory.forgotten_reason, stamp))
            continue
        if policy.too_large(memory, max_bytes):
            size_kb = (len(memory.full_content.encode()) + len(memory.summary.encode())) / 1024
            reason = (f"{size_kb:.0f} KB, over share_max_memory_kb ({settings.share_max_memory_kb} KB): kept on this "
                      f"machine. Fix: store it as smaller memories, or raise share_max_memory_kb")
            log.warning("memory %s is not shared: %s", episode_id, reason)
            report.kept_local.append((episode_id, reason))
            continue
        key = known.project_key if known is not None and known.pulled else keys.key(memory.project)
        team = teams.get(key) if key else None
        was_team = known is not None and known.pulled and known.team is not None
        if team and not policy.team_eligible(memory, is_commit=episode_id in commits or was_team):
            team = None
        rows.append(_live_row(memory, machine_id, known, key, team, model, dims, told_by.get(episode_id)))
    return rows


def _messages(conn: apsw.Connection, rows: list[pg.PushRow], settings: Settings) -> list[pg.MessageRow]:
    """The captured messages the pushed memories were made from, redacted again (share_messages = true)."""
    live = [r for r in rows if r.status != "forgotten" and r.source_uuids]
    wanted = {uuid: r.id for r in live for uuid in json.loads(r.source_uuids or "[]")}
    limit = settings.share_max_memory_kb * 1024
    out = []
    for uuid, session_id, role, ts_ms, text in sql.captured_messages(conn, list(wanted)):
        if len(text.encode()) <= limit:
            out.append(pg.MessageRow(wanted[uuid], uuid, session_id, role, ts_ms, redact(text)))
    return out


def push_pending(conn: apsw.Connection, db: SharedDatabase, settings: Settings, machine_id: str,
                 *, max_batches: int | None = None) -> PushReport:
    """Push the outbox until it is empty (or max_batches batches); returns what happened."""
    report = PushReport()
    keys = ProjectKeys(conn)
    batches = 0
    while max_batches is None or batches < max_batches:
        entries = sql.outbox_batch(conn, settings.share_batch)
        if not entries:
            break
        batches += 1
        # Project keys may need git (a subprocess): found before the rows are read, outside any transaction.
        ids = [episode_id for _, episode_id in entries]
        for root in sql.own_projects_of(conn, ids):
            keys.key(root)
        kept_before = len(report.kept_local)
        with read_transaction(conn):  # the batch is read as one consistent state
            rows = prepare(conn, entries, db.role, machine_id, settings, keys, report)
        stamp = now_ms()
        messages = _messages(conn, rows, settings) if settings.share_messages else []
        result = pg.push(db.conn, rows, machine_id, stamp, messages=messages,
                         erase_messages=db.messages_granted(pg.may_write_messages))
        by_id = {r.id: r for r in rows}
        with write_transaction(conn):
            keys.save(stamp)
            sql.set_applying(conn, True)  # erasing what the server had forgotten must not be queued again
            recorded = []
            for memory_id, seq in result.changed.items():
                row = by_id.get(memory_id)
                if row is None:
                    continue  # an older version another machine had given a successor (resolved server-side)
                recorded.append(SharedRow(memory_id, seq, row.machine_id, db.role, row.team, row.project_key,
                                          row.machine_id != machine_id))
            sql.record_shared(conn, recorded)
            for memory_id, reason in result.forgotten.items():
                episodes_sql.forget(conn, memory_id, stamp, reason or "forgotten on another machine")
                report.forgotten_here.append(memory_id)
            sql.drop_lessons(conn, list(result.forgotten))
            for memory_id, reason in report.kept_local[kept_before:]:
                sql.record_problem(conn, memory_id, "push", reason, stamp)
            sql.outbox_done(conn, entries)
            sql.record_push(conn, len(rows), stamp)
            sql.set_applying(conn, False)
        report.sent += len(rows)
        report.changed += len(result.changed)
    return report
