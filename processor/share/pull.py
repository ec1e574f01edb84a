"""Pulling: the server's changes after this machine's cursor, checked, then applied in one local transaction each.

Changes arrive in sequence order; a batch is applied together with the cursor that follows it, so a
connection cut mid-pull, a killed processor or a change delivered twice leaves no gap and no duplicate:
applying a memory's state is idempotent. Rules, in order: a tombstone always wins (the memory is erased
here, and a local change still waiting to be pushed is dropped); a memory forgotten here stays forgotten;
a memory changed here and not yet pushed keeps the local change (pushed next, it becomes the later one by
sequence); otherwise the pulled state replaces the local one. A row that fails validation (bad fields, a
vector of the wrong size for its model, a lesson whose known fields are wrong) is refused with one log line,
recorded, and never half-applied. Vectors made by another embedding model are not used: the text is embedded
again with this machine's. A memory's lesson (what makes it tellable: ``processor/share/lessons.py``) is filed in
the same transaction, under this machine's clone of its project, its paths moved under that clone.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from processor.clock import now_ms
from processor.config import Settings
from processor.memory.kinds import IMPORTANCES, KINDS, SCOPES
from processor.share import lessons
from processor.share.connection import SharedDatabase
from processor.share.lessons import BadLesson, Filed, Lesson
from processor.share.postgres import statements as pg
from processor.share.postgres.migrations import MAX_CONTENT_BYTES, STATUSES
from processor.store import episodes as episodes_sql
from processor.store import share as sql
from processor.store import write_transaction
from processor.store.share import Replica, SharedRow

log = logging.getLogger(__name__)

_ID = re.compile(r"^ep_[A-Za-z0-9_-]{1,64}$")
SOURCE_TYPES = ("auto", "manual", "verbatim")
NO_LONGER_SHARED = "no longer shared with you (a team left, or its project withdrawn)"

Embed = Callable[[list[str]], list[bytes]]  # texts → vectors of this machine's model, as stored


class Refused(Exception):
    """A pulled row that must not be applied; the message says why."""


@dataclass
class Checked:
    """A pulled row that passed validation."""

    row: pg.PulledRow
    replica: Replica | None  # None: a tombstone
    vector: bytes | None  # usable as it is (this machine's model and size)
    embed: bool  # the text must be embedded here (another model, or no vector)
    lesson: Lesson | None = None  # what makes it tellable (None: it has none, or an older client made it)


@dataclass
class PullReport:
    received: int = 0
    applied: int = 0
    erased: list[str] = field(default_factory=list)  # tombstones applied here: take them out of bites too
    refused: list[tuple[str, str]] = field(default_factory=list)
    embedded: int = 0  # pulled texts embedded again with this machine's model
    cursor: int = 0
    own_from_elsewhere: list[str] = field(default_factory=list)  # this person's memories made on other machines
    filed: Filed = field(default_factory=Filed)  # lessons filed here: the projects whose lesson index changed


def _text(value: Any, name: str, limit: int, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise Refused(f"{name} is not text")
    if len(value.encode("utf-8", "surrogatepass")) > limit:
        raise Refused(f"{name} is over {limit} bytes")
    return value


def _int(value: Any, name: str, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise Refused(f"{name} is not an integer")
    return value


def _strings(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or len(value) > 10_000:
        raise Refused(f"{name} is not a list of strings")
    return value


def _one_of(value: Any, name: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise Refused(f"{name} {str(value)[:40]!r} is not one of {', '.join(allowed)}")
    return str(value)


def _vector(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    to_numpy = getattr(value, "to_numpy", None)
    array = np.asarray(to_numpy() if to_numpy else value, dtype=np.float32)
    if array.ndim != 1 or not np.all(np.isfinite(array)):
        raise Refused("its vector is not a finite 1-d vector")
    return array


def check(row: pg.PulledRow, model: str, dims: int, key_to_root: dict[str, str]) -> Checked:
    """Validate one pulled row (the server is not trusted); raises Refused."""
    if not isinstance(row.id, str) or not _ID.match(row.id):
        raise Refused("its id is not an Engram memory id")
    _int(row.seq, "seq")
    for name in ("owner", "machine_id", "changed_by"):
        _text(getattr(row, name), name, 200)
    _text(row.team, "team", 200, optional=True)
    _text(row.project_key, "project_key", 4000, optional=True)
    status = _one_of(row.status, "status", STATUSES)
    scope = _one_of(row.scope, "scope", SCOPES)
    kind = _one_of(row.kind, "kind", KINDS)
    importance = _one_of(row.importance, "importance", IMPORTANCES)
    source_type = _one_of(row.source_type, "source_type", SOURCE_TYPES)
    created_at = _int(row.created_at, "created_at")
    valid_from = _int(row.valid_from, "valid_from")
    valid_to = _int(row.valid_to, "valid_to", optional=True)
    if status == "forgotten":
        _text(row.forgotten_reason, "forgotten_reason", 2000, optional=True)
        return Checked(row, None, None, False)
    summary = _text(row.summary, "summary", MAX_CONTENT_BYTES)
    content = _text(row.full_content, "full_content", MAX_CONTENT_BYTES)
    superseded_by = _text(row.superseded_by, "superseded_by", 100, optional=True)
    if superseded_by is not None and not _ID.match(superseded_by):
        raise Refused("superseded_by is not an Engram memory id")
    project_key = _text(row.project_key, "project_key", 4000, optional=True)
    theirs = _text(row.project, "project", 4000, optional=True)
    project = key_to_root.get(project_key or "") or theirs
    try:
        lesson = lessons.parse(row.lesson)
    except BadLesson as exc:
        raise Refused(f"its lesson {exc}") from None
    replica = Replica(
        id=row.id, session_id=_text(row.session_id, "session_id", 200, optional=True),
        project=project if scope == "project" else None, scope=scope, summary=summary or "",
        entities=lessons.moved(_strings(row.entities, "entities"), theirs, project), importance=importance,
        kind=kind, source_type=source_type,
        full_content=content or "", source_uuids=_strings(row.source_uuids, "source_uuids"),
        content_hash=_text(row.content_hash, "content_hash", 200) or "", created_at=created_at or 0,
        valid_from=valid_from or 0, valid_to=valid_to, superseded_by=superseded_by, status=status)
    vector = _vector(row.embedding)
    if vector is not None and row.embedding_model == model:
        if len(vector) != dims:
            raise Refused(f"its vector has {len(vector)} dimensions, but {model} makes {dims}")
        norm = float(np.linalg.norm(vector))
        if not math.isclose(norm, 1.0, rel_tol=1e-2, abs_tol=1e-2):
            raise Refused(f"its vector is not a unit vector (norm {norm:.3f})")
        return Checked(row, replica, vector.tobytes(), False, lesson)
    return Checked(row, replica, None, True, lesson)


def _refuse(conn: apsw.Connection, row: pg.PulledRow, reason: str, report: PullReport, stamp: int) -> None:
    memory_id = row.id if isinstance(row.id, str) else repr(row.id)[:80]
    log.warning("refused memory %s (server sequence %s) from the shared database: %s; the rest of the batch is "
                "applied, this row is not", memory_id, row.seq, reason)
    report.refused.append((memory_id, reason))
    sql.record_problem(conn, memory_id[:200], "pull", reason, stamp, row.seq if isinstance(row.seq, int) else None)


def _key_to_root(conn: apsw.Connection) -> dict[str, str]:
    roots = set(sql.session_projects(conn))
    return {key: root for root, (key, _) in sql.project_keys(conn).items() if root in roots}


def pull_new(conn: apsw.Connection, db: SharedDatabase, settings: Settings, machine_id: str, model: str, dims: int,
             embed: Embed, *, max_batches: int | None = None) -> PullReport:
    """Apply the server's changes since this machine's cursor, a batch per local transaction."""
    report = PullReport(cursor=sql.state(conn).pull_cursor)
    key_to_root = _key_to_root(conn)
    batches = 0
    while max_batches is None or batches < max_batches:
        rows = pg.pull(db.conn, report.cursor, settings.share_batch, others=settings.share_team_replicate)
        if not rows:
            break
        batches += 1
        report.received += len(rows)
        checked: list[Checked] = []
        refused: list[tuple[pg.PulledRow, str]] = []
        for row in rows:
            try:
                checked.append(check(row, model, dims, key_to_root))
            except Refused as exc:
                refused.append((row, str(exc)))
        _embed_missing(checked, embed, report)
        last_seq = max(r.seq for r in rows if isinstance(r.seq, int))
        _apply(conn, checked, refused, db.role, machine_id, last_seq, report, set(key_to_root.values()))
        report.cursor = max(report.cursor, last_seq)
        if len(rows) < settings.share_batch:
            break
    return report


def _embed_missing(checked: list[Checked], embed: Embed, report: PullReport) -> None:
    """Vectors from another model (or none, for text redacted on its way out) are made here, from the text."""
    wanted = [c for c in checked if c.embed and c.replica is not None]
    if not wanted:
        return
    vectors = embed([c.replica.full_content for c in wanted if c.replica is not None])
    for item, vector in zip(wanted, vectors, strict=True):
        item.vector = vector
        item.embed = False
    report.embedded += len(wanted)


def owner_check(conn: apsw.Connection, role: str, pulled: dict[str, str]) -> lessons.Owns:
    """Whether a memory is this person's (made here, or on another of their machines): only those are pushed.
    `pulled`: the owners of the rows being applied, known before their share_rows are recorded."""
    def owns(memory_id: str) -> bool:
        owner = pulled.get(memory_id)
        if owner is None:
            known = sql.shared_rows(conn, [memory_id]).get(memory_id)
            owner = known.owner if known is not None else role  # never shared: made here
        return owner == role
    return owns


def _apply(conn: apsw.Connection, checked: list[Checked], refused: list[tuple[pg.PulledRow, str]], role: str,
           machine_id: str, last_seq: int, report: PullReport, roots: set[str]) -> None:
    stamp = now_ms()
    ids = [c.row.id for c in checked]
    owns = owner_check(conn, role, {c.row.id: c.row.owner for c in checked})
    filed = Filed()
    with write_transaction(conn):
        sql.set_applying(conn, True)
        local = sql.local_versions(conn, ids)
        waiting = sql.queued_ids(conn, ids)
        shared: list[SharedRow] = []
        for item in checked:
            row, replica = item.row, item.replica
            current = local.get(row.id)
            if replica is None:  # a tombstone wins over anything, a local change waiting included
                if current is not None and current.status != "forgotten":
                    episodes_sql.forget(conn, row.id, stamp, row.forgotten_reason or "forgotten on another machine")
                    report.erased.append(row.id)
                sql.drop_from_outbox(conn, [row.id])
                sql.drop_lessons(conn, [row.id])
            elif current is None:
                sql.insert_replica(conn, replica, item.vector)
                report.applied += 1
            elif current.status == "forgotten" or row.id in waiting:
                pass  # forgotten here stays forgotten; a local change waiting for its push goes out next
            elif current.fingerprint != sql.fingerprint_of(replica):
                new_text = current.content_hash != replica.content_hash
                sql.update_replica(conn, replica, item.vector, new_vector=new_text and item.vector is not None)
                report.applied += 1
            if replica is not None and item.lesson is not None and (current is None or current.status != "forgotten"):
                root = replica.project if replica.project in roots else None  # None: no clone of it here
                lessons.file(conn, row.id, item.lesson, root, owns, stamp, filed)
            shared.append(SharedRow(row.id, row.seq, row.machine_id, row.owner, row.team, row.project_key,
                                    row.machine_id != machine_id or row.owner != role))
            if replica is not None and row.owner == role and row.machine_id != machine_id:
                report.own_from_elsewhere.append(row.id)
        # This person's memories changed here while applying (the triggers are off): pushed next.
        sql.queue(conn, sorted(filed.queued - sql.queued_ids(conn, sorted(filed.queued))), stamp)
        sql.record_shared(conn, shared)
        for row, reason in refused:
            _refuse(conn, row, reason, report, stamp)
        sql.record_pull(conn, last_seq, last_seq, len(checked), stamp)
        sql.set_applying(conn, False)
    report.filed.roots |= filed.roots
    report.filed.queued |= filed.queued


def reconcile_replicas(conn: apsw.Connection, db: SharedDatabase, others: bool, page: int = 1000) -> list[str]:
    """Erase the copies of other people's memories this role may no longer read (a team left, a project
    withdrawn from its team: no change reaches us for those); returns their ids."""
    erased: list[str] = []
    after = ""
    while True:
        ids = sql.replica_ids_of_others(conn, db.role, after, page)
        if not ids:
            return erased
        after = ids[-1]
        visible = pg.visible_ids(db.conn, ids, others=others)
        gone = [i for i in ids if i not in visible]
        if gone:
            stamp = now_ms()
            with write_transaction(conn):
                sql.set_applying(conn, True)
                for memory_id in gone:
                    episodes_sql.forget(conn, memory_id, stamp, NO_LONGER_SHARED)
                sql.forget_shared_rows(conn, gone)
                sql.drop_lessons(conn, gone)
                sql.set_applying(conn, False)
            erased += gone
