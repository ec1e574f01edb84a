"""Which query terms are too common to rank by: those BM25 itself gives no weight in a large store.

FTS5's bm25 uses idf = log((N - n + 0.5) / (n + 0.5)), clamped to ~0 once a term is in half the
episodes or more (n >= N/2). Such a term adds nothing to the ranking, yet a query containing it makes
FTS5 score every episode that holds it: at 20k episodes one such query costs ~90 ms, at 100k ~0.5 s.
Leaving those terms out of the MATCH keeps the same order for every other term at a bounded cost.

Document frequencies are counted no further than N/2 (the count stops there) and cached per database
until the store grows by a tenth. Small stores keep every term: their full pass is cheap, and there
the normalised bm25 of even a common term still separates a handful of episodes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import apsw

from processor.store import episodes as sql

# Below this many episodes the full BM25 pass costs a few milliseconds: no term is left out.
LARGE_STORE = 2_000
_CACHE_LIMIT = 20_000  # (database, term) entries kept, oldest dropped first
_REGROW = 1.1  # a cached count holds until the store is a tenth larger

_lock = threading.Lock()
_counts: OrderedDict[tuple[str, str], tuple[int, int]] = OrderedDict()  # -> (documents, store size then)


def selective_terms(conn: apsw.Connection, terms: list[str]) -> list[str]:
    """`terms` without those held by half the episodes or more (none are dropped in a small store)."""
    if not terms:
        return terms
    size = sql.episode_rowid_bound(conn)
    if size < LARGE_STORE:
        return terms
    half = (size + 1) // 2
    return [term for term in terms if _documents_with(conn, term, size, half) < half]


def _documents_with(conn: apsw.Connection, term: str, size: int, half: int) -> int:
    key = (conn.filename or f"memory:{id(conn)}", term)
    with _lock:
        cached = _counts.get(key)
        if cached is not None and size <= cached[1] * _REGROW:
            _counts.move_to_end(key)
            return cached[0]
    documents = sql.fts_documents_with(conn, f'"{term}"', half)
    with _lock:
        _counts[key] = (documents, size)
        _counts.move_to_end(key)
        while len(_counts) > _CACHE_LIMIT:
            _counts.popitem(last=False)
    return documents
