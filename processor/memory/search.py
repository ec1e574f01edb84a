"""Hybrid episode search: BM25 + cosine relevance, then recency and use.

Relevance mixes FTS5 bm25 (normalised by the best match) with the cosine
similarity from an in-memory matrix of unit vectors (numpy matmul +
argpartition). The best `pool` candidates by relevance are then re-ranked by
the seed's formula, recency scaled by relevance: w_rel*relevance + w_rec*recency*relevance +
w_freq*frequency, with a relevance floor for important episodes. Only active episodes in scope
(global, or the current project) are returned unless asked otherwise.

Recency counts in proportion to relevance: it orders the memories that answer (the newer first), it
does not lift a recent memory that barely matches over an older one that answers (added flat, it cost
LoCoMo's long conversations a sixth of their recall: questions about the first sessions lost to the last).

Time is the project's own: a memory's age is the number of days with activity in its project (any
project's for a global memory) after the memory's day, never wall-clock days, so a history last touched
months ago still ranks its newest work first rather than everything at ≈ 0, and a project worked on once
a month does not age thirty times faster than one worked on daily. Frequency counts uses (expansions; being
returned is not a use), fades with the same half-life since the last one and saturates below 1:
``uses / (uses + frequency_saturation)``, absolute rather than relative to the other candidates.
A superseded memory (when asked for) never outranks the memory that superseded it: that one joins
the candidates and the old one ranks just below it.
"""

from __future__ import annotations

import bisect
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

import apsw
import numpy as np

from processor.config import Settings
from processor.memory.common_terms import selective_terms
from processor.memory.pasted import NOTE_PREFIX, PASTE_WEIGHT, paste_share
from processor.memory.verbatim import split_task_header
from processor.store import episodes as sql
from processor.store.episodes import Episode, RankingFacts

_WORD = re.compile(r"\w+", re.UNICODE)
_STOPWORDS = frozenset(
    "a an and are as at be but by did do does for from had has have how i if in into is it its me my of on or "
    "our so that the their them then there these they this to was we were what when where which who why will "
    "with you your".split()
)
_MAX_TERMS = 64


@dataclass(frozen=True)
class SearchWeights:
    relevance: float = Settings.weight_relevance.default
    recency: float = Settings.weight_recency.default
    frequency: float = Settings.weight_frequency.default
    high_importance_floor: float = Settings.high_importance_floor.default
    recency_half_life_days: float = Settings.recency_half_life_days.default
    bm25_share: float = Settings.bm25_share.default  # of relevance; the rest is cosine
    pool: int = 20  # candidates re-ranked by the full formula
    slight_relevance: float = 0.25  # cosine from which an important memory counts as related at all
    frequency_saturation: float = Settings.frequency_saturation.default  # recent uses at half the weight


@dataclass(frozen=True)
class Scored:
    episode: Episode
    score: float
    relevance: float
    cosine: float
    bm25: float


def fts_terms(text: str) -> list[str]:
    """The distinct content words of `text`, in order, at most _MAX_TERMS."""
    terms: list[str] = []
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS or word in terms or (len(word) < 2 and not word.isdigit()):
            continue
        terms.append(word)
        if len(terms) >= _MAX_TERMS:
            break
    return terms


def fts_query(text: str, joiner: str = " OR ", terms: list[str] | None = None) -> str:
    """A safe FTS5 query: the distinct content words of `text` (or `terms`), OR-ed (or joined by `joiner`)."""
    return joiner.join(f'"{t}"' for t in (fts_terms(text) if terms is None else terms))


