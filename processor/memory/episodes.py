"""EpisodeStore: what the processor, the MCP tools and the CLI do with memories.

It owns one thread's connection, the embedder (loaded lazily, once) and the
in-memory vector index. Every write commits the episodes together with the
progress marker that produced them, so a crash redoes work and never skips it.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from processor.config import Settings
from processor.memory.embedder import Embedder, load_embedder
from processor.memory.errors import EmbeddingMismatch, UnknownEpisode
from processor.memory.search import Scored, SearchWeights, VectorIndex, search_episodes
from processor.memory.verbatim import group_rounds, round_pieces, summarize
from processor.store import episodes as sql
from processor.store import retry_when_busy, write_transaction
from processor.store.episodes import Episode, NewEpisode, StoredMessage

log = logging.getLogger(__name__)

KINDS = ("decision", "preference", "convention", "bugfix", "gotcha", "fact", "task", "other")
SCOPES = ("global", "project")
SAME_SESSION_LIMIT = 50
# Messages read per step when turning a session's backlog into episodes.
_PAGE_MESSAGES = 2_000


def content_hash(text: str) -> str:
    return hashlib.sha256(" ".join(text.split()).lower().encode()).hexdigest()


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Hit:
    """One recall result: an episode, or a same-session message not yet in an episode."""

    id: str
    bite: str
    date: str
    importance: str
    kind: str
    score: float
    source: str  # "episode" | "message"
    project: str | None = None
    relevance: float = 0.0


@dataclass(frozen=True)
class Expansion:
    id: str
    summary: str
    full_content: str
    date: str
    project: str | None
    session_id: str | None
    importance: str
    kind: str
    scope: str
    source_type: str
    status: str
    entities: list[str]
    source_messages: list[dict[str, Any]] = field(default_factory=list)
    superseded_by: str | None = None


def _date(ms: int | None) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime((ms or 0) / 1000))


def weights_from(settings: Settings) -> SearchWeights:
    return SearchWeights(
        relevance=float(settings.weight_relevance),
        recency=float(settings.weight_recency),
        frequency=float(settings.weight_frequency),
        high_importance_floor=float(settings.high_importance_floor),
        recency_half_life_days=float(settings.recency_half_life_days),
        bm25_share=float(settings.bm25_share),
    )


class EpisodeStore:
    def __init__(self, settings: Settings, conn: apsw.Connection, embedder: Embedder | None = None,
                 index: VectorIndex | None = None) -> None:
        self.settings = settings
        self.conn = conn
        self._embedder = embedder
        self._index = index  # may be shared by several threads' stores: it locks itself
        self.weights = weights_from(settings)

    def reconfigure(self, settings: Settings) -> None:
        self.settings = settings
        self.weights = weights_from(settings)

    # --- the embedder and the vectors it made ------------------------------------------------

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = load_embedder(self.settings.embedding_model, self.settings.models_dir)
        return self._embedder

    def check_model(self) -> None:
        """Refuse to mix vectors from different models: stored vectors must match the configured one."""
        stored = sql.get_meta(self.conn, "embedding_model")
        if stored is None:
            return
        dim = int(sql.get_meta(self.conn, "embedding_dim") or 0)
        if stored != self.embedder.model_id or dim != self.embedder.dim:
            raise EmbeddingMismatch(
                f"stored vectors were made by {stored} ({dim} dims) but the configured embedding model is "
                f"{self.embedder.model_id} ({self.embedder.dim} dims); run `engram reindex` to re-embed "
                "every episode with the configured model, or set embedding_model back"
            )

    def _record_model(self) -> None:
        if sql.get_meta(self.conn, "embedding_model") is None:
            sql.set_meta(self.conn, "embedding_model", self.embedder.model_id)
            sql.set_meta(self.conn, "embedding_dim", str(self.embedder.dim))

    @property
    def index(self) -> VectorIndex:
        if self._index is None:
            self.check_model()
            self._index = VectorIndex(self.embedder.dim)
        return self._index

    def _embed(self, texts: list[str]) -> list[bytes]:
        vectors = self.embedder.embed_documents(texts)
        return [np.ascontiguousarray(v, dtype=np.float32).tobytes() for v in vectors]

    # --- writing -----------------------------------------------------------------------------

    def episodize(self, session_id: str | None = None, final: bool = False) -> int:
        """Turn complete rounds of captured messages into verbatim episodes; returns how many were added."""
        targets = [session_id] if session_id else [row[0] for row in sql.sessions_with_new_messages(self.conn)]
        added = 0
        for sid in targets:
            added += self._episodize_session(sid, final)
        return added

    def _episodize_session(self, session_id: str, final: bool) -> int:
        # Messages are read a page at a time; a backlog longer than a page (a catch-up after
        # downtime) is worked through page by page, each committed with its progress marker.
        added = 0
        while True:
            progress = sql.session_progress(self.conn, session_id)
            if progress is None:
                return added
            messages = sql.messages_after(self.conn, session_id, progress[1], limit=_PAGE_MESSAGES)
            more = len(messages) == _PAGE_MESSAGES
            # Within a full page the last round may go on in the next page: only `final` on the last page.
            rounds = group_rounds(messages, final and not more)
            if not rounds and more:
                rounds = [messages]  # one round longer than a page: store it rather than stall on it
            if not rounds:
                return added
            added += self._store_rounds(session_id, progress[0], rounds)
            if not more:
                return added

    def _store_rounds(self, session_id: str, project: str | None, rounds: list[list[StoredMessage]]) -> int:
        self.check_model()
        max_chars = int(self.settings.verbatim_max_chars)
        pieces = [p for r in rounds for p in round_pieces(r, max_chars)]
        blobs = self._embed([p.full_content for p in pieces])
        stamp = now_ms()
        added = 0
        with write_transaction(self.conn):
            self._record_model()
            for piece, blob in zip(pieces, blobs, strict=True):
                if sql.get_episode(self.conn, piece.id) is not None:
                    continue  # written before a crash that lost the progress marker
                sql.insert_episode(self.conn, NewEpisode(
                    id=piece.id, session_id=session_id, project=project, scope="project", summary=piece.summary,
                    entities=piece.entities, importance="normal", kind="other", source_type="verbatim",
                    full_content=piece.full_content, source_uuids=piece.source_uuids,
                    content_hash=content_hash(piece.full_content), created_at=piece.created_at or stamp,
                ), blob)
                added += 1
            sql.set_episodized_through(self.conn, session_id, rounds[-1][-1].id)
        return added

    def remember(self, text: str, *, kind: str | None = None, scope: str | None = None,
                 project: str | None = None, session_id: str | None = None,
                 importance: str | None = None) -> tuple[str, bool]:
        """Store a manual memory; returns (episode id, created). An exact duplicate is not stored twice."""
        text = text.strip()
        if not text:
            raise ValueError("a memory needs some text")
        kind = kind if kind in KINDS else "other"
        scope = scope if scope in SCOPES else ("project" if project else "global")
        digest = content_hash(text)
        existing = sql.active_hash_exists(self.conn, digest)
        if existing:
            return existing, False
        self.check_model()
        summary = summarize(text, "")
        [blob] = self._embed([text])
        episode_id = "ep_" + uuidlib.uuid4().hex[:16]
        with write_transaction(self.conn):
            existing = sql.active_hash_exists(self.conn, digest)
            if existing:
                return existing, False
            self._record_model()
            sql.insert_episode(self.conn, NewEpisode(
                id=episode_id, session_id=session_id, project=project if scope == "project" else None,
                scope=scope, summary=summary, entities=[], importance=importance or
                ("high" if kind in ("preference", "convention", "decision") else "normal"), kind=kind,
                source_type="manual", full_content=text, source_uuids=[], content_hash=digest,
                created_at=now_ms(),
            ), blob)
        return episode_id, True

    def forget(self, episode_id: str) -> Episode:
        ep = sql.get_episode(self.conn, episode_id)
        if ep is None:
            raise UnknownEpisode(f"no memory with id {episode_id!r}; `engram recall QUERY` lists ids")
        with write_transaction(self.conn):
            sql.forget(self.conn, episode_id, now_ms())
        return ep

    def reindex(self) -> int:
        """Re-embed every non-forgotten episode with the configured model and record it."""
        rows = sql.all_embeddable(self.conn)
        batch = 256
        for start in range(0, len(rows), batch):
            chunk = rows[start:start + batch]
            blobs = self._embed([content for _, _, content in chunk])
            with write_transaction(self.conn):
                for (rowid, _, _), blob in zip(chunk, blobs, strict=True):
                    sql.set_embedding(self.conn, rowid, blob)
        with write_transaction(self.conn):
            sql.set_meta(self.conn, "embedding_model", self.embedder.model_id)
            sql.set_meta(self.conn, "embedding_dim", str(self.embedder.dim))
        self._index = None
        return len(rows)

    # --- reading -----------------------------------------------------------------------------

    def search(self, query: str, *, limit: int = 5, project: str | None = None,
               include_inactive: bool = False, exclude_ids: frozenset[str] = frozenset(),
               query_vector: np.ndarray | None = None) -> list[Scored]:
        query = query.strip()
        if not query:
            return []
        if query_vector is None:
            query_vector = self.embedder.embed_query(query)
        index = self.index
        return retry_when_busy(lambda: search_episodes(
            self.conn, index, query_vector, query, limit=limit, project=project, now_ms=now_ms(),
            weights=self.weights, include_inactive=include_inactive, exclude_ids=exclude_ids,
        ), what="searching memories", attempts=3)

    def recall(self, query: str, *, limit: int = 5, project: str | None = None, session_id: str | None = None,
               touch: bool = True) -> list[Hit]:
        limit = max(1, min(int(limit), 50))
        scored = self.search(query, limit=limit, project=project)
        hits = [Hit(s.episode.id, s.episode.summary, _date(s.episode.created_at), s.episode.importance,
                    s.episode.kind, round(s.score, 4), "episode", s.episode.project, round(s.relevance, 4))
                for s in scored]
        if session_id:
            hits = self._merge_same_session(hits, query, session_id, limit)
        if touch and hits:
            self._touch([h.id for h in hits if h.source == "episode"])
        return hits

    def _merge_same_session(self, hits: list[Hit], query: str, session_id: str, limit: int) -> list[Hit]:
        """Seed 004: the current session's recent messages not yet in an episode are searchable too."""
        recent = sql.recent_unepisodized(self.conn, session_id, SAME_SESSION_LIMIT)
        if not recent:
            return hits
        vectors = self.embedder.embed_documents([m.text for m in recent])
        sims = vectors @ self.embedder.embed_query(query)
        extra = []
        for message, sim in zip(recent, sims, strict=True):
            score = self.weights.relevance * max(float(sim), 0.0) + self.weights.recency
            extra.append(Hit(f"msg_{message.uuid}", f"(this session, {message.role}) "
                             + message.text[:160].replace("\n", " "), _date(message.ts_ms), "normal", "other",
                             round(score, 4), "message", relevance=round(max(float(sim), 0.0), 4)))
        merged = sorted(hits + [h for h in extra if h.score > self.weights.recency + 0.2],
                        key=lambda h: h.score, reverse=True)
        return merged[:limit]

    def _touch(self, episode_ids: list[str]) -> None:
        if not episode_ids:
            return
        try:
            with write_transaction(self.conn):
                sql.touch(self.conn, episode_ids, now_ms())
        except apsw.BusyError:
            # Access statistics are a ranking hint; a busy database must not fail a read.
            log.info("database busy; access counts for %d memories not updated", len(episode_ids))

    def expand(self, item_id: str, *, touch: bool = True) -> Expansion:
        item_id = item_id.strip()
        if item_id.startswith("msg_"):
            return self._expand_message(item_id)
        ep = sql.get_episode(self.conn, item_id)
        if ep is None:
            raise UnknownEpisode(f"no memory with id {item_id!r}; ids look like ep_… and come from memory_recall")
        if ep.status == "forgotten":
            raise UnknownEpisode(f"memory {item_id} was forgotten on {_date(ep.valid_to)}; its content is gone")
        if touch:
            self._touch([ep.id])
        sources = []
        for uuid in ep.source_uuids:
            row = self.conn.execute("SELECT role, timestamp, session_id FROM messages WHERE uuid = ?",
                                    (uuid,)).fetchone()
            if row:
                sources.append({"uuid": uuid, "role": row[0], "timestamp": row[1], "session_id": row[2]})
        return Expansion(ep.id, ep.summary, ep.full_content, _date(ep.created_at), ep.project, ep.session_id,
                         ep.importance, ep.kind, ep.scope, ep.source_type, ep.status, ep.entities, sources,
                         ep.superseded_by)

    def _expand_message(self, item_id: str) -> Expansion:
        row = self.conn.execute("SELECT uuid, session_id, role, text, ts_ms, timestamp FROM messages WHERE uuid = ?",
                                (item_id[4:],)).fetchone()
        if row is None:
            raise UnknownEpisode(f"no captured message with id {item_id!r}")
        uuid, session_id, role, text, ts_ms, timestamp = row
        return Expansion(item_id, text[:160], text, _date(ts_ms), None, session_id, "normal", "other", "project",
                         "message", "active", [], [{"uuid": uuid, "role": role, "timestamp": timestamp,
                                                    "session_id": session_id}])

    def status(self) -> dict[str, Any]:
        by_status = sql.counts_by_status(self.conn)
        return {
            "episodes": sum(by_status.values()),
            "episodes_by_status": by_status,
            "embedding_model": sql.get_meta(self.conn, "embedding_model"),
            "embedding_dim": int(sql.get_meta(self.conn, "embedding_dim") or 0) or None,
        }


def format_hits(hits: list[Hit]) -> str:
    """Seed 001's recall format: `[1] (2026-02-20, high) summary — ID: ep_abc`."""
    if not hits:
        return "No memories found."
    return "\n".join(f"[{i}] ({h.date}, {h.importance}) {h.bite} — ID: {h.id}" for i, h in enumerate(hits, 1))


def format_expansion(e: Expansion) -> str:
    lines = [f"## Memory {e.id}", f"**Date:** {e.date}", f"**Project:** {e.project or '(global)'}",
             f"**Importance:** {e.importance}  **Kind:** {e.kind}  **Source:** {e.source_type}",
             "", f"**Summary:** {e.summary}", "", "**Full context:**", e.full_content]
    if e.entities:
        lines += ["", "**Entities:** " + ", ".join(e.entities)]
    if e.source_messages:
        first, last = e.source_messages[0], e.source_messages[-1]
        lines += ["", f"**From session** {first['session_id']} ({first['timestamp']} – {last['timestamp']}), "
                  f"{len(e.source_messages)} message(s)"]
    if e.superseded_by:
        lines += ["", f"Superseded by {e.superseded_by}."]
    return "\n".join(lines)

