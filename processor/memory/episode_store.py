"""EpisodeStore: what the processor, the MCP tools and the CLI do with memories.

It owns one thread's connection, the embedder (loaded lazily, once) and the
in-memory vector index. Every write commits the episodes together with the
progress marker that produced them, so a crash redoes work and never skips it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np

from processor.capture import signals
from processor.capture.automem import cite
from processor.clock import now_ms, utc_clock, utc_date
from processor.config import Settings, SettingsSource
from processor.memory import supersede
from processor.memory.bites import BITE_CHARS, Passage, bites_for, fit
from processor.memory.decisions import decisions_in
from processor.memory.dedupe import Candidate, Deduper, Outcome, content_hash
from processor.memory.embedder import Embedder, load_embedder
from processor.memory.errors import EmbeddingMismatch, UnknownEpisode
from processor.memory.facts import facts_of_round
from processor.memory.kinds import default_importance, kind_or_other, scope_for
from processor.memory.lessons import Failure, Lesson, mine_round
from processor.memory.preferences import standing_statements
from processor.memory.rebuild import rebuild_verbatim
from processor.memory.routines import forbidden_commands, routine, tasks_of
from processor.memory.search import Scored, SearchWeights, VectorIndex, fts_query, search_episodes
from processor.memory.verbatim import RoundPiece, embedding_text, entities_of, group_rounds, round_pieces, summarize
from processor.redaction import redact
from processor.store import automem as automem_sql
from processor.store import cold as cold_sql
from processor.store import episodes as sql
from processor.store import failures as failures_sql
from processor.store import retry_when_busy, sessions, write_transaction
from processor.store import share as share_sql
from processor.store import signals as signal_sql
from processor.store import tool_calls as tool_call_sql
from processor.store.episodes import Episode, NewEpisode, StoredMessage
from processor.store.tool_calls import StoredToolCall

log = logging.getLogger(__name__)

SAME_SESSION_LIMIT = 50
# A message of the current session joins the hits only when at least this similar to the query.
SAME_SESSION_MIN_SIMILARITY = 0.4
MAX_REASON_CHARS = 500
EPISODE_SLICE_PIECES = 16  # episodes embedded per call while the processor runs: ~1 s of model time at most
PAGE_MESSAGES = 2_000  # messages read per step when turning a session's backlog into episodes
# Messages read first for one slice: enough rounds for EPISODE_SLICE_PIECES pieces as sessions write them.
# A slice embeds ~16 pieces, so reading a whole page of a long backlog for it cost a page of Python objects
# per slice (the memory thread's largest transient allocation under load); a round longer than this is
# read with the full page.
SLICE_PAGE_MESSAGES = 256
RECALL_ALSO = frozenset({"stale", "archived", "superseded"})
ROUTINE_SESSIONS = 30  # a project's newest sessions read for its close-out routine


def _status_note(ep: Episode, check: cold_sql.LastCheck | None) -> str | None:
    if ep.status == "superseded" and ep.superseded_by:
        return f"superseded by {ep.superseded_by}" + (f" on {utc_date(ep.valid_to)}" if ep.valid_to else "")
    if ep.status == "stale":
        return "stale: " + (check.reason if check and check.reason else "the code it cites has changed")
    if ep.status == "archived":
        return "archived: old and never expanded; kept for search"
    return None


@dataclass
class Mined:
    """What a slice of rounds taught besides its verbatim pieces: memories with the miner that made each
    (``store/failures.py`` memory_origins), and every failure with the memory that tells its fix, if one does."""

    episodes: list[NewEpisode] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)
    failures: list[tuple[Failure, Lesson | None]] = field(default_factory=list)
    lessons: dict[str, Lesson] = field(default_factory=dict)  # the memories made from a failure, by id

    def add(self, episode: NewEpisode, miner: str) -> None:
        self.episodes.append(episode)
        self.origins[episode.id] = miner


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


@dataclass(frozen=True)
class _SlicePlan:
    """A slice of a session's episodes before its texts are embedded (``EpisodeStore._plan_slice``)."""

    session_id: str
    project: str | None
    pieces: list[RoundPiece]
    mined: Mined  # the memories the rounds state (preferences, decisions, facts, lessons) and their failures
    through: int  # the last message the slice covers: the progress marker it commits
    more: bool  # complete rounds remain after it

    @property
    def standing(self) -> list[NewEpisode]:
        return self.mined.episodes

    @property
    def texts(self) -> list[str]:
        return [p.full_content for p in self.pieces] + [e.full_content for e in self.standing]


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
        self._routine_stamps: dict[str, int] = {}  # project → its newest tool call when its routine was read

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

    # --- writing -----------------------------------------------------------------------------

    def episodize(self, session_id: str | None = None, final: bool = False,
                  max_pieces: int = EPISODE_SLICE_PIECES) -> int:
        """Turn complete rounds of captured messages into verbatim episodes; returns how many were added."""
        targets = [session_id] if session_id else self.sessions_to_episodize()
        added = 0
        for sid in targets:
            more = True
            while more:
                count, more = self.episodize_slice(sid, final, max_pieces)
                added += count
        return added

    def sessions_to_episodize(self) -> list[str]:
        """Sessions with captured messages outside episodes, or commits and answers waiting to become some."""
        targets = [row[0] for row in sql.sessions_with_new_messages(self.conn)]
        return targets + [sid for sid in signal_sql.sessions_with_ready(self.conn) if sid not in targets]

    def _signal_episodes(self, session_id: str) -> int:
        """Commit messages, tracker reasons and the user's answers become episodes of their own.

        They are short and say what was decided or fixed, so their bite is nearly all of them.
        """
        ready = signal_sql.ready(self.conn, session_id)
        progress = sql.session_progress(self.conn, session_id)
        if not ready or progress is None or sessions.session_opt_out(self.conn, session_id) == "record":
            return 0
        self.check_model()
        project = progress[0]
        blobs = self._embed([s.text for s in ready])
        stamp = now_ms()
        rowids: list[int] = []
        with write_transaction(self.conn):
            self.record_model()
            for signal, blob in zip(ready, blobs, strict=True):
                episode_id = "ep_" + hashlib.sha1(f"signal:{signal.tool_use_id}".encode()).hexdigest()[:16]
                if sql.get_episode(self.conn, episode_id) is None:
                    kind = signals.kind_of(signal.text)
                    rowids.append(sql.insert_episode(self.conn, NewEpisode(
                        id=episode_id, session_id=session_id, project=project, scope="project",
                        summary=summarize(signal.text, ""), entities=entities_of(signal.text),
                        importance=default_importance(kind), kind=kind, source_type="auto",
                        full_content=signal.text, source_uuids=[signal.use_uuid, signal.result_uuid],
                        content_hash=content_hash(signal.text), created_at=signal.ts_ms or stamp,
                    ), blob))
            signal_sql.mark_built(self.conn, [s.tool_use_id for s in ready])
        self._supersede(rowids)
        return len(ready)

    def _preferences(self, rounds: list[list[StoredMessage]], project: str | None,
                     session_id: str) -> list[NewEpisode]:
        """The standing preferences and instructions the user stated in these rounds, as memories
        (``processor.memory.preferences``); one already remembered word for word is not repeated."""
        found: list[NewEpisode] = []
        for message in (m for round_ in rounds for m in round_ if m.role == "user"):
            for index, statement in enumerate(standing_statements(message.text, project)):
                text = redact(statement.text)
                digest = content_hash(text)
                if sql.active_with_hash(self.conn, digest, memories_only=True) or any(
                        e.content_hash == digest for e in found):
                    continue
                scope = statement.scope if project else "global"
                found.append(NewEpisode(
                    id="ep_" + hashlib.sha1(f"standing:{message.uuid}:{index}".encode()).hexdigest()[:16],
                    session_id=session_id, project=project if scope == "project" else None, scope=scope,
                    summary=summarize(text, ""), entities=entities_of(text),
                    importance=default_importance(statement.kind), kind=statement.kind, source_type="auto",
                    full_content=text, source_uuids=[message.uuid], content_hash=digest,
                    created_at=message.ts_ms or now_ms()))
        return found

    def _known(self, episode_id: str, digest: str, pending: list[NewEpisode]) -> bool:
        """A mined memory already there: stored under its id, or its text active or about to be added."""
        return (sql.get_episode(self.conn, episode_id) is not None
                or sql.active_with_hash(self.conn, digest, memories_only=True)
                or any(e.content_hash == digest for e in pending))

    def _decisions(self, rounds: list[list[StoredMessage]], project: str | None, session_id: str,
                   mined: Mined) -> None:
        """The decisions the user stated in these rounds, in the user's words (``processor.memory.decisions``)."""
        for message in (m for round_ in rounds for m in round_ if m.role == "user"):
            for decision in decisions_in(message, project):
                digest = content_hash(decision.text)
                if self._known(decision.id, digest, mined.episodes):
                    continue
                mined.add(NewEpisode(
                    id=decision.id, session_id=session_id, project=project, scope="project" if project else "global",
                    summary=decision.text, entities=decision.names, importance=default_importance("decision"),
                    kind="decision", source_type="auto", full_content=decision.text,
                    source_uuids=decision.source_uuids, content_hash=digest,
                    created_at=decision.created_at or now_ms()), "decision")

    def _facts(self, round_messages: list[StoredMessage], calls: list[StoredToolCall], project: str | None,
               session_id: str, following: int | None, mined: Mined) -> None:
        """What the assistant found about the project's files and names in a round (``processor.memory.facts``)."""
        for fact in facts_of_round(round_messages, calls, project, following):
            digest = content_hash(fact.text)
            if self._known(fact.id, digest, mined.episodes):
                continue
            mined.add(NewEpisode(
                id=fact.id, session_id=session_id, project=project, scope="project" if project else "global",
                summary=fact.text, entities=fact.entities, importance="normal", kind="fact", source_type="auto",
                full_content=fact.text, source_uuids=fact.source_uuids, content_hash=digest,
                created_at=fact.created_at or now_ms()), "fact")

    def _lessons(self, session_id: str, project: str | None, rounds: list[list[StoredMessage]], taken: int,
                 found: list[NewEpisode], mined: Mined) -> None:
        """What the first `taken` rounds taught: each failure and what got past it (``processor.memory.lessons``),
        into `mined`, with every failure (fixed or not) to count where it recurs."""
        start = next((m.ts_ms for m in rounds[0] if m.ts_ms is not None), None)
        calls = tool_call_sql.session_calls(self.conn, session_id, since_ms=start) if start is not None else []
        if not calls:
            return
        for index, round_messages in enumerate(rounds[:taken]):
            following = rounds[index + 1][0].ts_ms if index + 1 < len(rounds) else None
            self._facts(round_messages, calls, project, session_id, following, mined)
            lessons, failures = mine_round(round_messages, calls, following, project)
            told = {lesson.signature: lesson for lesson in lessons if lesson.signature and lesson.session_fixed}
            for failure in failures:
                mined.failures.append((failure, told.get(tuple(failure.signature))))
            for lesson in lessons:
                if self._told_by_another(lesson, project):
                    continue  # this way of failing already has its memory (or had one, forgotten)
                digest = content_hash(lesson.full_content)
                if self._known(lesson.id, digest, found) or any(e.id == lesson.id for e in mined.episodes):
                    continue
                mined.add(NewEpisode(
                    id=lesson.id, session_id=session_id, project=project, scope="project" if project else "global",
                    summary=lesson.text, entities=lesson.entities, importance=default_importance(lesson.kind),
                    kind=lesson.kind, source_type="auto", full_content=lesson.full_content,
                    source_uuids=lesson.source_uuids, content_hash=digest,
                    created_at=lesson.created_at or now_ms()),
                    lesson.miner or ("error_fix" if lesson.session_fixed else "lesson"))
                mined.lessons[lesson.id] = lesson

    def _told_by_another(self, lesson: Lesson, project: str | None) -> bool:
        """A way of failing that already has its memory (or had one, forgotten), other than this lesson."""
        if lesson.kind != "gotcha" or not lesson.signature:
            return False
        known = failures_sql.find(self.conn, project, lesson.key or "", list(lesson.signature))
        return known is not None and bool(known.memory_id) and known.memory_id != lesson.id

    def _record_failures(self, session_id: str, project: str | None, mined: Mined) -> None:
        """Count each failure of these rounds under its signature, and link the memory that tells its fix (in the
        caller's transaction: the counts move with the progress marker)."""
        for failure, lesson in mined.failures:
            row = failures_sql.record(self.conn, project, failure.fail_key, failure.key, failure.signature,
                                      session_id, failure.call.result_ts_ms or failure.call.ts_ms,
                                      redact(failure.error_line))
            if lesson is not None and sql.get_episode(self.conn, lesson.id) is not None:
                failures_sql.set_memory(self.conn, row.id, lesson.id, redact(lesson.fix), lesson.uses)

    def refresh_routine(self, project: str) -> int:
        """The project's close-out routine (``processor.memory.routines``) as a convention memory, made or
        superseded when its steps changed; returns 1 when a new one was stored."""
        stamp = tool_call_sql.project_stamp(self.conn, project)
        if self._routine_stamps.get(project) == stamp:
            return 0
        self._routine_stamps[project] = stamp
        sessions = tool_call_sql.project_sessions_with_calls(self.conn, project, ROUTINE_SESSIONS)
        rules = [ep.summary for ep in sql.project_memories(self.conn, project, 2_000)
                 if ep.kind in ("convention", "decision", "preference") and not ep.summary.startswith("Close-out")]
        found = routine(project, {sid: tasks_of(tool_call_sql.session_calls(self.conn, sid),
                                               tool_call_sql.prompt_times(self.conn, sid)) for sid in sessions},
                        forbidden_commands(rules))
        meta_key = f"routine:{project}"
        previous = sql.get_meta(self.conn, meta_key)
        if found is None or found.id == previous or sql.get_episode(self.conn, found.id) is not None:
            return 0
        [blob] = self._embed([found.text])
        stamp_ms = now_ms()
        with write_transaction(self.conn):
            if sql.get_episode(self.conn, found.id) is not None:
                return 0  # stored meanwhile by another builder of this backfill
            self.record_model()
            sql.insert_episode(self.conn, NewEpisode(
                id=found.id, session_id=None, project=project, scope="project", summary=found.text,
                # Normal, not high: it is in the digest by its kind, and the ranking's floor for important
                # memories would lift a routine (which names the project's commands) over what answers a query.
                entities=found.entities, importance="normal", kind="convention",
                source_type="auto", full_content=found.text, source_uuids=[], content_hash=content_hash(found.text),
                created_at=found.last_ms or stamp_ms), blob)
            failures_sql.set_origin(self.conn, found.id, "routine")
            if previous and (old := sql.get_episode(self.conn, previous)) is not None and old.status == "active":
                sql.supersede(self.conn, previous, found.id, stamp_ms)
            sql.set_meta(self.conn, meta_key, found.id)
        log.info("close-out routine of %s: %s", project, found.text)
        return 1

    def _supersede(self, rowids: list[int]) -> None:
        """Older episodes these new ones state a change about are superseded (``processor.memory.supersede``)."""
        if not rowids:
            return
        try:
            changes = supersede.detect(self.conn, self.index, rowids, self.settings.supersede_similarity)
            done = supersede.apply(self.conn, changes, now_ms())
        except apsw.BusyError:
            log.info("database busy; supersession of %d new episodes not checked", len(rowids))
            return
        if done:
            log.info("%d older episode(s) superseded by newer ones that state a change", done)

    def episodize_slice(self, session_id: str, final: bool, max_pieces: int = EPISODE_SLICE_PIECES,
                        between: Callable[[], object] | None = None) -> tuple[int, bool]:
        """Episodes for the session's next complete rounds, about max_pieces of them (at least one round),
        committed with the progress marker; returns (episodes added, whether complete rounds remain).

        Slices keep each embedding call short: the memory thread serves recollections between them
        (and, inside one huge round, between its chunks, through `between`). Messages are read a page
        at a time, so a backlog of any length (a catch-up after downtime) is worked through in steps.
        """
        signal_added = self._signal_episodes(session_id)  # commits, tracker reasons, answers
        plan = self._plan_slice(session_id, final, max_pieces)
        if plan is None:
            return signal_added, False
        blobs: list[bytes] = []
        for start in range(0, len(plan.pieces), max_pieces):
            if start and between is not None:
                between()
            blobs += self._embed([p.full_content for p in plan.pieces[start:start + max_pieces]])
        blobs += self._embed([e.full_content for e in plan.standing]) if plan.standing else []
        return self._commit_slice(plan, blobs, final) + signal_added, plan.more

    def episodize_sessions(self, session_ids: list[str], final: bool,
                           max_pieces: int = EPISODE_SLICE_PIECES) -> tuple[int, list[str]]:
        """One slice of each of these sessions, their texts embedded in one call (a backfill's many short sessions
        take one decode for several of them, not one each); each slice commits on its own with its progress
        marker. Returns (episodes added, the sessions with complete rounds left)."""
        added = sum(self._signal_episodes(session_id) for session_id in session_ids)
        plans = [plan for session_id in session_ids if (plan := self._plan_slice(session_id, final, max_pieces))]
        texts = [t for plan in plans for t in plan.texts]
        blobs = self._embed(texts) if texts else []
        used = 0
        for plan in plans:
            added += self._commit_slice(plan, blobs[used:used + len(plan.texts)], final)
            used += len(plan.texts)
        return added, [plan.session_id for plan in plans if plan.more]

    def _plan_slice(self, session_id: str, final: bool, max_pieces: int) -> _SlicePlan | None:
        """What the session's next slice will store: its rounds' pieces and the memories they state."""
        progress = sql.session_progress(self.conn, session_id)
        if progress is None:
            return None
        project, through = progress
        rounds, full_page = self._next_rounds(session_id, through, final,
                                              SLICE_PAGE_MESSAGES * max(1, max_pieces // EPISODE_SLICE_PIECES))
        if not rounds:
            return None
        self.check_model()
        max_chars = self.settings.verbatim_max_chars
        pieces: list[RoundPiece] = []
        taken = 0
        for round_messages in rounds:
            round_pieces_ = round_pieces(round_messages, max_chars)
            if pieces and len(pieces) + len(round_pieces_) > max_pieces:
                break
            pieces += round_pieces_
            taken += 1
        mined = Mined()
        for episode in self._preferences(rounds[:taken], project, session_id):
            mined.add(episode, "standing")
        self._decisions(rounds[:taken], project, session_id, mined)
        self._lessons(session_id, project, rounds, taken, mined.episodes, mined)
        return _SlicePlan(session_id, project, pieces, mined, rounds[taken - 1][-1].id,
                          taken < len(rounds) or full_page)

    def _commit_slice(self, plan: _SlicePlan, blobs: list[bytes], final: bool) -> int:
        """Store a planned slice with its vectors (pieces', then standing memories'), the failures it met, and
        its progress marker."""
        session_id, project = plan.session_id, plan.project
        stamp = now_ms()
        added = 0
        rowids: list[int] = []
        with write_transaction(self.conn):
            if sessions.session_opt_out(self.conn, session_id) == "record":
                # Went off the record while these rounds were embedded: its messages are gone; so are these.
                return 0
            self.record_model()
            for piece, blob in zip(plan.pieces, blobs[:len(plan.pieces)], strict=True):
                if sql.get_episode(self.conn, piece.id) is not None:
                    continue  # written before a crash that lost the progress marker
                rowids.append(sql.insert_episode(self.conn, NewEpisode(
                    id=piece.id, session_id=session_id, project=project, scope="project", summary=piece.summary,
                    entities=piece.entities, importance="normal", kind="other", source_type="verbatim",
                    full_content=piece.full_content, source_uuids=piece.source_uuids,
                    content_hash=content_hash(piece.full_content), created_at=piece.created_at or stamp,
                ), blob))
                added += 1
            for episode, blob in zip(plan.standing, blobs[len(plan.pieces):], strict=True):
                # Read again in the transaction: another builder of a backfill (or another session's slice planned
                # beside this one) may have stored the same words, or a memory of the same way of failing.
                lesson = plan.mined.lessons.get(episode.id)
                if sql.get_episode(self.conn, episode.id) is None and not sql.active_with_hash(
                        self.conn, episode.content_hash, memories_only=True) and not (
                        lesson is not None and self._told_by_another(lesson, project)):
                    rowids.append(sql.insert_episode(self.conn, episode, blob))
                    failures_sql.set_origin(self.conn, episode.id, plan.mined.origins[episode.id])
                    added += 1
            self._record_failures(session_id, project, plan.mined)
            sql.set_episodized_through(self.conn, session_id, plan.through)
        self._supersede(rowids)
        if final and not plan.more and project:
            added += self.refresh_routine(project)
        return added

    def _next_rounds(self, session_id: str, through: int, final: bool,
                     first_page: int = SLICE_PAGE_MESSAGES) -> tuple[list[list[StoredMessage]], bool]:
        """The session's complete rounds after message `through`, from a short page (`first_page` messages)
        or, when no round ends within it, a full one; and whether the page read was full (more follow)."""
        for limit in (min(first_page, PAGE_MESSAGES), PAGE_MESSAGES):
            messages = sql.messages_after(self.conn, session_id, through, limit=limit)
            full_page = len(messages) == limit
            # Within a full page the last round may go on in the next page: only `final` on the last page.
            rounds = group_rounds(messages, final and not full_page)
            if rounds or not full_page:
                return rounds, full_page
        return [messages], True  # one round longer than a page: store it rather than stall on it

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