class VectorIndex:
    """Unit vectors of every embedded episode, loaded once and appended incrementally.

    ``memories_only`` leaves verbatim rounds out (ADD/UPDATE/NOOP compares against memories only);
    such an index must be refreshed inside a transaction, so that no row appears between its reads.
    """

    def __init__(self, dim: int, *, memories_only: bool = False) -> None:
        self.dim = dim
        self.memories_only = memories_only
        self._rowids = np.empty(0, dtype=np.int64)
        self._matrix = np.empty((0, dim), dtype=np.float32)
        self._size = 0
        self._last_rowid = 0
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return self._size

    def refresh(self, conn: apsw.Connection) -> int:
        """Load vectors of episodes added since the last refresh; returns how many."""
        with self._lock:  # read and append as one step, so two threads never add the same rows
            rows = sql.vectors_after(conn, self._last_rowid, memories_only=self.memories_only)
            if rows:
                self.add([r for r, _ in rows], np.vstack([np.frombuffer(b, dtype=np.float32) for _, b in rows]))
            if self.memories_only:  # the verbatim rows just skipped are never memories: skip them for good
                self._last_rowid = max(self._last_rowid, sql.max_rowid(conn))
            return len(rows)

    def add(self, rowids: list[int], vectors: np.ndarray) -> None:
        vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        with self._lock:
            needed = self._size + len(rowids)
            if needed > len(self._rowids):  # grow geometrically: appends stay amortised O(1)
                capacity = max(needed, 2 * len(self._rowids), 1024)
                matrix = np.empty((capacity, self.dim), dtype=np.float32)
                matrix[: self._size] = self._matrix[: self._size]
                ids = np.empty(capacity, dtype=np.int64)
                ids[: self._size] = self._rowids[: self._size]
                self._matrix, self._rowids = matrix, ids
            self._matrix[self._size:needed] = vectors
            self._rowids[self._size:needed] = rowids
            self._size = needed
            self._last_rowid = max(self._last_rowid, max(rowids))

    def similarity(self, query: np.ndarray, rowids: list[int]) -> dict[int, float]:
        """Cosine of each given row the index holds (rowids are added in increasing order)."""
        with self._lock:
            ids, at = self._held(rowids)
            sims = self._matrix[at] @ query.astype(np.float32)
        return dict(zip(ids.tolist(), sims.tolist(), strict=True))

    def vectors(self, rowids: list[int]) -> dict[int, np.ndarray]:
        """The held vectors of these rows (copies)."""
        with self._lock:
            ids, at = self._held(rowids)
            rows = self._matrix[at].copy()
        return dict(zip(ids.tolist(), rows, strict=True))

    def _held(self, rowids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Of these rowids, the ones the index holds and their rows' positions (call under the lock)."""
        wanted = np.asarray(rowids, dtype=np.int64)
        if self._size == 0 or not len(wanted):
            return wanted[:0], wanted[:0]
        held = self._rowids[: self._size]  # added in increasing rowid order: sorted
        at = np.minimum(np.searchsorted(held, wanted), self._size - 1)
        found = held[at] == wanted
        return wanted[found], at[found]

    def top_many(self, queries: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
        """top() for several queries with one pass over the matrix."""
        queries = np.asarray(queries, dtype=np.float32).reshape(-1, self.dim)
        with self._lock:
            size = self._size
            if size == 0 or k <= 0 or not len(queries):
                return [[] for _ in range(len(queries))]
            sims = self._matrix[:size] @ queries.T
            rowids = self._rowids[:size]
        k = min(k, size)
        result = []
        for column in sims.T:
            best = np.argpartition(-column, k - 1)[:k] if k < size else np.arange(size)
            best = best[np.argsort(-column[best])]
            result.append([(int(rowids[i]), float(column[i])) for i in best])
        return result

    def top(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(rowid, cosine) of the k nearest vectors, best first."""
        with self._lock:
            size = self._size
            if size == 0 or k <= 0:
                return []
            sims = self._matrix[:size] @ query.astype(np.float32)
            rowids = self._rowids[:size]
        k = min(k, size)
        best = np.argpartition(-sims, k - 1)[:k] if k < size else np.arange(size)
        best = best[np.argsort(-sims[best])]
        return [(int(rowids[i]), float(sims[i])) for i in best]


def half_life_decay(created_at: int, now_ms: int, half_life_days: float) -> float:
    """1 at `now_ms`, halving every `half_life_days` calendar days before it (0 without a half-life)."""
    age_days = max(now_ms - created_at, 0) / 86_400_000
    return math.exp(-math.log(2) * age_days / half_life_days) if half_life_days > 0 else 0.0


def _frequency(access_count: int, accessed_at: int, reference_ms: int, weights: SearchWeights) -> float:
    """How much a memory has been used lately, in [0, 1): bounded, decaying, and the same whatever else ranks.

    Uses fade with the recency half-life since the last one (an exponentially decayed count, read
    from the count and the last use), then saturate: no number of uses is worth more than
    weight_frequency, and an old burst of use stops counting.
    """
    if access_count <= 0:
        return 0.0
    uses = access_count * half_life_decay(accessed_at, reference_ms, weights.recency_half_life_days)
    saturation = max(weights.frequency_saturation, 1e-9)
    return uses / (uses + saturation)


class ProjectClock:
    """Age as the project lived it: how many days with activity in the project (any project, for global
    memories) came after a memory's day, up to its newest episode. Never the wall clock.

    A project worked on every day ages like the calendar; one touched once a month ages a day per session
    day, so last spring's work is not all at recency ≈ 0. The active days of each project are read once
    and kept, and brought up to date from
    the episodes added since (a rowid range) when the table's max rowid changes.
    """

    _cache: dict[tuple[str, str | None], tuple[int, list[int]]] = {}
    _lock = threading.Lock()

    def __init__(self, conn: apsw.Connection, now_ms: int) -> None:
        self._conn = conn
        self._now = now_ms
        self._stamp = sql.max_rowid(conn)
        self._seen: dict[str | None, list[int]] = {}

    def _days(self, project: str | None) -> list[int]:
        if project not in self._seen:
            key = (self._conn.filename, project)
            with self._lock:
                cached = self._cache.get(key)
            if cached is not None and cached[0] == self._stamp:
                days = cached[1]
            elif cached is not None and cached[1] and cached[0] < self._stamp:
                # Episodes were added since: read only theirs (a full pass over a large store, at every
                # new episode, cost the hot path hundreds of milliseconds at 100k).
                added = sql.active_days(self._conn, project, after_rowid=cached[0])
                days = sorted(set(cached[1]).union(added)) if added else cached[1]
            else:
                days = sql.active_days(self._conn, project)
                if not days and project is not None:
                    days = sql.active_days(self._conn, None)
                with self._lock:
                    if len(self._cache) > 256:
                        self._cache.clear()
                    self._cache[key] = (self._stamp, days)
            self._seen[project] = days
        return self._seen[project]

    def age_days(self, project: str | None, created_at: int) -> float:
        """Active days of the project after the memory's own day (0 for its newest day's work)."""
        days = self._days(project)
        if not days:
            return max(self._now - created_at, 0) / 86_400_000
        return float(len(days) - bisect.bisect_right(days, created_at // 86_400_000))

    def recency(self, project: str | None, created_at: int, half_life_days: float) -> float:
        if half_life_days <= 0:
            return 0.0
        return math.exp(-math.log(2) * self.age_days(project, created_at) / half_life_days)

    def now(self, project: str | None) -> int:
        """The project's newest activity as a time (uses fade from here), never later than the wall clock."""
        days = self._days(project)
        newest = (days[-1] + 1) * 86_400_000 - 1 if days else self._now
        return min(newest, self._now)


def search_episodes(
    conn: apsw.Connection,
    index: VectorIndex,
    query_vector: np.ndarray | None,
    query_text: str,
    *,
    limit: int,
    project: str | None,
    now_ms: int,
    weights: SearchWeights = SearchWeights(),
    include_inactive: bool = False,
    exclude_ids: frozenset[str] = frozenset(),
    also_statuses: frozenset[str] = frozenset(),
) -> list[Scored]:
    """also_statuses: besides active, e.g. stale and archived for memory_recall; never for the hooks' bites."""
    fetch = max(weights.pool, limit) * 4  # head-room for candidates filtered out by scope/status
    cosine: dict[int, float] = {}
    if query_vector is not None:
        index.refresh(conn)
        cosine = dict(index.top(query_vector, fetch))
    bm25: dict[int, float] = {}
    match = fts_query(query_text, terms=selective_terms(conn, fts_terms(query_text)))
    if match:
        hits = sql.fts_candidates(conn, match, fetch)
        best = max((-score for _, score in hits), default=0.0)
        if best > 0:
            bm25 = {rowid: max(-score, 0.0) / best for rowid, score in hits}
    if query_vector is not None:
        # A lexical match outside the vector top-k still has a cosine: use it rather than 0.
        missing = [rowid for rowid in bm25 if rowid not in cosine]
        if missing:
            cosine.update(index.similarity(query_vector, missing))
    facts = sql.ranking_facts(conn, list(cosine.keys() | bm25.keys()))
    weight: dict[int, float] = {}  # below 1 for a piece that is mostly what someone pasted (see below)

    def allowed(ep: RankingFacts) -> bool:
        if not include_inactive and ep.status != "active" and ep.status not in also_statuses:
            return False
        if project is not None and ep.scope != "global" and ep.project != project:
            return False
        return ep.id not in exclude_ids

    def relevance_of(rowid: int, ep: RankingFacts) -> tuple[float, float, float]:
        cos = max(cosine.get(rowid, 0.0), 0.0)
        lexical = bm25.get(rowid, 0.0)
        relevance = (weights.bm25_share * lexical + (1 - weights.bm25_share) * cos) * weight.get(rowid, 1.0)
        # The floor lifts important memories that are at least slightly relevant, not every one.
        if ep.importance == "high" and (lexical > 0 or cos >= weights.slight_relevance):
            relevance = max(relevance, weights.high_importance_floor)
        return relevance, cos, lexical

    relevant: list[tuple[float, float, float, int, RankingFacts]] = []
    for rowid, ep in facts.items():
        if allowed(ep):
            relevant.append((*relevance_of(rowid, ep), rowid, ep))
    relevant.sort(key=lambda item: item[0], reverse=True)
    # A piece that is mostly what someone pasted (a log's note) counts less than written prose. Only the
    # head of the candidates is read for it (twice the pool: a weight only ever lowers a piece), so the
    # hot path reads a few dozen contents, not every candidate's.
    window = relevant[: 2 * max(weights.pool, limit)]
    pasted = sql.contents_with(conn, [rowid for *_, rowid, _ in window], NOTE_PREFIX)
    if pasted:
        weight.update({rowid: 1.0 - (1.0 - PASTE_WEIGHT) * paste_share(split_task_header(content)[1])
                       for rowid, content in pasted.items()})
        window = sorted(((*relevance_of(rowid, ep), rowid, ep) for *_, rowid, ep in window),
                        key=lambda item: item[0], reverse=True)
    pool = window[: max(weights.pool, limit)]
    pool += _successors(conn, index, query_vector, pool, cosine, allowed, relevance_of)
    clock = ProjectClock(conn, now_ms)
    scored: dict[int, list] = {}
    for relevance, cos, lexical, rowid, ep in pool:
        score = (weights.relevance * relevance
                 + weights.recency * relevance
                 * clock.recency(ep.project, ep.created_at, weights.recency_half_life_days)
                 + weights.frequency * _frequency(ep.access_count, ep.accessed_at, clock.now(ep.project), weights))
        scored[rowid] = [score, relevance, cos, lexical, rowid]
    _below_successors(scored, [(rowid, ep) for *_, rowid, ep in pool])
    ranked = sorted(scored.values(), key=lambda item: item[0], reverse=True)
    winners = ranked[:limit]
    episodes = sql.episodes_by_rowid(conn, [rowid for *_, rowid in winners])
    return [Scored(episodes[rowid], score, relevance, cos, lexical)
            for score, relevance, cos, lexical, rowid in winners if rowid in episodes]


SUCCESSOR_HOPS = 8  # a superseded memory's chain of newer versions is followed this far


def _successors(conn: apsw.Connection, index: VectorIndex, query_vector: np.ndarray | None,
                pool: list[tuple[float, float, float, int, RankingFacts]], cosine: dict[int, float],
                allowed: Callable[[RankingFacts], bool],
                relevance_of: Callable[[int, RankingFacts], tuple[float, float, float]],
                ) -> list[tuple[float, float, float, int, RankingFacts]]:
    """The memories that superseded candidates in the pool, when not there already (so the newer one is
    shown with, and above, the old one)."""
    held = {ep.id for *_, ep in pool}
    wanted = [ep.superseded_by for *_, ep in pool if ep.status == "superseded" and ep.superseded_by]
    added: list[tuple[float, float, float, int, RankingFacts]] = []
    for _ in range(SUCCESSOR_HOPS):
        wanted = [w for w in dict.fromkeys(wanted) if w not in held]
        if not wanted:
            break
        found = sql.ranking_facts_by_id(conn, wanted)
        if query_vector is not None:
            cosine.update(index.similarity(query_vector, [r for r in found if r not in cosine]))
        wanted = []
        for rowid, ep in found.items():
            held.add(ep.id)
            if ep.status == "superseded" and ep.superseded_by:
                wanted.append(ep.superseded_by)
            if allowed(ep):
                added.append((*relevance_of(rowid, ep), rowid, ep))
    return added


def _below_successors(scored: dict[int, list], candidates: list[tuple[int, RankingFacts]]) -> None:
    """Cap each superseded memory's score just below its successor's, newest first, so chains hold."""
    by_id = {ep.id: rowid for rowid, ep in candidates}
    old = sorted(((rowid, ep) for rowid, ep in candidates if ep.status == "superseded" and ep.superseded_by),
                 key=lambda item: item[1].created_at, reverse=True)
    for _ in range(2):  # twice: a chain scored out of order settles on the second pass
        for rowid, ep in old:
            successor = by_id.get(ep.superseded_by or "")
            if successor is not None and scored[rowid][0] >= scored[successor][0]:
                scored[rowid][0] = scored[successor][0] - 1e-6
