"""Pending reviews: the curator merges and resolves them; `engram review` lists, walks, applies; memory_review."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from mcp import Client

from mcp_tools.server import build_server
from processor.jobs.queue import JobRunner
from processor.jobs.review_cli import walk
from processor.jobs.reviews import open_review, review_options
from processor.memory.episode_store import EpisodeStore
from processor.store import cold as cold_sql
from processor.store import open_store, write_transaction
from tests.conftest import run_engram
from tests.jobs.test_inquisitor import git, remember, repo  # noqa: F401 - the repo fixture
from tests.support.jobs_fixtures import drain, make_settings, now_ms, query


def _review(store: EpisodeStore, episode_id: str, project: str, question: str = "Is this memory still true?",
            replacements: tuple[tuple[str, str], ...] = ()) -> int:
    with write_transaction(store.conn):
        return open_review(store.conn, episode_id=episode_id, project=project, kind="inquisitor", question=question,
                           options=review_options(replacements), context="`drop_cache` no longer occurs",
                           commit=None, job_type="test")


def _states(settings) -> dict[int, tuple[str, str | None]]:
    return {r[0]: (r[1], r[2]) for r in query(settings, "SELECT id, state, resolution FROM reviews")}


def test_the_curator_merges_duplicates_and_resolves_the_obvious(engram_home: Path, repo: Path) -> None:  # noqa: F811
    settings = make_settings(cold_path=True)
    store = EpisodeStore(settings, open_store(settings.db_path))
    project = str(repo)
    fixed = remember(store, "Cache invalidation is done by `drop_cache` after each write.", repo)
    forgotten = remember(store, "Old notes about `parse_legacy` in src/old.py for the v1 importer.", repo)
    valid = remember(store, "The database is opened by `open_store` in src/store.py.", repo)
    renamed = remember(store, "Configuration is read by src/config.py at start.", repo)
    (repo / "src" / "store.py").write_text("def open_store(path):\n    return path\n")
    git(repo, "commit", "-q", "-am", "drop drop_cache")
    first = _review(store, fixed, project)
    # The same memory and kind again (e.g. two runs); and the same question without a memory.
    with write_transaction(store.conn):
        second = cold_sql.insert_review(store.conn, fixed, project, "inquisitor", "Is this memory still true?",
                                        review_options(), "again", None, now_ms())
        q1 = cold_sql.insert_review(store.conn, None, project, "question", "Keep  the tabs rule?", [], "", None,
                                    now_ms())
        q2 = cold_sql.insert_review(store.conn, None, project, "question", "keep the tabs rule?", [], "", None,
                                    now_ms() + 1)
    gone_review = _review(store, forgotten, project)
    store.forget(forgotten)
    cause_gone = _review(store, valid, project)  # open_store is still there: the cause is gone
    git(repo, "mv", "src/config.py", "src/settings.py")
    git(repo, "commit", "-q", "-m", "rename config.py")
    moved = _review(store, renamed, project)

    drain(JobRunner(settings, backend=None))
    states = _states(settings)
    assert states[first][0] == "open"  # drop_cache is really gone: a person decides
    assert states[second] == ("merged", f"same as review {first}")
    assert states[q1][0] == "open" and states[q2][0] == "merged"
    assert states[gone_review][0] == "dismissed" and "forgotten" in states[gone_review][1]
    assert states[cause_gone][0] == "resolved"
    assert query(settings, "SELECT status FROM episodes WHERE id = ?", (valid,))[0][0] == "active"
    assert states[moved][0] == "resolved" and "rewritten" in states[moved][1]
    new_id = query(settings, "SELECT superseded_by FROM episodes WHERE id = ?", (renamed,))[0][0]
    assert "src/settings.py" in query(settings, "SELECT full_content FROM episodes WHERE id = ?", (new_id,))[0][0]
    actions = {a[2] for a in cold_sql.actions(store.conn, "curator")}
    assert {"merge_review", "dismiss_review", "review_resolved", "resolve_review"} <= actions
    # Nothing changed since: the curator is not due again.
    runner = JobRunner(settings, backend=None)
    runner.wake()
    assert runner.run_until_idle() == 0
    store.conn.close()


def test_engram_review_lists_and_choose_applies_a_choice(engram_home: Path, repo: Path) -> None:  # noqa: F811
    settings = make_settings(cold_path=True)
    store = EpisodeStore(settings, open_store(settings.db_path))
    ep = remember(store, "Cache invalidation is done by `drop_cache` after each write.", repo)
    other = remember(store, "Sessions are flushed by `flush_all` every minute.", repo)
    review_id = _review(store, ep, str(repo))
    other_review = _review(store, other, str(repo), replacements=(("flush_all", "flush_sessions"),))
    store.conn.close()

    listed = json.loads(run_engram("review", "--list", "--json").stdout)
    assert [r["id"] for r in listed] == [review_id, other_review]
    assert listed[0]["options"][0]["action"] == "stale" and listed[1]["options"][0]["action"] == "rewrite"

    out = run_engram("review", str(review_id), "--choose", "1").stdout
    assert f"review {review_id} resolved" in out and "marked stale" in out
    assert query(settings, "SELECT status FROM episodes WHERE id = ?", (ep,))[0][0] == "stale"
    assert query(settings, "SELECT state, chosen, resolved_by FROM reviews WHERE id = ?", (review_id,))[0] == \
        ("resolved", 1, "person")
    assert query(settings, "SELECT type, state FROM jobs WHERE type = 'review'") == [("review", "done")]

    bad = run_engram("review", str(review_id), "--choose", "1", check=False)
    assert bad.returncode == 1 and "already resolved" in bad.stderr
    bad = run_engram("review", str(other_review), "--choose", "9", check=False)
    assert bad.returncode == 1 and "options 1 to 4" in bad.stderr

    # The terminal walk: an invalid answer, then option 1 (rewrite with the new name).
    answers = iter(["x", "1"])
    out_text = io.StringIO()
    assert walk(settings, read=lambda prompt: next(answers), out=out_text) == 1
    assert "1. Rewrite it (flush_all → flush_sessions)" in out_text.getvalue()
    new_id = query(settings, "SELECT superseded_by FROM episodes WHERE id = ?", (other,))[0][0]
    assert "flush_sessions" in query(settings, "SELECT full_content FROM episodes WHERE id = ?", (new_id,))[0][0]
    assert walk(settings, read=lambda prompt: "q", out=io.StringIO()) == 0


def test_a_review_whose_memory_was_forgotten_is_dismissed(engram_home: Path, repo: Path) -> None:  # noqa: F811
    settings = make_settings(cold_path=True)
    store = EpisodeStore(settings, open_store(settings.db_path))
    ep = remember(store, "Cache invalidation is done by `drop_cache` after each write.", repo)
    review_id = _review(store, ep, str(repo))
    store.forget(ep)
    store.conn.close()
    out = run_engram("review", str(review_id), "--choose", "1").stdout
    assert "dismissed" in out and "forgotten meanwhile" in out


@pytest.mark.anyio
async def test_memory_review_lists_the_open_reviews(engram_home: Path, repo: Path) -> None:  # noqa: F811
    settings = make_settings(cold_path=True)
    store = EpisodeStore(settings, open_store(settings.db_path))
    ep = remember(store, "Cache invalidation is done by `drop_cache` after each write.", repo)
    review_id = _review(store, ep, str(repo))
    store.conn.close()
    async with Client(build_server(settings, cwd=str(repo))) as client:
        result = await client.call_tool("memory_review", {})
    assert not result.is_error
    assert result.structured_content["reviews"][0]["id"] == review_id
    assert result.structured_content["reviews"][0]["options"][0].startswith("Mark it stale")
    assert "engram review ID --choose N" in result.content[0].text
