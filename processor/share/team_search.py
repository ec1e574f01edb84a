"""`memory_recall` with scope "team": the team's memories searched on the shared database, for teams too large
to replicate whole, ranked by the same fusion as local search (``processor/memory/search.py``).

The server finds candidates both ways — pgvector's HNSW index over this machine's embedding model's vectors
(iterative scans keep the team filter from starving it) and Postgres full-text search (words in half the
memories left out, as local search does; at most ``LEXICAL_CAP`` memories holding all the words and as many
holding any are ranked) — and here they are scored as local ones are: relevance = ``bm25_share`` × the
words' score (normalised by the best) + the rest × cosine, the high-importance floor, then
``weight_relevance × relevance + weight_recency × recency × relevance``. Recency counts calendar days back
from the newest candidate (the server does not keep the project's active days); use (expansions) is per
machine and counts nothing here.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from processor.clock import utc_date
from processor.config import Settings
from processor.memory.bites import Passage, bites_for
from processor.memory.episode_store import Expansion, Hit, weights_from
from processor.memory.search import fts_terms, half_life_decay
from processor.share import connection as share_connection
from processor.share.errors import ShareError, explain_connection_error, is_psycopg_error
from processor.share.postgres import statements as pg
from processor.share.projects import project_key
from processor.store.share import Origin

LEXICAL_CAP = 200  # matches ranked per side (all words, any word): bounds a common word's cost
COMMON_SHARE = 0.5  # a word in this share of the memories or more is left out, as local search does
POOL_MAX = 4

_pools: dict[str, Any] = {}
_pools_lock = threading.Lock()


def _pool(settings: Settings) -> Any:
    """A small pool of checked connections per URL, kept for the process (the processor serves many sessions)."""
    from psycopg_pool import ConnectionPool

    url = share_connection.database_url(settings)
    with _pools_lock:
        pool = _pools.get(url)
        if pool is None:
            timeout = max(1, int(settings.share_connect_timeout_seconds))
            pool = ConnectionPool(url, min_size=0, max_size=POOL_MAX, open=True, timeout=timeout + 1,
                                  kwargs={"autocommit": True, "connect_timeout": timeout,
                                          "application_name": "engram-team-search"},
                                  configure=share_connection.prepare)
            _pools[url] = pool
        return pool


def close_pools() -> None:
    with _pools_lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()


@contextlib.contextmanager
def _connection(settings: Settings) -> Iterator[Any]:
    """A pooled connection; when none can be had, the reason from a direct attempt (a ShareError with its fix)."""
    from psycopg_pool import PoolTimeout

    pool = _pool(settings)
    try:
        conn = pool.getconn()
    except PoolTimeout:
        share_connection.connect(settings).close()  # raises the ShareError that says why
        raise ShareError("the shared database did not hand out a connection in time.",
                         "try again; the processor's log has the details") from None
    try:
        yield conn
    finally:
        pool.putconn(conn)


def query_terms(text: str) -> list[str]:
    """The query's content words, as local search takes them (letters, digits, underscores only)."""
    return fts_terms(text)


def search_team(settings: Settings, embedder: Any, query: str, *, limit: int, project: str | None) -> list[Hit]:
    """The best team memories for a query, as recall hits (their note names the teammate who made them)."""
    weights = weights_from(settings)
    fetch = max(weights.pool, limit) * 4
    key = project_key(project)[0] if project else None
    vector = embedder.embed_query(query)
    where = share_connection.describe(settings.shared_database_url)
    try:
        with _connection(settings) as conn:
            candidates = pg.team_candidates(conn, vector, embedder.model_id, query_terms(query), fetch=fetch,
                                            project_key=key, lexical_cap=LEXICAL_CAP, common=COMMON_SHARE)
    except ShareError:
        raise
    except Exception as exc:
        if is_psycopg_error(exc):
            raise explain_connection_error(exc, where) from None
        raise
    return rank(candidates, query, limit, weights)


def rank(candidates: list[pg.TeamCandidate], query: str, limit: int, weights: Any) -> list[Hit]:
    """Local search's fusion over the server's candidates."""
    if not candidates:
        return []
    best_lexical = max(c.lexical for c in candidates)
    newest = max(c.created_at for c in candidates)
    scored = []
    for c in candidates:
        lexical = c.lexical / best_lexical if best_lexical > 0 else 0.0
        cosine = max(c.cosine, 0.0)
        relevance = weights.bm25_share * lexical + (1 - weights.bm25_share) * cosine
        if c.importance == "high" and (lexical > 0 or cosine >= weights.slight_relevance):
            relevance = max(relevance, weights.high_importance_floor)
        recency = half_life_decay(c.created_at, newest, weights.recency_half_life_days)
        score = weights.relevance * relevance + weights.recency * recency * relevance
        scored.append((score, relevance, c))
    scored.sort(key=lambda item: item[0], reverse=True)
    winners = scored[:limit]
    bites = bites_for(query, [Passage(c.summary, c.full_content) for _, _, c in winners])
    return [Hit(c.id, bite, utc_date(c.created_at), c.importance, c.kind, round(score, 4), "team", c.project,
                round(relevance, 4), f"team {c.team}, made by {c.owner}")
            for (score, relevance, c), bite in zip(winners, bites, strict=True)]


def expand_team(settings: Settings, memory_id: str) -> Expansion | None:
    """A team memory as memory_expand shows it, read from the server (not replicated here); None if unseen."""
    with _connection(settings) as conn:
        row = pg.team_memory(conn, memory_id)
    if row is None:
        return None
    return Expansion(row.id, row.summary or "", row.full_content or "", utc_date(row.created_at), row.project,
                     row.session_id, row.importance, row.kind, row.scope, row.source_type, row.status,
                     list(row.entities or []), [], row.superseded_by, [],
                     Origin(row.machine_id, row.owner, None, row.team, pulled=True, mine=False).describe())
