"""EpisodeStore: what the processor, the MCP tools, the CLI and the viewer do with memories.

It owns one thread's connection, the embedder (loaded lazily, once) and the in-memory vector index, and answers
search, recall and expand; it remembers, forgets and reindexes, and reports the memories' status. Turning captured
rounds into episodes (the verbatim pieces and what the miners find) is the episodizer's
(``processor/memory/episodize.py``), which writes through a store: readers never load mining code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from processor.capture.automem import cite
from processor.clock import now_ms, utc_clock, utc_date
from processor.config import Settings, SettingsSource
from processor.memory.bites import BITE_CHARS, Passage, bites_for, fit
from processor.memory.dedupe import Candidate, Deduper, Outcome
from processor.memory.embedder import Embedder, load_embedder
from processor.memory.errors import EmbeddingMismatch, UnknownEpisode
from processor.memory.kinds import default_importance, kind_or_other, scope_for
from processor.memory.rebuild import rebuild_verbatim
from processor.memory.search import Scored, SearchWeights, VectorIndex, fts_query, search_episodes
from processor.memory.verbatim import embedding_text, summarize
from processor.redaction import redact
from processor.store import automem as automem_sql
from processor.store import cold as cold_sql
from processor.store import episodes as sql
from processor.store import retry_when_busy, sessions, write_transaction
from processor.store import share as share_sql
from processor.store.episodes import Episode

log = logging.getLogger(__name__)

SAME_SESSION_LIMIT = 50
# A message of the current session joins the hits only when at least this similar to the query.
SAME_SESSION_MIN_SIMILARITY = 0.4
MAX_REASON_CHARS = 500
RECALL_ALSO = frozenset({"stale", "archived", "superseded"})


def _status_note(ep: Episode, check: cold_sql.LastCheck | None) -> str | None:
    if ep.status == "superseded" and ep.superseded_by:
        return f"superseded by {ep.superseded_by}" + (f" on {utc_date(ep.valid_to)}" if ep.valid_to else "")
    if ep.status == "stale":
        return "stale: " + (check.reason if check and check.reason else "the code it cites has changed")
    if ep.status == "archived":
        return "archived: old and never expanded; kept for search"
    return None


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
    note: str | None = None  # e.g. "stale: src/x.py was deleted in abc123": read it before relying on it
    source_uuids: list[str] = field(default_factory=list)  # the transcript lines it was built from
    agent: str | None = None  # the agent whose session it was learned in (claude, codex, gemini); None: no session


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
    # Where Claude Code's auto memory states it (this version or an earlier one): file, heading, lines.
    auto_memory: list[dict[str, Any]] = field(default_factory=list)
    # Made on another machine (shared memory, processor/share/): which one, and whose.
    origin: str | None = None
    agent: str | None = None  # the agent of the session it was learned in (claude, codex, gemini)


@dataclass(frozen=True)
class ForgetPlan:
    """The memories a bulk forget would erase, oldest first (`EpisodeStore.plan_forget`)."""

    episodes: list[Episode]
    truncated: bool = False  # more matched than the plan's limit: forget in several runs


def weights_from(settings: Settings) -> SearchWeights:
    return SearchWeights(
        relevance=settings.weight_relevance,
        recency=settings.weight_recency,
        frequency=settings.weight_frequency,
        high_importance_floor=settings.high_importance_floor,
        recency_half_life_days=settings.recency_half_life_days,
        bm25_share=settings.bm25_share,
        frequency_saturation=settings.frequency_saturation,
    )


class EpisodeStore:
    """Memories for one thread: its connection, the embedder (loaded once) and the vector index.

    ``settings`` may be a SettingsHolder: ranking weights are read from it at every search, so a
    reload (SIGHUP) reaches every thread's store at once.
    """

    def __init__(self, settings: SettingsSource, conn: apsw.Connection, embedder: Embedder | None = None,
                 index: VectorIndex | None = None) -> None:
        self._settings = settings
        self.conn = conn
        self._embedder = embedder
        self._index = index  # may be shared by several threads' stores: it locks itself
        self._deduper: Deduper | None = None

    @property
    def settings(self) -> Settings:
        return self._settings.current

    @property
    def weights(self) -> SearchWeights:
        return weights_from(self.settings)

    @property
    def deduper(self) -> Deduper:
        """ADD/UPDATE/NOOP over this store's memories: the one way memories (not rounds) are written."""
        if self._deduper is None:
            self._deduper = Deduper(self)
        return self._deduper

    # --- the embedder and the vectors it made ------------------------------------------------

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = load_embedder(self.settings.embedding_model, self.settings.models_dir)
        return self._embedder

    @property
    def loaded_embedder(self) -> Embedder | None:
        """The embedder if it is loaded already (None rather than loading it)."""
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

    def record_model(self) -> None:
        """Note which model made the stored vectors (inside the caller's write transaction)."""
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
        vectors = self.embedder.embed_documents([embedding_text(t) for t in texts])
        return [np.ascontiguousarray(v, dtype=np.float32).tobytes() for v in vectors]

    # --- writing: what a person or a job asks ---------------------------------------------------

    def remember(self, text: str, *, kind: str | None = None, scope: str | None = None,
                 project: str | None = None, session_id: str | None = None,
                 importance: str | None = None) -> tuple[str, bool]:
        """Store a manual memory through ADD/UPDATE/NOOP; returns (episode id, whether it is new).

        The remember job (memory_remember, `engram remember`) and tests both come through here.
        """
        text = text.strip()
        if not text:
            raise ValueError("a memory needs some text")
        kind = kind_or_other(kind)
        scope = scope_for(scope, project)
        [outcome] = self.add_memories([Candidate(
            summary=summarize(text, ""), full_content=text, entities=[],
            importance=importance or default_importance(kind), kind=kind, scope=scope, source_type="manual",
            session_id=session_id, project=project if scope == "project" else None,
        )])
        return outcome.episode_id, outcome.action != "noop"

    def add_memories(self, candidates: list[Candidate], *,
                     progress: Callable[[apsw.Connection], None] | None = None,
                     linked: Callable[[apsw.Connection, list[Outcome]], None] | None = None) -> list[Outcome]:
        """Merge candidate memories (and the caller's progress marker) in one transaction."""
        return self.deduper.apply(candidates, progress=progress, linked=linked)

    def forget(self, episode_id: str, reason: str | None = None) -> list[Episode]:
        """Erase a memory's content and that of the versions it replaced; returns them, the memory first.

        The ids stay, marked forgotten with the reason (redacted like everything stored), so a later
        lookup says what happened. Callers that must also keep it out of recollections use
        ``processor.recall.forget``.
        """
        episode_id = episode_id.strip()
        ep = sql.get_episode(self.conn, episode_id)
        if ep is None:
            hint = ("; a msg_… id is a message of the current session, not a memory"
                    if episode_id.startswith("msg_") else "; `engram recall QUERY` lists ids")
            raise UnknownEpisode(f"no memory with id {episode_id!r}{hint}")
        if ep.status == "forgotten":
            return [ep]
        return self.forget_many([episode_id], reason)

    def forget_many(self, episode_ids: list[str], reason: str | None = None) -> list[Episode]:
        """Forget these memories (and their earlier versions) in one transaction; returns what was erased."""
        note = redact(" ".join(reason.split()))[:MAX_REASON_CHARS] if reason and reason.strip() else None
        erased: list[Episode] = []
        stamp = now_ms()
        with write_transaction(self.conn):
            seen: set[str] = set()
            for episode_id in episode_ids:
                for target in self._versions(episode_id):
                    ep = sql.get_episode(self.conn, target)
                    if ep is None or ep.status == "forgotten" or target in seen:
                        continue
                    seen.add(target)
                    sql.forget(self.conn, target, stamp, note)
                    erased.append(ep)
        return erased

    def _versions(self, episode_id: str) -> list[str]:
        """The memory and the earlier versions of it that it replaced. A memory it superseded by stating a
        change (``processor.memory.supersede``) is another memory, not a version: it is made active again
        (with its own earlier versions) rather than erased with it."""
        predecessors = sql.earlier_versions(self.conn, episode_id)
        changed = cold_sql.superseded_by_change(self.conn, predecessors)
        kept: set[str] = set()
        for old in changed:
            kept.update([old, *sql.earlier_versions(self.conn, old)])
        erased = [episode_id] + [p for p in predecessors if p not in kept]
        for old in changed:
            ep = sql.get_episode(self.conn, old)
            if ep is not None and ep.superseded_by in erased:
                cold_sql.reinstate(self.conn, old, ep.superseded_by)
        return erased

    def plan_forget(self, *, query: str | None = None, before_ms: int | None = None,
                    project: str | None = None, limit: int = 10_000) -> ForgetPlan:
        """What a bulk forget would erase: memories holding every word of `query`, made before `before_ms`.

        Nothing is changed; the CLI shows the plan, then `processor.recall.forget.forget_planned` does it.
        """
        match = fts_query(query, " AND ") if query and query.strip() else None
        if query and query.strip() and not match:
            raise ValueError(f"--query {query!r} has no searchable words; name a few words the memories contain")
        if match is None and before_ms is None:
            raise ValueError("say what to forget: --query WORDS and/or --before DATE (or one memory's id)")
        found = sql.forget_candidates(self.conn, match, before_ms, project, limit + 1)
        return ForgetPlan(found[:limit], truncated=len(found) > limit)

    def vectors_for(self, contents: list[str]) -> list[bytes]:
        """Stored vectors of these episode contents, as the episode builder makes them."""
        return self._embed(contents)

    def reindex(self, *, rebuild: bool = True) -> int:
        """Remake verbatim episodes with the current builder (ids people acted on are kept), then re-embed
        every other non-forgotten episode with the configured model and record it; returns episodes embedded."""
        done: set[int] = set()
        if rebuild:
            done = set(rebuild_verbatim(self).rowids)
        rows = [row for row in sql.all_embeddable(self.conn) if row[0] not in done]
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
        return len(rows) + len(done)

    # --- reading -----------------------------------------------------------------------------

    def search(self, query: str, *, limit: int = 5, project: str | None = None,
               include_inactive: bool = False, exclude_ids: frozenset[str] = frozenset(),
               query_vector: np.ndarray | None = None, also_statuses: frozenset[str] = frozenset()) -> list[Scored]:
        query = query.strip()
        if not query:
            return []
        if query_vector is None:
            query_vector = self.embedder.embed_query(query)
        index = self.index
        return retry_when_busy(lambda: search_episodes(
            self.conn, index, query_vector, query, limit=limit, project=project, now_ms=now_ms(),
            weights=self.weights, include_inactive=include_inactive, exclude_ids=exclude_ids,
            also_statuses=also_statuses,
        ), what="searching memories", attempts=3)

    def recall(self, query: str, *, limit: int = 5, project: str | None = None,
               session_id: str | None = None) -> list[Hit]:
        """The ranked hits for a query. Returning a hit is not using it: only expand() counts an access,
        so what ranks high is not made to rank higher by being shown (no rich-get-richer)."""
        limit = max(1, min(int(limit), 50))
        # Stale, archived and superseded memories are still found here (never as the hooks' bites), with why;
        # a superseded one always ranks below the memory that superseded it.
        scored = self.search(query, limit=limit, project=project, also_statuses=RECALL_ALSO)
        checks = cold_sql.checks_for(self.conn, [s.episode.id for s in scored if s.episode.status != "active"])
        bites = bites_for(query, [s.episode for s in scored])
        agents = sessions.agents_of(self.conn, [s.episode.session_id for s in scored if s.episode.session_id])
        hits = [Hit(s.episode.id, bite, utc_date(s.episode.created_at), s.episode.importance,
                    s.episode.kind, round(s.score, 4), "episode", s.episode.project, round(s.relevance, 4),
                    _status_note(s.episode, checks.get(s.episode.id)), list(s.episode.source_uuids),
                    agents.get(s.episode.session_id or ""))
                for s, bite in zip(scored, bites, strict=True)]
        if session_id:
            hits = self._merge_same_session(hits, query, session_id, limit)
        return hits

    def _merge_same_session(self, hits: list[Hit], query: str, session_id: str, limit: int) -> list[Hit]:
        """Seed 004: the current session's recent messages not yet in an episode are searchable too."""
        recent = sql.recent_unepisodized(self.conn, session_id, SAME_SESSION_LIMIT)
        if not recent:
            return hits
        vectors = self.embedder.embed_documents([m.text for m in recent])
        sims = vectors @ self.embedder.embed_query(query)
        # The same bite rule as for memories, behind a label that says where it comes from.
        bites = bites_for(query, [Passage(fit(" ".join(m.text.split()), BITE_CHARS - 30), m.text) for m in recent])
        extra = []
        agent = sessions.session_agent(self.conn, session_id)
        for message, sim, bite in zip(recent, sims, bites, strict=True):
            # Ranked as memories are: this session's messages are the newest there are (recency 1), and
            # recency counts in proportion to relevance.
            score = (self.weights.relevance + self.weights.recency) * max(float(sim), 0.0)
            label = f"(this session, {message.role}) "
            extra.append(Hit(f"msg_{message.uuid}", label + fit(bite, BITE_CHARS - len(label)),
                             utc_date(message.ts_ms), "normal", "other",
                             round(score, 4), "message", relevance=round(max(float(sim), 0.0), 4),
                             source_uuids=[message.uuid], agent=agent))
        merged = sorted(hits + [h for h in extra if (h.relevance or 0.0) > SAME_SESSION_MIN_SIMILARITY],
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
            raise UnknownEpisode(f"memory {item_id} was forgotten on {utc_date(ep.valid_to)}; its content is gone")
        if touch:
            self._touch([ep.id])
        sources = [{"uuid": m.uuid, "role": m.role, "timestamp": m.timestamp, "session_id": m.session_id}
                   for m in sessions.message_sources(self.conn, ep.source_uuids)]
        if not sources:  # made on another machine: its messages, if that machine shared them (share_messages)
            sources = [{"uuid": uuid, "role": role, "timestamp": utc_clock(ts) if ts else None,
                        "session_id": session_id, "text": text}
                       for uuid, session_id, role, ts, text in share_sql.pulled_messages_of(self.conn, ep.id)]
        chain = [ep.id, *sql.earlier_versions(self.conn, ep.id)]
        auto_memory = [{"file": row.path, "heading": row.heading, "lines": [row.line_start, row.line_end],
                        "cite": cite(row.path, row.heading), "present": row.state == "present"}
                       for row in automem_sql.sections_for(self.conn, chain, present_only=False)]
        origin = share_sql.origins_of(self.conn, [ep.id]).get(ep.id)
        return Expansion(ep.id, ep.summary, ep.full_content, utc_date(ep.created_at), ep.project, ep.session_id,
                         ep.importance, ep.kind, ep.scope, ep.source_type, ep.status, ep.entities, sources,
                         ep.superseded_by, auto_memory, origin.describe() if origin else None,
                         sessions.session_agent(self.conn, ep.session_id) if ep.session_id else None)

    def _expand_message(self, item_id: str) -> Expansion:
        found = sessions.message_sources(self.conn, [item_id[4:]])
        if not found:
            raise UnknownEpisode(f"no captured message with id {item_id!r}")
        m = found[0]
        return Expansion(item_id, m.text[:160], m.text, utc_date(m.ts_ms), None, m.session_id, "normal", "other",
                         "project", "message", "active", [], [{"uuid": m.uuid, "role": m.role,
                                                               "timestamp": m.timestamp, "session_id": m.session_id}],
                         agent=sessions.session_agent(self.conn, m.session_id))

    def status(self) -> dict[str, Any]:
        by_status = sql.counts_by_status(self.conn)
        return {
            "episodes": sum(by_status.values()),
            "episodes_by_status": by_status,
            "embedding_model": sql.get_meta(self.conn, "embedding_model"),
            "embedding_dim": int(sql.get_meta(self.conn, "embedding_dim") or 0) or None,
        }
