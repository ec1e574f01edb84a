"""Synthetic episode stores for the latency benchmarks (search, freshness).

Text is drawn from pseudo-words with a Zipf distribution, so FTS5 sees a realistic
spread of common and rare terms; vectors are random unit rows.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from processor.store import episodes as sql
from processor.store import open_store, write_transaction
from processor.store.episodes import NewEpisode

PROJECTS = 20
BATCH = 5_000
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def pseudo_words(rng: np.random.Generator, size: int) -> list[str]:
    """Distinct pseudo-words of 2-4 syllables, sorted."""
    words: set[str] = set()
    while len(words) < size:
        lengths = rng.integers(2, 5, size)
        picks = rng.integers(0, len(_SYLLABLES), (size, 4))
        words.update("".join(_SYLLABLES[p] for p in row[:n]) for row, n in zip(picks, lengths, strict=True))
    return sorted(words)[:size]


def zipf_words(rng: np.random.Generator, words: np.ndarray, count: int, skip: int = 0) -> np.ndarray:
    """`count` words drawn with probability ~ 1/rank, leaving out the `skip` most frequent."""
    ranks = np.arange(skip + 1, len(words) + 1, dtype=np.float64)
    p = 1.0 / ranks
    return words[skip + rng.choice(len(ranks), size=count, p=p / p.sum())]


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    m = rng.standard_normal((n, dim), dtype=np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return m


def build_store(db: Path, n: int, dim: int, model_id: str, rng: np.random.Generator, words: np.ndarray, *,
                varied: bool = False) -> tuple[float, np.ndarray]:
    """N episodes over PROJECTS projects in a fresh store; returns (seconds, their vectors).

    varied: every 200th episode is global and every 40th important, as in a real store.
    """
    conn = open_store(db)
    vectors = unit_rows(rng, n, dim)
    lengths = rng.integers(40, 120, n)
    text = zipf_words(rng, words, int(lengths.sum()))
    ends = np.cumsum(lengths)
    started = time.perf_counter()
    stamp = int(time.time() * 1000)
    with write_transaction(conn):
        sql.set_meta(conn, "embedding_model", model_id)
        sql.set_meta(conn, "embedding_dim", str(dim))
    for start in range(0, n, BATCH):
        with write_transaction(conn):
            for i in range(start, min(start + BATCH, n)):
                content = " ".join(text[ends[i] - lengths[i]:ends[i]])
                sql.insert_episode(conn, NewEpisode(
                    id=f"ep_{i:016x}", session_id=f"s{i // 50}", project=f"/bench/project-{i % PROJECTS}",
                    scope="global" if varied and i % 200 == 0 else "project", summary=content[:160], entities=[],
                    importance="high" if varied and i % 40 == 0 else "normal", kind="other",
                    source_type="verbatim", full_content=content, source_uuids=[f"u{i}"], content_hash=f"h{i}",
                    created_at=stamp - int(rng.integers(0, 90 * 86_400_000)),
                ), vectors[i].tobytes())
    seconds = time.perf_counter() - started
    conn.close()
    return seconds, vectors
