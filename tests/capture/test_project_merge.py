"""Migrating a store split by project identity: sessions of removed worktrees captured when nothing on disk named
their repository (each its own project, as before issue 34), merged into one project once it does — nothing lost,
nothing doubled, one transaction per merge, resumed after a crash."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import apsw
import pytest

from bench.testbed.git_repos import add_worktree, make_repo, remove_worktree
from bench.testbed.transcripts import Conversation, write_conversations
from processor.capture import project_merge
from processor.capture.project import ProjectResolver
from processor.config import load_settings
from processor.hook_kit.hook_io import LESSONS_ALIASES, LESSONS_FOLDER
from processor.hook_kit.project import index_name
from processor.service.run_loop import Processor
from processor.store import open_store, write_transaction
from processor.store import projects as projects_sql
from processor.store import viewer as viewer_sql

FAILED = "bash: pytest: command not found"


def lesson_session(sid: str, cwd: Path, branch: str, start: str) -> Conversation:
    """A session that meets the project's recurring failure and gets past it."""
    c = Conversation(sid, cwd=str(cwd), branch=branch, start=start)
    c.user("run the tests")
    c.bash("pytest -q", FAILED, error=True)
    c.bash(".venv/bin/pytest -q", "12 passed in 0.4s")
    c.say("The tests pass when run with the project's virtual environment: .venv/bin/pytest.", end_turn=True)
    return c


@pytest.fixture
def split_store(tmp_path: Path) -> tuple[Path, object, list[str]]:
    """A store whose sessions ran in a repository and two of its worktrees (removed since), captured and turned
    into memories while the repository was moved away: three projects. Returns (repository, settings, keys)."""
    repo = make_repo(tmp_path / "src" / "app", remote="git@github.com:Org/App.git")
    worktrees = [(tmp_path / "src" / "app-worktrees" / "one", "one"), (repo / ".claude" / "worktrees" / "two", "two")]
    for folder, branch in worktrees:
        add_worktree(repo, folder, branch)
        remove_worktree(repo, folder)
    settings = load_settings({"ENGRAM_HOME": str(tmp_path / "home"), "ENGRAM_PROJECTS_DIR": str(tmp_path / "projects"),
                              "ENGRAM_AUTOMEM": "0"})
    away = tmp_path / "src" / "app.away"
    shutil.move(str(repo), str(away))  # nothing names the repository: each folder is its own project
    write_conversations(tmp_path / "projects",
                        lesson_session("aaaaaaaa-0000-0000-0000-000000000000", repo, "main", "2026-11-01T10:00:00"),
                        *(lesson_session(f"aaaaaaaa-0000-0000-0000-00000000000{n}", folder, branch,
                                         f"2026-11-0{n + 1}T10:00:00")
                          for n, (folder, branch) in enumerate(worktrees, start=1)))
    Processor(settings).run_once(None)
    conn = open_store(settings.db_path)
    try:
        keys = sorted(projects_sql.keys_in_use(conn))
        assert keys == sorted([str(repo), *(str(folder) for folder, _ in worktrees)])
        # A copy of one memory under another of the keys (an earlier version's, or a shared memory pulled here).
        copied = conn.execute("SELECT id FROM episodes WHERE project = ? AND source_type != 'verbatim' "
                              "ORDER BY created_at LIMIT 1", (str(repo),)).fetchone()[0]
        with write_transaction(conn):
            conn.execute("INSERT INTO episodes (id, session_id, project, scope, summary, entities, importance, kind, "
                         "source_type, full_content, source_uuids, content_hash, embedding, created_at, accessed_at, "
                         "access_count, valid_from, status) SELECT 'ep_copy', session_id, ?, scope, summary, entities, "
                         "importance, kind, source_type, full_content, source_uuids, content_hash, embedding, "
                         "created_at + 1, accessed_at, access_count, valid_from, status FROM episodes WHERE id = ?",
                         (str(worktrees[0][0]), copied))
    finally:
        conn.close()
    lessons = settings.recollections_dir / LESSONS_FOLDER
    lessons.mkdir(parents=True, exist_ok=True)
    for key in keys:
        (lessons / index_name(key)).write_text("{}\n")
    shutil.move(str(away), str(repo))
    return repo, settings, keys


