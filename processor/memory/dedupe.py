"""ADD / UPDATE / NOOP: how a candidate memory joins the episodes (seed 001).

For each candidate, the nearest active memories (extracted or manual episodes of the same
project, or global ones; verbatim rounds are raw material, never merged into) by cosine:
- the same text (content hash), or near-identical (cosine >= NOOP_SIMILARITY and the texts
  nearly equal character by character): NOOP, the existing one is touched. Cosine alone is not
  enough: "prefers tabs over spaces" and "prefers spaces over tabs" score 0.97 with MiniLM;
- cosine > UPDATE_SIMILARITY and the same topic (same kind, shared or absent entities): UPDATE,
  written as a new version; the old row gets valid_to + superseded_by, nothing is overwritten;
- otherwise ADD.
Candidates of one batch are compared with each other too. A fact stated in two places (a transcript
and Claude Code's auto memory, say) stays one memory with both sources: a NOOP adds the candidate's
source messages to the existing memory, and an UPDATE's new version keeps those of the one it replaces.
Everything, including the caller's progress marker, commits in one transaction: a crash redoes the
batch, never half of it.
"""

from __future__ import annotations

import difflib
import logging
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import apsw
import numpy as np

from processor.clock import now_ms
from processor.memory.embedder import Embedder
from processor.memory.identity import content_hash
from processor.memory.search import VectorIndex
from processor.store import episodes as episodes_sql
from processor.store import write_transaction
from processor.store.episodes import NewEpisode

log = logging.getLogger(__name__)

NOOP_SIMILARITY = 0.98
NOOP_TEXT_RATIO = 0.9   # difflib ratio of the normalised texts
UPDATE_SIMILARITY = 0.85
NEIGHBOURS = 5
MERGED_MAX_CHARS = 4000
MAX_ENTITIES = 20


class VectorStore(Protocol):
    """What the deduper needs of an EpisodeStore: its connection and the model its vectors come from."""

    conn: apsw.Connection

    @property
    def embedder(self) -> Embedder: ...

    def check_model(self) -> None: ...

    def record_model(self) -> None: ...


@dataclass(frozen=True)
class Candidate:
    summary: str
    full_content: str
    entities: list[str]
    importance: str   # high | normal
    kind: str
    scope: str        # global | project
    source_type: str  # auto | manual
    session_id: str | None
    project: str | None
    source_uuids: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return f"{self.summary}\n{self.full_content}"


@dataclass(frozen=True)
class Outcome:
    action: str                      # add | update | noop
    episode_id: str                  # the new row (add, update) or the existing one (noop)
    previous_id: str | None = None   # the superseded row (update)
    similarity: float | None = None


@dataclass
class _Memory:
    """What a decision needs to know about an existing (or just written) memory."""

    id: str
    summary: str
    full_content: str
    entities: list[str]
    importance: str
    kind: str
    scope: str
    project: str | None
    vector: np.ndarray | None = None
    digest: str | None = None
    source_uuids: list[str] = field(default_factory=list)


def same_topic(a_kind: str, a_entities: list[str], b_kind: str, b_entities: list[str]) -> bool:
    """Similar text about the same thing: same kind (or one is unclassified) and overlapping or absent entities."""
    if a_kind != b_kind and "other" not in (a_kind, b_kind):
        return False
    a = {e.strip().lower() for e in a_entities if e.strip()}
    b = {e.strip().lower() for e in b_entities if e.strip()}
    return not a or not b or bool(a & b)


def _visible_to(memory: _Memory, candidate: Candidate) -> bool:
    return memory.scope == "global" or candidate.scope == "global" or memory.project == candidate.project


def _normalised(text: str) -> str:
    return " ".join(text.lower().split())


def _nearly_equal(candidate: Candidate, memory: _Memory) -> bool:
    a = _normalised(f"{candidate.summary} {candidate.full_content}")
    b = _normalised(f"{memory.summary} {memory.full_content}")
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() >= NOOP_TEXT_RATIO


def _merge_content(new: str, old: str) -> str:
    if old.strip() and old.strip() not in new:
        room = MERGED_MAX_CHARS - len(new) - 20
        if room > 80:
            old = old if len(old) <= room else old[: room - 1] + "…"
            return f"{new}\n\nEarlier: {old}"
    return new


