"""Consolidation sweeps, the context check, stats, dry run and mock on a seeded store; the statuses migration."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import apsw
import numpy as np
import pytest

from processor.jobs import consolidation
from processor.jobs.backends.base import LLMRequest, LLMResponse
from processor.jobs.backends.mock_backend import MockBackend
from processor.jobs.base import JobContext
from processor.jobs.costs import record_call
from processor.jobs.planning import dry_run, run_once
from processor.jobs.queue import JobRunner
from processor.jobs.stats import collect_stats
from processor.memory.episode_store import EpisodeStore
from processor.memory.identity import content_hash
from processor.status import collect_status
from processor.store import cold as cold_sql
from processor.store import episodes as sql
from processor.store import migrations, open_store, write_transaction
from processor.store import origins as origins_sql
from processor.store.episodes import NewEpisode
from processor.store.jobs import LLMCall
from tests.conftest import run_engram
from tests.jobs.test_inquisitor import git, remember, repo  # noqa: F401 - the repo fixture
from tests.support.jobs_fixtures import add_messages, conversation, drain, make_settings, now_ms, query

PROJECT = "/p/app"
DIM = 384
DAY = 86_400_000


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def seed_store(settings, rng: np.random.Generator) -> dict[str, list[str]]:
    """Two clusters of related memories (cosine ~0.8), near and exact duplicates, old verbatim pieces."""
    conn = open_store(settings.db_path)
    now = now_ms()
    made: dict[str, list[str]] = {"related": [], "near": [], "exact": [], "old_verbatim": [], "kept_verbatim": []}
    rows: list[tuple[str, str, np.ndarray, str, int, int]] = []
    for c in range(2):
        center = unit(rng.standard_normal(DIM))
        for m in range(5):
            v = unit(center + 0.5 * unit(rng.standard_normal(DIM)))
            rows.append(("related", f"cluster {c} fact {m}", v, "auto", now - (20 - m) * DAY, 0))
            if m < 2:  # a near duplicate written later
                rows.append(("near", f"cluster {c} fact {m} again", unit(v + 0.05 * unit(rng.standard_normal(DIM))),
                             "auto", now - (10 - m) * DAY, 0))
    rows.append(("exact", "cluster 0 fact 0", rows[0][2], "auto", now - DAY, 0))  # the same text again
    for i in range(6):
        rows.append(("old_verbatim", f"an old conversation round {i}", unit(rng.standard_normal(DIM)), "verbatim",
                     now - 90 * DAY, 0))
    rows.append(("kept_verbatim", "an old round someone expanded", unit(rng.standard_normal(DIM)), "verbatim",
                 now - 90 * DAY, 3))
    with write_transaction(conn):
        for n, (group, text, vector, source, created, access) in enumerate(rows):
            eid = f"ep_{group}_{n:03d}"
            sql.insert_episode(conn, NewEpisode(eid, "s1", PROJECT, "project", text, [], "normal",
                                                "other" if source == "verbatim" else "fact", source, text, [],
                                                content_hash(text), created), vector.tobytes())
            if access:
                conn.execute("UPDATE episodes SET access_count = ? WHERE id = ?", (access, eid))
            made[group].append(eid)
    conn.close()
    return made


def active(settings) -> int:
    return query(settings, "SELECT count(*) FROM episodes WHERE status = 'active'")[0][0]


class ConsolidatingLLM(MockBackend):
    """A fake LLM that merges the first two memories it is given, and names one it was not given."""

    def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        ids = [line[4:] for line in request.prompt.splitlines() if line.startswith("id: ")]
        answer = {"groups": [{"ids": ids[:2] + ["ep_not_given"], "summary": "Merged: " + ids[0],
                              "full_content": "One memory in place of two related ones."}]}
        return LLMResponse(json.dumps(answer), 100, 20, "mock")


def test_a_sweep_lowers_active_memories_and_keeps_every_original(engram_home: Path) -> None:
    settings = make_settings(cold_path=True, max_memories_per_project=10, sweep_pressure=0.7)
    made = seed_store(settings, np.random.default_rng(7))
    total = query(settings, "SELECT count(*) FROM episodes")[0][0]
    before = active(settings)

    drain(JobRunner(settings, backend=None))  # no LLM: pass 1 only
    statuses = dict(query(settings, "SELECT id, status FROM episodes"))
    for eid in made["near"][1:] + made["exact"] + made["kept_verbatim"]:
        assert statuses[eid] == "active", eid  # the newest of each duplicate group stays
    assert statuses[made["near"][0]] == "superseded"  # fact 0, its near duplicate and its exact copy: one
    for eid in (made["related"][0], made["related"][1], made["related"][5], made["related"][6]):
        assert statuses[eid] == "superseded"
    for eid in made["old_verbatim"]:
        assert statuses[eid] == "archived"
    assert all(statuses[e] == "active" for e in made["related"][2:5] + made["related"][7:])
    after = active(settings)
    assert after == before - 5 - 6  # four older duplicates + fact 0's near copy; six old rounds
    # Nothing deleted; a merged memory points at the one that replaced it, and still expands.
    assert query(settings, "SELECT count(*) FROM episodes")[0][0] == total
    pointer = query(settings, "SELECT superseded_by FROM episodes WHERE id = ?", (made["related"][0],))[0][0]
    assert pointer == made["exact"][0]
    store = EpisodeStore(settings, open_store(settings.db_path))
    assert store.expand(made["related"][1]).superseded_by == made["near"][1]
    [(merged, archived)] = query(settings, "SELECT merged, archived FROM sweeps WHERE pass = 1")
    assert (merged, archived) == (5, 6)
    assert len(cold_sql.actions(store.conn, "sweep")) == 11
    store.conn.close()

    # Pass 2, with an LLM: related memories consolidated into one; the id it was not given is ignored.
    llm = ConsolidatingLLM()
    drain(JobRunner(settings, backend=llm))
    assert llm.requests and all(r.schema_name == "engram_consolidation" for r in llm.requests)
    new = query(settings, "SELECT id, full_content FROM episodes WHERE summary LIKE 'Merged: %'")
    assert len(new) == len(llm.requests) >= 1
    merged_away = query(settings, "SELECT count(*) FROM episodes WHERE superseded_by = ?", (new[0][0],))[0][0]
    assert merged_away == 2
    assert active(settings) == after - len(new)
    assert query(settings, "SELECT count(*) FROM episodes")[0][0] == total + len(new)
    stats = collect_stats(open_store(settings.db_path))
    assert stats["sweeps"]["merged"] == 5 and stats["sweeps"]["archived"] == 6
    assert stats["sweeps"]["consolidated"] == len(new)
    assert stats["memories"][PROJECT]["fact"]["superseded"] >= 5
    assert stats["spend_by_job_type"]["consolidate"]["calls"] == len(llm.requests)
    assert json.loads(run_engram("stats", "--json").stdout)["sweeps"]["sweeps"] >= 2


def test_the_budget_stops_pass_2(engram_home: Path) -> None:
    settings = make_settings(cold_path=True, max_memories_per_project=10, daily_budget_usd=0.01)
    seed_store(settings, np.random.default_rng(3))
    conn = open_store(settings.db_path)
    record_call(conn, LLMCall(None, "extract", "mock", "paid", now_ms(), 10, 100, 10, 0.02, True, None))
    conn.close()
    llm = ConsolidatingLLM()
    runner = JobRunner(settings, backend=llm)
    runner.open()
    for _ in range(2):  # the sweep, then (pressure still high) pass 2
        runner.wake()
        runner.run_until_idle()
    assert llm.requests == []
    assert query(settings, "SELECT state FROM jobs WHERE type = 'sweep'") == [("done",)]
    state, error = query(settings, "SELECT state, last_error FROM jobs WHERE type = 'consolidate'")[0]
    assert state == "pending" and "budget" in error
    runner.close()


def test_context_check_measures_and_makes_the_sweep_stricter(engram_home: Path, repo: Path) -> None:  # noqa: F811
    settings = make_settings(cold_path=True, max_memories_per_project=10, sweep_pressure=0.7,
                             context_budget_tokens=100)
    add_messages(settings, "s1", conversation(4), project=PROJECT)
    conn = open_store(settings.db_path)
    with write_transaction(conn):
        for i in range(6):  # pressure 0.6: under 0.7
            text = f"Important decision number {i} about the payment service retries"
            sql.insert_episode(conn, NewEpisode(f"ep_d{i}", "s1", PROJECT, "project", text, [], "high", "decision",
                                                "auto", text, [], content_hash(text), now_ms()),
                               unit(np.random.default_rng(i).standard_normal(DIM)).tobytes())
            origins_sql.set_origin(conn, f"ep_d{i}", "decision")  # the user's decisions: what the digest tells
    conn.close()
    settings.recollections_dir.mkdir(parents=True, exist_ok=True)
    (settings.recollections_dir / "s1.json").write_text(json.dumps({"messageUuid": "u", "timestamp": 1, "bites": [
        {"id": f"ep_d{i}", "bite": f"Important decision number {i}", "date": "2026-01-01", "importance": "high"}
        for i in range(3)]}))
    drain(JobRunner(settings, backend=None))
    [(digest_tokens, bites, messages, session_tokens, ratio)] = query(
        settings, "SELECT digest_tokens, bites_per_message, messages_per_session, session_tokens, ratio "
                  "FROM context_checks")
    assert digest_tokens > 50 and bites == 3 and messages == 4
    assert session_tokens > digest_tokens and ratio == pytest.approx(session_tokens / 100)
    status = collect_status(settings)
    assert status["context"]["session_tokens"] == session_tokens
    assert query(settings, "SELECT count(*) FROM jobs WHERE type = 'sweep'")[0][0] == 0  # pressure 0.6 < 0.7
    # Over the budget: the sweep's pressure line drops from 0.7 to 0.5, so pressure 0.6 now queues one.
    drain(JobRunner(settings, backend=None))
    assert query(settings, "SELECT count(*) FROM jobs WHERE type = 'sweep'")[0][0] == 1


def test_dry_run_names_the_cold_path_jobs_and_mock_answers_them(engram_home: Path, repo: Path) -> None:  # noqa: F811
    settings = make_settings(cold_path=True, max_memories_per_project=1, extractor="verbatim")
    store = EpisodeStore(settings, open_store(settings.db_path))
    remember(store, "Cache invalidation is done by `drop_cache` after each write.", repo)
    remember(store, "The database is opened by `open_store` in src/store.py.", repo)
    store.conn.close()
    add_messages(settings, "s1", conversation(2), project=str(repo))
    (repo / "src" / "store.py").write_text("def open_store(path):\n    return path\n")
    git(repo, "commit", "-q", "-am", "drop drop_cache")
    out = io.StringIO()
    planned = {p.type for p in dry_run(settings, out)}
    text = out.getvalue()
    assert {"inquisitor", "context_check", "sweep"} <= planned
    assert "would queue inquisitor: 2 memories of" in text and "would queue sweep: memory pressure" in text
    assert "would queue context_check" in text
    assert query(settings, "SELECT count(*) FROM jobs")[0][0] == 0  # a dry run writes nothing

    # --mock: the inquisitor's uncertain memory gets the canned "unsure", so a person decides.
    run_once(settings, mock=True, out=io.StringIO())
    reviews = query(settings, "SELECT context FROM reviews WHERE state = 'open'")
    assert len(reviews) == 1 and "mock" in reviews[0][0]


def test_the_statuses_migration_keeps_rows_and_text_search(tmp_path: Path) -> None:
    conn = apsw.Connection(str(tmp_path / "old.db"))
    migrations.applied_migrations(conn)
    for migration in migrations.MIGRATIONS[:8]:
        migration(conn)
        conn.execute("INSERT INTO schema_migrations(name, applied_at) VALUES (?, 0)", (migration.__name__,))
    for eid, status, by in (("ep_new", "active", None), ("ep_old", "stale", "ep_new"), ("ep_gone", "forgotten", None)):
        conn.execute("INSERT INTO episodes(id, project, summary, full_content, content_hash, created_at, accessed_at, "
                     "valid_from, superseded_by, status) VALUES (?, 'p', ?, ?, ?, 1, 1, 1, ?, ?)",
                     (eid, f"kafka topic {eid}", f"kafka topic {eid}", eid, by, status))
    rowids = dict(conn.execute("SELECT id, rowid FROM episodes").fetchall())
    applied = migrations.migrate(conn)
    assert applied[:3] == ["m009_application_id", "m010_session_opt_out", "m011_cold_path"]
    assert dict(conn.execute("SELECT id, status FROM episodes").fetchall()) == {
        "ep_new": "active", "ep_old": "superseded", "ep_gone": "forgotten"}
    assert dict(conn.execute("SELECT id, rowid FROM episodes").fetchall()) == rowids
    assert len(sql.fts_candidates(conn, '"kafka"', 10)) == 3
    sql.insert_episode(conn, NewEpisode("ep_more", None, "p", "project", "kafka again", [], "normal", "fact", "auto",
                                        "kafka again", [], "h", 2), None)
    assert len(sql.fts_candidates(conn, '"kafka"', 10)) == 4
    conn.execute("UPDATE episodes SET status = 'archived' WHERE id = 'ep_more'")
    with pytest.raises(apsw.ConstraintError):
        conn.execute("UPDATE episodes SET status = 'bogus' WHERE id = 'ep_more'")
    conn.close()


def test_a_long_sweep_commits_in_chunks_makes_way_between_them_and_resumes_after_a_crash(engram_home: Path) -> None:
    """Pass 1 never holds the write lock long: it commits WRITE_CHUNK changes at a time, each with its
    recorded actions, and makes way for the hot path between chunks with no transaction open. Killed
    half-way, it leaves consistent rows; the next sweep finishes the rest and nothing is done twice."""
    settings = make_settings(cold_path=True, max_memories_per_project=10)
    rng = np.random.default_rng(3)
    old = now_ms() - 90 * DAY
    conn = open_store(settings.db_path)
    total = 2 * consolidation.WRITE_CHUNK + 50
    with write_transaction(conn):
        for n in range(total):
            text = f"an old conversation round number {n}"
            sql.insert_episode(conn, NewEpisode(f"ep_old_{n:04d}", "s1", PROJECT, "project", text, [], "normal",
                                                "other", "verbatim", text, [], content_hash(text), old + n),
                               unit(rng.standard_normal(DIM)).tobytes())

    def archived() -> int:
        return conn.execute("SELECT count(*) FROM episodes WHERE status = 'archived'").fetchone()[0]

    store = EpisodeStore(settings, open_store(settings.db_path))
    seen: list[int] = []

    def make_way(crash_at: int | None) -> None:
        assert not store.conn.in_transaction  # never while holding the write lock
        seen.append(archived())
        if crash_at is not None and archived() >= crash_at:
            raise RuntimeError("killed")

    def context(crash_at: int | None) -> JobContext:
        return JobContext(None, settings, store.conn, store, None, threading.Event(),  # type: ignore[arg-type]
                          lambda *a: None, lambda: make_way(crash_at))

    with pytest.raises(RuntimeError, match="killed"):
        consolidation.run_pass1(context(2 * consolidation.WRITE_CHUNK), PROJECT)
    assert seen[-3:] == [0, consolidation.WRITE_CHUNK, 2 * consolidation.WRITE_CHUNK]  # one call per chunk
    assert archived() == 2 * consolidation.WRITE_CHUNK
    assert len(cold_sql.actions(conn, "sweep")) == 2 * consolidation.WRITE_CHUNK  # each chunk with its actions
    assert query(settings, "SELECT count(*) FROM sweeps") == [(0,)]  # no sweep recorded: it runs again

    result = consolidation.run_pass1(context(None), PROJECT)
    assert result["archived"] == 50 and archived() == total
    assert len(cold_sql.actions(conn, "sweep")) == total  # nothing archived or recorded twice
    assert query(settings, "SELECT archived FROM sweeps WHERE pass = 1") == [(50,)]
    store.conn.close()
    conn.close()


def _steps_to_migrate_from_before_the_statuses(tmp_path: Path, n: int) -> int:
    """SQLite VM steps the migrations from m009 on take over a store of n episodes (deterministic)."""
    conn = apsw.Connection(str(tmp_path / f"old-{n}.db"))
    conn.execute("PRAGMA foreign_keys = ON")  # as every Engram connection has it (apsw.bestpractice)
    migrations.applied_migrations(conn)
    for migration in migrations.MIGRATIONS[:8]:
        migration(conn)
        conn.execute("INSERT INTO schema_migrations(name, applied_at) VALUES (?, 0)", (migration.__name__,))
    with conn:
        conn.executemany("INSERT INTO episodes(id, project, summary, full_content, content_hash, created_at, "
                         "accessed_at, valid_from) VALUES (?, 'p', 's', 'c', ?, 1, 1, 1)",
                         [(f"ep_{i}", f"h{i}") for i in range(n)])
    steps = [0]

    def count() -> bool:
        steps[0] += 1
        return False  # go on

    conn.set_progress_handler(count, 100)
    migrations.migrate(conn)
    conn.close()
    return steps[0]


def test_upgrading_a_large_store_costs_time_in_proportion_to_its_size(tmp_path: Path) -> None:
    """m011 rebuilds the episodes table. With foreign keys on, dropping the old table deletes each row and
    looked for rows referring to it by a full scan: quadratic, hours for a 100k-episode store at start-up."""
    small = _steps_to_migrate_from_before_the_statuses(tmp_path, 400)
    large = _steps_to_migrate_from_before_the_statuses(tmp_path, 1600)
    assert large < 6 * small, (small, large)  # 4x the rows: ~4x the work, not ~16x
