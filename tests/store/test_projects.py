"""The SQL of project identity: folders and roots remembered, the lookups the hooks read with the stdlib driver,
and each part of a merge (failure signatures, routines, duplicates) on a real SQLite file."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import apsw
import pytest

from processor.memory.identity import content_hash
from processor.redaction import redact
from processor.store import failures as failures_sql
from processor.store import open_store, write_transaction
from processor.store import projects as projects_sql
from processor.store.episodes import NewEpisode, insert_episode


@pytest.fixture
def conn(tmp_path: Path) -> apsw.Connection:
    connection = open_store(tmp_path / "engram.db")
    yield connection
    connection.close()


def memory(conn: apsw.Connection, episode_id: str, project: str, text: str, created: int,
           source_type: str = "auto") -> None:
    insert_episode(conn, NewEpisode(episode_id, None, project, "project", redact(text), [], "normal", "gotcha",
                                    source_type, redact(text), [], content_hash(text), created), None)


def test_a_missing_folder_resolves_through_itself_or_a_checkout_that_held_it_never_a_plain_parent(
        conn: apsw.Connection) -> None:
    with write_transaction(conn):
        projects_sql.add_root(conn, "/code/app", "/code/app", None, 1)
        projects_sql.add_root(conn, "/home/me", "/home/me", None, 1)
        projects_sql.add_path(conn, "/wt/feature", "/code/app", True, 1)
        projects_sql.add_path(conn, "/wt/feature/api", "/code/app", False, 1)
        projects_sql.add_path(conn, "/home/me", "/home/me", False, 1)  # a session run outside any repository
    assert projects_sql.project_of_path(conn, "/wt/feature/api") == "/code/app"
    assert projects_sql.project_of_path(conn, "/wt/feature/docs/deep") == "/code/app"  # under the checkout
    assert projects_sql.project_of_path(conn, "/wt/feature-2") is None  # a sibling, not under it
    assert projects_sql.project_of_path(conn, "/home/me/elsewhere") is None  # a plain folder holds nothing below it
    with write_transaction(conn):  # a folder reused for another repository: the latest sighting wins
        projects_sql.add_root(conn, "/code/other", "/code/other", None, 2)
        projects_sql.add_path(conn, "/wt/feature", "/code/other", True, 2)
    assert projects_sql.project_of_path(conn, "/wt/feature/docs") == "/code/other"


def test_a_clone_joins_the_project_first_seen_with_its_remote(conn: apsw.Connection) -> None:
    with write_transaction(conn):
        assert projects_sql.add_root(conn, "/a/app", "/a/app", redact("github.com/o/app"), 1) == "/a/app"
        project = projects_sql.project_of_remote(conn, "github.com/o/app")
        assert projects_sql.add_root(conn, "/b/app", project, redact("github.com/o/app"), 2) == "/a/app"
        # Seen again, a root keeps the project it was first remembered with.
        assert projects_sql.add_root(conn, "/b/app", "/b/app", redact("github.com/o/app"), 3) == "/a/app"
    assert projects_sql.project_of_root(conn, "/b/app") == "/a/app"


def test_the_session_start_hook_reads_the_lookup_with_the_stdlib_driver_and_an_old_store_answers_none(
        tmp_path: Path, conn: apsw.Connection) -> None:
    with write_transaction(conn):
        projects_sql.add_root(conn, "/b/app", "/a/app", None, 1)
    reader = sqlite3.connect(f"file:{tmp_path / 'engram.db'}?mode=ro", uri=True)
    try:
        assert projects_sql.project_for(reader, "/b/app/src", "/b/app") == "/a/app"
        assert projects_sql.project_for(reader, "/c/x", "/c/x") is None
    finally:
        reader.close()
    old = sqlite3.connect(tmp_path / "old.db")
    try:
        assert projects_sql.project_for(old, "/b/app", "/b/app") is None  # no such table: not migrated yet
    finally:
        old.close()


def test_a_merge_joins_failure_signatures_keeps_one_routine_and_supersedes_copies(conn: apsw.Connection) -> None:
    signature = ["bash pytest command not found"]
    with write_transaction(conn):
        memory(conn, "ep_fix_new", "/repo", "Run pytest as .venv/bin/pytest", 100)
        memory(conn, "ep_fix_old", "/wt/one", "Run pytest as .venv/bin/pytest", 50)  # the same words: a copy
        memory(conn, "ep_other", "/wt/one", "The API listens on port 8080", 60)
        memory(conn, "ep_round_a", "/repo", "user: run the tests", 10, "verbatim")
        memory(conn, "ep_round_b", "/wt/one", "user: run the tests", 11, "verbatim")  # a round: never a copy
        memory(conn, "ep_routine_new", "/repo", "Close-out routine: make lint", 100)
        memory(conn, "ep_routine_old", "/wt/one", "Close-out routine: make test", 40)
        conn.execute("INSERT INTO meta(key, value) VALUES ('routine:/repo', 'ep_routine_new'), "
                     "('routine:/wt/one', 'ep_routine_old')")
        new = failures_sql.record(conn, "/repo", "fail:pytest", "cmd:pytest", signature, "s-new", 300, None)
        old = failures_sql.record(conn, "/wt/one", "fail:pytest", "cmd:pytest", signature, "s-old", 100, None)
        failures_sql.set_memory(conn, old.id, "ep_fix_old", redact("use .venv/bin/pytest"))
        failures_sql.record(conn, "/wt/one", "fail:git", "cmd:git push", ["no upstream branch"], "s-old", 120, None)
        projects_sql.move_rows(conn, "/wt/one", "/repo")
        projects_sql.merge_failures(conn, "/wt/one", "/repo")
        projects_sql.merge_routines(conn, "/wt/one", "/repo", 500)
        assert projects_sql.drop_duplicates(conn, "/repo", 500) == 1
    rows = {r[0]: r[1:] for r in conn.execute("SELECT id, status, superseded_by FROM episodes")}
    # The oldest copy stays; the newer one expands to it; rounds stay; the old project's routine is superseded.
    assert rows["ep_fix_old"] == ("active", None) and rows["ep_fix_new"] == ("superseded", "ep_fix_old")
    assert rows["ep_round_a"][0] == rows["ep_round_b"][0] == "active"
    assert rows["ep_routine_old"] == ("superseded", "ep_routine_new") and rows["ep_routine_new"][0] == "active"
    assert dict(conn.execute("SELECT key, value FROM meta WHERE key LIKE 'routine:%'")) == \
        {"routine:/repo": "ep_routine_new"}
    [merged] = failures_sql.signatures_for(conn, "/repo", "fail:pytest")
    assert merged.sessions == {"s-old": 100, "s-new": 300} and (merged.first_ms, merged.last_ms) == (100, 300)
    assert merged.memory_id == "ep_fix_old" and merged.fix == "use .venv/bin/pytest"
    assert [r.signature for r in failures_sql.signatures_for(conn, "/repo", "fail:git")] == [["no upstream branch"]]
    assert conn.execute("SELECT count(*) FROM failure_signatures WHERE project = '/wt/one'").fetchone()[0] == 0
    assert json.loads(conn.execute("SELECT sessions FROM failure_signatures WHERE id = ?",
                                   (new.id,)).fetchone()[0]) == {"s-old": 100, "s-new": 300}