def state(conn: apsw.Connection) -> dict:
    return {"episodes": sorted(conn.execute("SELECT id, project, status, superseded_by FROM episodes")),
            "sessions": sorted(conn.execute("SELECT session_id, project FROM sessions")),
            "failures": sorted((key, sig, sorted(json.loads(sessions))) for key, sig, sessions in
                               conn.execute("SELECT fail_key, signature, sessions FROM failure_signatures"))}


def test_a_store_split_by_removed_worktrees_becomes_one_project_nothing_lost_nothing_doubled(split_store) -> None:
    repo, settings, keys = split_store
    conn = open_store(settings.db_path)
    before = {row[0]: row[1:] for row in conn.execute("SELECT id, content_hash, status FROM episodes")}
    failures_before = conn.execute("SELECT count(*) FROM failure_signatures").fetchone()[0]
    assert failures_before == 3  # one per split project
    conn.close()
    Processor(settings).run_once(None)  # a start: the merge runs before capture
    conn = open_store(settings.db_path)
    try:
        assert {p for (p,) in conn.execute("SELECT DISTINCT project FROM sessions")} == {str(repo)}
        after = {row[0]: row[1:] for row in conn.execute("SELECT id, content_hash, status FROM episodes")}
        assert set(before) <= set(after)  # nothing lost: every memory still has its id
        memories = {row[0] for row in conn.execute("SELECT id FROM episodes WHERE source_type != 'verbatim'")}
        active = [h for i, (h, status) in after.items() if status == "active" and i in memories]
        assert len(active) == len(set(active))  # nothing doubled
        kept = conn.execute("SELECT superseded_by FROM episodes WHERE id = 'ep_copy'").fetchone()[0]
        assert kept and after[kept][1] == "active" and after[kept][0] == after["ep_copy"][0]
        [(sessions,)] = conn.execute("SELECT sessions FROM failure_signatures WHERE fail_key = 'fail:pytest'")
        assert sorted(json.loads(sessions)) == [f"aaaaaaaa-0000-0000-0000-00000000000{n}"
                                                             for n in range(3)]
        merges = projects_sql.merges(conn)
        assert {(m.old, m.new) for m in merges} == {(k, str(repo)) for k in keys if k != str(repo)}
        assert sum(m.duplicates for m in merges) == 1
        assert [p.project for p in viewer_sql.projects(conn)] == [str(repo)]  # the viewer lists one project
    finally:
        conn.close()
    lessons = settings.recollections_dir / LESSONS_FOLDER
    for key in keys:
        if key != str(repo):
            assert not (lessons / index_name(key)).exists()
            assert (lessons / LESSONS_ALIASES / index_name(key)).read_text() == index_name(str(repo))
    # Run again: nothing left to merge.
    conn = open_store(settings.db_path)
    try:
        assert project_merge.reconcile(conn, ProjectResolver(conn), lessons) == []
    finally:
        conn.close()


def test_a_merge_interrupted_by_a_crash_is_finished_at_the_next_start_as_a_clean_run_would(
        split_store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, settings, keys = split_store
    clean_db = tmp_path / "clean.db"
    shutil.copy(settings.db_path, clean_db)
    conn = open_store(clean_db)
    project_merge.reconcile(conn, ProjectResolver(conn))
    clean = state(conn)
    conn.close()

    calls = []
    real_drop = projects_sql.drop_duplicates

    def crash_on_second_merge(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise KeyboardInterrupt("the processor is killed mid-merge")
        return real_drop(*args, **kwargs)

    monkeypatch.setattr(projects_sql, "drop_duplicates", crash_on_second_merge)
    conn = open_store(settings.db_path)
    with pytest.raises(KeyboardInterrupt):
        project_merge.reconcile(conn, ProjectResolver(conn))
    assert len(projects_sql.merges(conn)) == 1  # the first merge committed, the second rolled back whole
    assert len(projects_sql.keys_in_use(conn)) == 2
    conn.close()
    monkeypatch.setattr(projects_sql, "drop_duplicates", real_drop)
    conn = open_store(settings.db_path)
    try:
        project_merge.reconcile(conn, ProjectResolver(conn))
        assert state(conn) == clean
        assert projects_sql.keys_in_use(conn) == [str(repo)]
    finally:
        conn.close()
