"""Hybrid episode search: BM25 + cosine relevance, then recency and access frequency.

Relevance mixes FTS5 bm25 (normalised by the best match) with the cosine
similarity from an in-memory matrix of unit vectors (numpy matmul +
argpartition). The best `pool` candidates by relevance are then re-ranked by
the seed's formula: w_rel*relevance + w_rec*recency + w_freq*frequency, with a
relevance floor for important episodes. Only active episodes in scope
(global, or the current project) are returned unless asked otherwise.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass

import apsw
import numpy as np

from processor.config import Settings
from processor.memory.common_terms import selective_terms
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
        wanted = np.asarray(rowids, dtype=np.int64)
        with self._lock:
            if self._size == 0 or not len(wanted):
                return {}
            held = self._rowids[: self._size]
            at = np.minimum(np.searchsorted(held, wanted), self._size - 1)
            found = held[at] == wanted
            sims = self._matrix[at[found]] @ query.astype(np.float32)
        return dict(zip(wanted[found].tolist(), sims.tolist(), strict=True))

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


def _recency(created_at: int, now_ms: int, half_life_days: float) -> float:
    age_days = max(now_ms - created_at, 0) / 86_400_000
    return math.exp(-math.log(2) * age_days / half_life_days) if half_life_days > 0 else 0.0


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

    relevant: list[tuple[float, float, float, int, RankingFacts]] = []
    for rowid, ep in facts.items():
        if not include_inactive and ep.status != "active" and ep.status not in also_statuses:
            continue
        if project is not None and ep.scope != "global" and ep.project != project:
            continue
        if ep.id in exclude_ids:
            continue
        cos = max(cosine.get(rowid, 0.0), 0.0)
        lexical = bm25.get(rowid, 0.0)
        relevance = weights.bm25_share * lexical + (1 - weights.bm25_share) * cos
        # The floor lifts important memories that are at least slightly relevant, not every one.
        if ep.importance == "high" and (lexical > 0 or cos >= weights.slight_relevance):
            relevance = max(relevance, weights.high_importance_floor)
        relevant.append((relevance, cos, lexical, rowid, ep))
    relevant.sort(key=lambda item: item[0], reverse=True)
    pool = relevant[: max(weights.pool, limit)]
    max_access = max((ep.access_count for *_, ep in pool), default=0)
    ranked: list[tuple[float, float, float, float, int]] = []
    for relevance, cos, lexical, rowid, ep in pool:
        frequency = math.log1p(ep.access_count) / math.log1p(max_access) if max_access else 0.0
        score = (weights.relevance * relevance
                 + weights.recency * _recency(ep.created_at, now_ms, weights.recency_half_life_days)
                 + weights.frequency * frequency)
        ranked.append((score, relevance, cos, lexical, rowid))
    ranked.sort(key=lambda item: item[0], reverse=True)
    winners = ranked[:limit]
    episodes = sql.episodes_by_rowid(conn, [rowid for *_, rowid in winners])
    return [Scored(episodes[rowid], score, relevance, cos, lexical)
            for score, relevance, cos, lexical, rowid in winners if rowid in episodes]

