"""ADD / UPDATE / NOOP against real episodes and the real embedding model."""

from __future__ import annotations

from pathlib import Path

from processor.memory.dedupe import Candidate, Deduper, same_topic
from processor.memory.episode_store import EpisodeStore
from processor.store import open_store
from tests.support.jobs_fixtures import make_settings, query


def _candidate(summary: str, content: str, *, kind: str = "decision", entities: list[str] | None = None,
               project: str | None = "demo", scope: str = "project", source_type: str = "auto") -> Candidate:
    return Candidate(summary=summary, full_content=content, entities=entities or [], importance="normal", kind=kind,
                     scope=scope, source_type=source_type, session_id="s1", project=project)


def test_add_update_noop(engram_home: Path) -> None:
    settings = make_settings()
    deduper = Deduper(EpisodeStore(settings, open_store(settings.db_path)))
    wal = _candidate("The store uses SQLite WAL mode.", "We chose SQLite WAL mode so readers never block the writer.",
                     entities=["sqlite"])
    [added] = deduper.apply([wal])
    assert added.action == "add"

    # The same text again (a redone job): NOOP, the existing memory is touched.
    [again] = deduper.apply([wal])
    assert again.action == "noop" and again.episode_id == added.episode_id
    assert query(settings, "SELECT access_count FROM episodes WHERE id = ?", (added.episode_id,))[0][0] == 1

    # Same topic, new detail: a new version; the old row is kept with valid_to and superseded_by.
    newer = _candidate("The store uses SQLite WAL mode with synchronous NORMAL.",
                       "We chose SQLite WAL mode, with synchronous NORMAL, so readers never block the writer.",
                       entities=["sqlite", "pragma"])
    [updated] = deduper.apply([newer])
    assert updated.action == "update" and updated.previous_id == added.episode_id
    old = query(settings, "SELECT status, superseded_by, valid_to IS NOT NULL, full_content FROM episodes WHERE id = ?",
                (added.episode_id,))[0]
    assert old[:3] == ("superseded", updated.episode_id, 1) and "readers never block" in old[3]  # not overwritten
    new = query(settings, "SELECT status, full_content, entities, access_count FROM episodes WHERE id = ?",
                (updated.episode_id,))[0]
    assert new[0] == "active" and "synchronous NORMAL" in new[1] and "sqlite" in new[2] and new[3] == 2

    # Similar words, different aspect (another kind, other entities): ADD.
    other = _candidate("The store uses SQLite WAL mode, which broke on NFS.",
                       "WAL mode fails on network file systems; keep ENGRAM_HOME on a local disk.", kind="gotcha",
                       entities=["nfs"])
    [added2] = deduper.apply([other])
    assert added2.action == "add"

    # Another project never merges with this one's memories.
    [elsewhere] = deduper.apply([_candidate(newer.summary, newer.full_content + " (other repo)", project="other")])
    assert elsewhere.action == "add"
    # Verbatim rounds are never merged into.
    assert query(settings, "SELECT count(*) FROM episodes WHERE status = 'active'")[0][0] == 3
    deduper.conn.close()


def test_a_batch_is_deduplicated_within_itself(engram_home: Path) -> None:
    settings = make_settings()
    deduper = Deduper(EpisodeStore(settings, open_store(settings.db_path)))
    a = _candidate("Run ruff before each commit.", "The team runs ruff before each commit.", kind="convention")
    outcomes = deduper.apply([a, a, _candidate("Tests use real SQLite files.", "No mocks of the database.",
                                               kind="convention")])
    deduper.conn.close()
    assert [o.action for o in outcomes] == ["add", "noop", "add"]
    assert query(settings, "SELECT count(*) FROM episodes")[0][0] == 2


def test_same_topic_rule() -> None:
    assert same_topic("decision", ["a"], "decision", ["A", "b"])
    assert same_topic("decision", [], "decision", ["x"])
    assert same_topic("other", ["x"], "bugfix", [])
    assert not same_topic("decision", ["a"], "gotcha", ["a"])
    assert not same_topic("decision", ["a"], "decision", ["b"])


def test_near_identical_is_noop_but_a_changed_preference_is_an_update(engram_home: Path) -> None:
    settings = make_settings()
    deduper = Deduper(EpisodeStore(settings, open_store(settings.db_path)))
    wal = _candidate("The store uses SQLite WAL mode.", "We chose SQLite WAL mode so readers never block the writer.")
    [first] = deduper.apply([wal])
    [same] = deduper.apply([_candidate("The store uses SQLite WAL mode.",
                                       "We chose SQLite WAL mode so that readers never block the writer.")])
    assert same.action == "noop" and same.episode_id == first.episode_id
    [tabs] = deduper.apply([_candidate("User prefers tabs.", "The user prefers tabs over spaces.", kind="preference")])
    [spaces] = deduper.apply([_candidate("User prefers spaces.", "The user prefers spaces over tabs.",
                                         kind="preference")])
    deduper.conn.close()
    assert spaces.action == "update" and spaces.previous_id == tabs.episode_id
