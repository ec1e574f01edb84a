"""Which memories a consolidation sweep merges, archives or hands to the LLM: seed 003's heuristics, no model.

Pass 1 (cheap, no LLM):
- exact duplicates (the same content hash) and near duplicates (cosine >= a threshold) of the same
  class (verbatim rounds with verbatim rounds; memories with memories of the same kind) are merged into
  the newest. Near duplicates are found with random-hyperplane LSH: each vector gets ``TABLES`` hashes of
  ``BITS`` sign bits; only vectors sharing a bucket are compared, so 10k memories cost a few thousand
  small matrix products instead of 50 million pairs;
- old, normal-importance, never-expanded verbatim pieces are archived.
Pass 2 groups related memories (cosine >= a lower threshold) into batches of 10-20 for one LLM call each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

TABLES = 10
BITS = 12
MAX_DISTANCE = 256  # same-bucket rows compared at most this far apart in sorted order


@dataclass(frozen=True)
class Item:
    """What pass 1 knows of one active memory."""

    id: str
    created_at: int
    importance: str
    kind: str
    verbatim: bool
    access_count: int
    content_hash: str


@dataclass(frozen=True)
class Pass1Plan:
    merges: list[tuple[list[int], int]]  # (indices merged away, index of the newest they merge into)
    archive: list[int]
    compared: int                         # pairs whose cosine was computed

    @property
    def merged(self) -> int:
        return sum(len(old) for old, _ in self.merges)


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _class_of(item: Item) -> str:
    return "verbatim" if item.verbatim else f"memory:{item.kind}"


def near_duplicate_pairs(vectors: np.ndarray, classes: Sequence[str], threshold: float, *, seed: int = 0,
                         tables: int = TABLES, bits: int = BITS,
                         between: Callable[[], object] | None = None) -> tuple[set[tuple[int, int]], int]:
    """(pairs i < j of the same class with cosine >= threshold, pairs compared), by LSH buckets.

    Per table, rows are sorted by bucket code; rows d apart in that order share a bucket when their codes
    are equal, so every same-bucket pair is reached by one vectorised step per distance d (up to
    MAX_DISTANCE: in a degenerate bucket larger than that, only neighbours that close are compared).
    between: called after each table (the job worker makes way for the hot path there).
    """
    n, dim = vectors.shape
    if n < 2:
        return set(), 0
    planes = np.random.default_rng(seed).standard_normal((dim, tables * bits)).astype(np.float32)
    signs = (vectors @ planes) > 0
    weights = (1 << np.arange(bits, dtype=np.int64))
    class_ids = {c: k for k, c in enumerate(dict.fromkeys(classes))}
    class_arr = np.array([class_ids[c] for c in classes], dtype=np.int64)
    found: list[np.ndarray] = []
    compared = 0
    for t in range(tables):
        codes = signs[:, t * bits:(t + 1) * bits].astype(np.int64) @ weights + (class_arr << bits)
        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
        for d in range(1, min(MAX_DISTANCE, n - 1) + 1):
            same = np.flatnonzero(sorted_codes[:-d] == sorted_codes[d:])
            if not len(same):
                break  # no bucket holds d + 1 rows: none holds more
            a, b = order[same], order[same + d]
            compared += len(same)
            sims = np.einsum("ij,ij->i", vectors[a], vectors[b])
            hit = sims >= threshold
            if hit.any():
                lo, hi = np.minimum(a[hit], b[hit]), np.maximum(a[hit], b[hit])
                found.append(lo * n + hi)
        if between is not None:
            between()
    if not found:
        return set(), compared
    keys = np.unique(np.concatenate(found))
    return {(int(k // n), int(k % n)) for k in keys}, compared


def plan_pass1(items: Sequence[Item], vectors: np.ndarray | None, *, threshold: float, archive_before_ms: int,
               seed: int = 0, between: Callable[[], object] | None = None) -> Pass1Plan:
    """Merges (exact and near duplicates, into the newest) and archivals for one project's active memories.

    vectors: unit vectors aligned with items (rows of zeros for items without one), or None.
    """
    n = len(items)
    uf = _UnionFind(n)
    by_hash: dict[tuple[str, str], int] = {}
    for i, item in enumerate(items):
        first = by_hash.setdefault((_class_of(item), item.content_hash), i)
        if first != i:
            uf.union(first, i)
    compared = 0
    if vectors is not None and n > 1:
        pairs, compared = near_duplicate_pairs(vectors, [_class_of(i) for i in items], threshold, seed=seed,
                                               between=between)
        for a, b in pairs:
            uf.union(a, b)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(uf.find(i), []).append(i)
    merges: list[tuple[list[int], int]] = []
    merged: set[int] = set()
    for members in groups.values():
        if len(members) < 2:
            continue
        keeper = max(members, key=lambda i: (items[i].created_at, i))
        old = [i for i in members if i != keeper]
        merges.append((old, keeper))
        merged.update(old)
    archive = [i for i, item in enumerate(items)
               if i not in merged and item.verbatim and item.importance == "normal" and item.access_count == 0
               and item.created_at < archive_before_ms]
    return Pass1Plan(merges, archive, compared)


def related_batches(vectors: np.ndarray, created: Sequence[int], threshold: float, batch: int,
                    max_batches: int, max_seeds: int = 500) -> list[list[int]]:
    """Batches of 2..batch related memories (cosine >= threshold to the batch's newest), newest first.

    At most max_seeds of the newest memories start a batch: each costs one pass over the matrix.
    """
    n = len(created)
    order = sorted(range(n), key=lambda i: created[i], reverse=True)[:max_seeds]
    taken = np.zeros(n, dtype=bool)
    batches: list[list[int]] = []
    for seed_index in order:
        if taken[seed_index]:
            continue
        sims = vectors @ vectors[seed_index]
        sims[taken] = -1.0
        candidates = np.flatnonzero(sims >= threshold)
        if len(candidates) < 2:
            continue
        best = candidates[np.argsort(-sims[candidates])][:batch].tolist()
        taken[best] = True
        batches.append(best)
        if len(batches) >= max_batches:
            break
    return batches