class Deduper:
    """Applies candidates to the episodes table; owns a vector index of memories only (no verbatim rounds)."""

    def __init__(self, store: VectorStore) -> None:
        self.store = store
        self._index: VectorIndex | None = None

    @property
    def conn(self) -> apsw.Connection:
        return self.store.conn

    def _refresh(self) -> VectorIndex:
        if self._index is None:
            self._index = VectorIndex(self.store.embedder.dim, memories_only=True)
        self._index.refresh(self.conn)  # called inside the write transaction, as a memories-only index needs
        return self._index

    def apply(self, candidates: list[Candidate], *,
              progress: Callable[[apsw.Connection], None] | None = None,
              linked: Callable[[apsw.Connection, list[Outcome]], None] | None = None) -> list[Outcome]:
        """Write the candidates (and the caller's progress marker) in one transaction.

        `linked`, if given, runs in that transaction too, with the outcomes (one per candidate): where a
        caller records which memory each of its candidates became.
        """
        store = self.store
        store.check_model()
        vectors = store.embedder.embed_documents([c.text for c in candidates]) if candidates else []
        stamp = now_ms()
        outcomes: list[Outcome] = []
        with write_transaction(self.conn):
            if candidates:
                store.record_model()
            index = self._refresh() if candidates else None
            written: list[_Memory] = []  # this batch's rows: not in the index until committed
            for candidate, vector in zip(candidates, vectors, strict=True):
                outcomes.append(self._apply_one(candidate, np.asarray(vector, dtype=np.float32), index, written,
                                                stamp))
            if progress is not None:
                progress(self.conn)
            if linked is not None:
                linked(self.conn, outcomes)
        for o in outcomes:
            log.info("memory %s: %s%s", o.action, o.episode_id, f" (supersedes {o.previous_id})"
                     if o.previous_id else "")
        return outcomes

    def _neighbours(self, candidate: Candidate, vector: np.ndarray, index: VectorIndex | None,
                    written: list[_Memory]) -> list[tuple[float, _Memory]]:
        found: list[tuple[float, _Memory]] = []
        if index is not None:
            hits = index.top(vector, NEIGHBOURS * 4)
            rows = episodes_sql.episodes_by_rowid(self.conn, [r for r, _ in hits])
            for rowid, cosine in hits:
                ep = rows.get(rowid)
                if ep is None or ep.status != "active" or ep.source_type == "verbatim":
                    continue
                found.append((cosine, _Memory(ep.id, ep.summary, ep.full_content, ep.entities, ep.importance,
                                              ep.kind, ep.scope, ep.project, source_uuids=ep.source_uuids)))
        for memory in written:
            if memory.vector is not None:
                found.append((float(memory.vector @ vector), memory))
        found = [(c, m) for c, m in found if _visible_to(m, candidate)]
        found.sort(key=lambda item: item[0], reverse=True)
        return found[:NEIGHBOURS]

    def _apply_one(self, candidate: Candidate, vector: np.ndarray, index: VectorIndex | None,
                   written: list[_Memory], stamp: int) -> Outcome:
        conn = self.conn
        digest = content_hash(candidate.full_content)
        existing = episodes_sql.active_with_hash(conn, digest, memories_only=True)
        if existing is None:
            existing = next((m.id for m in written if m.digest == digest), None)
        if existing is not None:
            episodes_sql.touch(conn, [existing], stamp)
            episodes_sql.add_sources(conn, existing, candidate.source_uuids)  # one memory, both sources
            return Outcome("noop", existing, similarity=1.0)
        neighbours = self._neighbours(candidate, vector, index, written)
        best_sim, best = neighbours[0] if neighbours else (0.0, None)
        if best is not None and best_sim >= NOOP_SIMILARITY and _nearly_equal(candidate, best):
            episodes_sql.touch(conn, [best.id], stamp)
            episodes_sql.add_sources(conn, best.id, candidate.source_uuids)
            return Outcome("noop", best.id, similarity=best_sim)
        target = next((m for sim, m in neighbours if sim > UPDATE_SIMILARITY
                       and same_topic(candidate.kind, candidate.entities, m.kind, m.entities)), None)
        new_id = "ep_" + uuidlib.uuid4().hex[:16]
        entities = list(dict.fromkeys(candidate.entities))
        importance = candidate.importance
        full_content = candidate.full_content
        sources = list(dict.fromkeys(candidate.source_uuids))
        if target is not None:
            # The new version stands for both statements: it keeps the sources of the one it replaces.
            sources = list(dict.fromkeys(sources + target.source_uuids))
            entities = list(dict.fromkeys(entities + target.entities))
            importance = "high" if "high" in (importance, target.importance) else "normal"
            full_content = _merge_content(full_content, target.full_content)
        project = candidate.project if candidate.scope == "project" else None
        blob = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
        episodes_sql.insert_episode(conn, NewEpisode(
            id=new_id, session_id=candidate.session_id, project=project, scope=candidate.scope,
            summary=candidate.summary, entities=entities[:MAX_ENTITIES], importance=importance, kind=candidate.kind,
            source_type=candidate.source_type, full_content=full_content, source_uuids=sources,
            # The candidate's own text: the same candidate again (a redone job) is then an exact NOOP.
            content_hash=digest, created_at=stamp,
        ), blob)
        written.append(_Memory(new_id, candidate.summary, full_content, entities, importance, candidate.kind,
                               candidate.scope, project, vector, digest, sources))
        if target is None:
            return Outcome("add", new_id, similarity=best_sim if best is not None else None)
        episodes_sql.supersede(conn, target.id, new_id, stamp)
        episodes_sql.carry_access(conn, new_id, target.id, stamp)
        written[:] = [m for m in written if m.id != target.id]
        return Outcome("update", new_id, previous_id=target.id, similarity=next(
            sim for sim, m in neighbours if m is target))
