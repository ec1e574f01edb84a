"""Query terms held by half the store are left out of BM25: same order, bounded cost (a large real store)."""

from __future__ import annotations

from pathlib import Path

import apsw

from processor.memory import common_terms
from processor.memory.search import VectorIndex, search_episodes
from processor.store import episodes as sql
from processor.store import open_store, write_transaction
from processor.store.episodes import NewEpisode

SIZE = common_terms.LARGE_STORE + 500


def _store(path: Path, size: int) -> apsw.Connection:
    conn = open_store(path)
    with write_transaction(conn):
        for i in range(size):
            # "deploy" is in every episode; "websocket" in every 97th; "flaky" in three.
            words = ["deploy", "notes", f"item{i}"]
            if i % 97 == 0:
                words += ["websocket"] * (1 + i % 3)
            if i in (5, 600, 1200):
                words.append("flaky")
            content = " ".join(words)
            sql.insert_episode(conn, NewEpisode(
                id=f"ep_{i:016x}", session_id="s", project="/p", scope="project", summary=content,
                entities=[], importance="normal", kind="other", source_type="verbatim", full_content=content,
                source_uuids=[f"u{i}"], content_hash=f"h{i}", created_at=1_700_000_000_000), None)
    return conn


def _ids(conn: apsw.Connection, query: str) -> list[str]:
    hits = search_episodes(conn, VectorIndex(4), None, query, limit=10, project="/p", now_ms=1_700_000_000_000)
    return [h.episode.id for h in hits]


def test_a_term_in_every_episode_changes_nothing_but_is_not_scored(tmp_path: Path) -> None:
    conn = _store(tmp_path / "big.db", SIZE)
    assert common_terms.selective_terms(conn, ["deploy", "websocket", "flaky"]) == ["websocket", "flaky"]
    assert _ids(conn, "deploy websocket") == _ids(conn, "websocket")
    assert set(_ids(conn, "flaky deploy")[:3]) == {f"ep_{i:016x}" for i in (5, 600, 1200)}
    # Only common terms: no lexical signal at all rather than an order by how often "deploy" occurs.
    assert common_terms.selective_terms(conn, ["deploy", "notes"]) == []


def test_counting_stops_at_half_the_store(tmp_path: Path) -> None:
    conn = _store(tmp_path / "big.db", SIZE)
    half = (sql.episode_rowid_bound(conn) + 1) // 2
    assert sql.fts_documents_with(conn, '"deploy"', half) == half
    assert sql.fts_documents_with(conn, '"websocket"', half) == len(range(0, SIZE, 97))


def test_a_small_store_keeps_every_term(tmp_path: Path) -> None:
    conn = _store(tmp_path / "small.db", 50)
    assert common_terms.selective_terms(conn, ["deploy", "websocket"]) == ["deploy", "websocket"]
