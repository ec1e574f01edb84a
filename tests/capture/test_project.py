"""One project wherever its sessions ran: worktrees alive or removed since (every layout), clones, a symlinked
folder, a session that moves between worktrees — with real repositories, `git worktree add/remove` and `git clone`,
captured by the real tailer into a real store."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import apsw
import pytest

from bench.testbed.git_repos import add_worktree, clone, git, make_repo, remove_worktree
from bench.testbed.transcripts import Conversation, write_conversations
from processor.capture.project import ProjectResolver, project_of_folder
from processor.capture.tailer import Tailer
from processor.hook_kit import hook_io
from processor.hook_kit.project import index_name, project_root, vanished_root
from processor.hook_kit.remotes import normalise_remote, remote_key
from processor.store import open_store
from processor.store import projects as projects_sql


@pytest.fixture
def conn(tmp_path: Path) -> apsw.Connection:
    connection = open_store(tmp_path / "engram.db")
    yield connection
    connection.close()


def capture(conn: apsw.Connection, projects: Path, *conversations: Conversation, lessons: Path | None = None) -> None:
    """Write each conversation where Claude Code keeps it and capture everything, as a backfill does."""
    write_conversations(projects, *conversations)
    tailer = Tailer(conn, lessons_dir=lessons)
    for transcript in sorted(projects.glob("*/*.jsonl")):
        tailer.tail(transcript)


def project_of(conn: apsw.Connection, session_id: str) -> str:
    return conn.execute("SELECT project FROM sessions WHERE session_id = ?", (session_id,)).fetchone()[0]


def session(sid: str, cwd: Path | str, branch: str = "main", start: str = "2026-11-01T10:00:00") -> Conversation:
    c = Conversation(sid, cwd=str(cwd), branch=branch, start=start)
    c.user(f"work in {cwd}")
    c.bash("pytest -q", "bash: pytest: command not found", error=True)
    c.say("Done.", end_turn=True)
    return c


def real(path: Path) -> str:
    return os.path.realpath(path)


# --- worktrees ---------------------------------------------------------------------------------------------


def test_sessions_in_worktrees_removed_since_are_one_project_whatever_the_layout(tmp_path: Path,
                                                                                conn: apsw.Connection) -> None:
    src = tmp_path / "src"
    repo = make_repo(src / "app", remote="git@github.com:Org/App.git")
    layouts = {  # folder, branch: every layout a person or an agent keeps worktrees in
        "claude": (repo / ".claude" / "worktrees" / "bold-cat", "worktree-bold-cat"),
        "dot-inner": (repo / ".worktrees" / "fix-login", "fix-login"),
        "dash": (src / "app-worktrees" / "w1", "feature/search"),
        "dot": (src / "app.worktrees" / "w2", "chore/deps"),
        "beside": (src / "app-feature-export", "feature/export"),
        "beside-no-branch-line": (src / "app-hotfix", "hotfix"),
        "elsewhere": (tmp_path / "scratch" / "zz", "spike-cache"),
    }
    for folder, branch in layouts.values():
        add_worktree(repo, folder, branch)
    (repo / ".claude" / "worktrees" / "bold-cat" / "pkg").mkdir()
    for folder, _ in layouts.values():
        remove_worktree(repo, folder)
    assert not any(folder.exists() for folder, _ in layouts.values())
    conversations = [session(f"{n:08d}-0000-0000-0000-000000000000", folder / ("pkg" if name == "claude" else ""),
                             "" if name == "beside-no-branch-line" else branch)
                     for n, (name, (folder, branch)) in enumerate(layouts.items())]
    # The repository's own sessions are captured first: the repository is seen alive (the branch-only sign looks
    # among the repositories seen); then the removed worktrees' sessions, as a backfill reads them.
    capture(conn, tmp_path / "projects-main", session("99999999-0000-0000-0000-000000000000", repo))
    capture(conn, tmp_path / "projects", *conversations)
    projects = {c.session_id: project_of(conn, c.session_id) for c in conversations}
    assert set(projects.values()) == {real(repo)}, projects


def test_a_folder_seen_alive_is_remembered_after_it_is_gone(tmp_path: Path, conn: apsw.Connection) -> None:
    repo = make_repo(tmp_path / "code" / "shop")
    worktree = add_worktree(repo, tmp_path / "tmp" / "agent-7f3a", "agent-7f3a")
    (worktree / "api").mkdir()
    capture(conn, tmp_path / "projects", session("aaaaaaaa-0000-0000-0000-000000000001", worktree / "api",
                                                 "agent-7f3a"))
    remove_worktree(repo, worktree)
    git(repo, "branch", "-D", "agent-7f3a")  # nothing on disk says where it was now: no layout, no branch
    assert vanished_root(str(worktree / "api"), "agent-7f3a", (str(repo),)) is None
    later = [session("aaaaaaaa-0000-0000-0000-000000000002", worktree / "api", "agent-7f3a", "2026-11-02T10:00:00"),
             session("aaaaaaaa-0000-0000-0000-000000000003", worktree / "docs", "agent-7f3a", "2026-11-02T11:00:00")]
    capture(conn, tmp_path / "projects", *later)  # a fresh tailer: what the store remembers, not a cache
    assert {project_of(conn, c.session_id) for c in later} == {real(repo)}
    # A backfill into another store knows nothing of it: its own project, as before.
    other = open_store(tmp_path / "other.db")
    try:
        capture(other, tmp_path / "projects-2", session("aaaaaaaa-0000-0000-0000-000000000004", worktree / "api"))
        assert project_of(other, "aaaaaaaa-0000-0000-0000-000000000004") == str(worktree / "api")
    finally:
        other.close()


def test_a_session_that_moves_between_worktrees_stays_in_its_project_and_both_are_remembered(
        tmp_path: Path, conn: apsw.Connection) -> None:
    repo = make_repo(tmp_path / "app")
    first = add_worktree(repo, tmp_path / "wt" / "one", "one")
    second = add_worktree(repo, tmp_path / "wt" / "two", "two")
    moving = Conversation("bbbbbbbb-0000-0000-0000-000000000001", cwd=str(first), branch="one")
    moving.user("start here")
    moving.bash("make", "ok")
    moving.cwd, moving.branch = str(second), "two"
    moving.user("now the other worktree")
    moving.say("Done.", end_turn=True)
    capture(conn, tmp_path / "projects", moving)
    assert project_of(conn, moving.session_id) == real(repo)
    for folder in (first, second):
        remove_worktree(repo, folder)
        git(repo, "branch", "-D", folder.name)
    later = session("bbbbbbbb-0000-0000-0000-000000000002", second / "src", "two", "2026-11-03T10:00:00")
    capture(conn, tmp_path / "projects", later)
    assert project_of(conn, later.session_id) == real(repo)  # under the second checkout, remembered


def test_a_worktree_whose_repository_was_moved_stays_in_the_repository_s_project(tmp_path: Path,
                                                                                 conn: apsw.Connection) -> None:
    # With a remote: the repository found where it is now (it still lists the worktree); without: where it was.
    for name, remote in (("hosted", "https://github.com/Org/Hosted.git"), ("local", None)):
        repo = make_repo(tmp_path / name / "repo", remote=remote)
        worktree = add_worktree(repo, tmp_path / name / "elsewhere" / "feat", f"{name}-feat")
        base = "cccccccc-0000-0000-0000-00000000000" if remote else "dddddddd-0000-0000-0000-00000000000"
        capture(conn, tmp_path / "projects", session(base + "1", repo))
        moved = tmp_path / name / "moved-repo"
        shutil.move(str(repo), str(moved))
        assert not repo.exists() and worktree.exists()  # the worktree's .git file names a gitdir that is gone
        if remote:
            capture(conn, tmp_path / "projects", session(base + "2", moved, start="2026-11-02T10:00:00"))
        capture(conn, tmp_path / "projects", session(base + "3", worktree, f"{name}-feat", "2026-11-03T10:00:00"))
        assert project_of(conn, base + "3") == real(repo), name  # never a path inside .git, never its own
        if remote:
            assert project_of(conn, base + "2") == real(repo)  # the moved repository, by its remote


# --- clones, remotes, symlinks, same names --------------------------------------------------------------------


def test_two_clones_of_one_remote_are_one_project_and_the_hooks_find_its_lessons_from_either(
        tmp_path: Path, conn: apsw.Connection) -> None:
    origin = make_repo(tmp_path / "origin" / "app")
    first = clone(origin, tmp_path / "home" / "app", "git@github.com:Org/App.git")
    second = clone(origin, tmp_path / "backup" / "app-copy", "https://me@GitHub.com/Org/App")
    (second / "src").mkdir()
    lessons = tmp_path / "recollections" / hook_io.LESSONS_FOLDER
    capture(conn, tmp_path / "projects", session("eeeeeeee-0000-0000-0000-000000000001", first), lessons=lessons)
    capture(conn, tmp_path / "projects", session("eeeeeeee-0000-0000-0000-000000000002", second / "src",
                                                 start="2026-11-02T10:00:00"), lessons=lessons)
    assert project_of(conn, "eeeeeeee-0000-0000-0000-000000000002") == real(first)
    assert project_of(conn, "eeeeeeee-0000-0000-0000-000000000001") == real(first)
    assert {r.remote for r in projects_sql.roots(conn)} == {"github.com/Org/App"}
    # A hook in the clone before the session's first recollection: the clone's root, then the alias to the index.
    lessons.mkdir(parents=True, exist_ok=True)
    (lessons / index_name(real(first))).write_text('{"project": "x"}\n#keys\t"cmd:pytest"\t\n"cmd:pytest"\t[{"id": '
                                                  '"ep_1", "bite": "use .venv/bin/pytest"}]\n')
    name, root = hook_io.lessons_index(None, {"cwd": str(second / "src")})
    assert root == real(second) and name == index_name(real(second))
    assert hook_io.read_filed(str(lessons.parent), name, ["cmd:pytest"]) == \
        [("cmd:pytest", [{"id": "ep_1", "bite": "use .venv/bin/pytest"}])]
    # What a person asks in the clone (engram share project, the MCP server's folder) names the project too.
    assert project_of_folder(tmp_path / "engram.db", str(second)) == real(first)


def test_two_repositories_with_the_same_folder_name_are_never_one_project(tmp_path: Path,
                                                                          conn: apsw.Connection) -> None:
    ours = make_repo(tmp_path / "work" / "api", remote="git@github.com:us/api.git")
    theirs = make_repo(tmp_path / "oss" / "api")  # no remote
    forks = make_repo(tmp_path / "forks" / "api", remote="git@github.com:someone/api.git")
    for repo in (ours, theirs, forks):
        add_worktree(repo, repo.parent / "api-feature", "feature")
        remove_worktree(repo, repo.parent / "api-feature")
    conversations = [session(f"ffffffff-0000-0000-0000-00000000000{n}", folder, branch)
                     for n, (folder, branch) in enumerate([(ours, "main"), (theirs, "main"), (forks, "main"),
                                                          (ours.parent / "api-feature", "feature"),
                                                          (theirs.parent / "api-feature", "feature"),
                                                          (forks.parent / "api-feature", "feature")])]
    capture(conn, tmp_path / "projects", *conversations)
    got = [project_of(conn, c.session_id) for c in conversations]
    assert got == [real(ours), real(theirs), real(forks)] * 2


def test_a_repository_without_a_remote_is_known_by_its_path_only(tmp_path: Path, conn: apsw.Connection) -> None:
    repo = make_repo(tmp_path / "one" / "notes")
    copy = tmp_path / "two" / "notes"
    shutil.copytree(repo, copy)
    capture(conn, tmp_path / "projects", session("11111111-0000-0000-0000-000000000001", repo),
            session("11111111-0000-0000-0000-000000000002", copy, start="2026-11-02T10:00:00"))
    assert project_of(conn, "11111111-0000-0000-0000-000000000001") == real(repo)
    assert project_of(conn, "11111111-0000-0000-0000-000000000002") == real(copy)
    assert {r.remote for r in projects_sql.roots(conn)} == {None}


def test_a_remote_with_credentials_in_it_is_known_without_them_nothing_stored_or_logged_holds_them(
        tmp_path: Path, conn: apsw.Connection, caplog: pytest.LogCaptureFixture) -> None:
    token = "ghp_" + "Zq8" * 12
    repo = make_repo(tmp_path / "app", remote=f"https://deploy:{token}@github.com/Org/App.git")
    other = clone(repo, tmp_path / "other" / "app", f"https://oauth2:{token}@github.com:443/Org/App")
    assert remote_key(str(repo / ".git")) == "github.com/Org/App"
    caplog.set_level(logging.DEBUG)
    capture(conn, tmp_path / "projects", session("22222222-0000-0000-0000-000000000001", repo),
            session("22222222-0000-0000-0000-000000000002", other, start="2026-11-02T10:00:00"))
    assert project_of(conn, "22222222-0000-0000-0000-000000000002") == real(repo)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("engram.db*"))
    assert token.encode() not in stored and b"deploy" not in stored
    assert token not in caplog.text


def test_a_symlink_to_a_repository_is_the_repository(tmp_path: Path, conn: apsw.Connection) -> None:
    repo = make_repo(tmp_path / "real" / "app")
    (repo / "src").mkdir()
    link = tmp_path / "link"
    link.symlink_to(repo)
    capture(conn, tmp_path / "projects", session("33333333-0000-0000-0000-000000000001", link / "src"),
            session("33333333-0000-0000-0000-000000000002", repo, start="2026-11-02T10:00:00"))
    assert project_of(conn, "33333333-0000-0000-0000-000000000001") == real(repo)
    assert project_of(conn, "33333333-0000-0000-0000-000000000002") == real(repo)
    assert project_root(str(link / "src")) == real(repo)  # the hooks' side names it alike
    link.unlink()  # the link is gone later: the folder seen through it is remembered
    assert ProjectResolver(conn).lookup(str(link / "src")).project == real(repo)


@pytest.mark.parametrize(("url", "key"), [
    ("git@GitHub.com:Org/App.git", "github.com/Org/App"),
    ("https://me@github.com/Org/App", "github.com/Org/App"),
    ("ssh://git@github.com:22/Org/App.git", "github.com/Org/App"),
    ("https://user:s3cret@gitlab.example.com/group/sub/proj.git/", "gitlab.example.com/group/sub/proj"),
    ("/srv/git/app.git", None), ("file:///srv/git/app.git", None), ("../app", None), ("~/app", None), ("", None),
    ("https://[::1/x", None),
])
def test_a_remote_url_becomes_its_project_key(url: str, key: str | None) -> None:
    assert normalise_remote(url) == key


def test_the_remote_is_read_from_the_repository_s_config_origin_first(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "app")
    git(repo, "remote", "add", "backup", "git@bitbucket.org:me/app.git")
    assert remote_key(str(repo / ".git")) == "bitbucket.org/me/app"
    git(repo, "remote", "add", "origin", "https://github.com/me/app.git")
    assert remote_key(str(repo / ".git")) == "github.com/me/app"
    assert remote_key(str(tmp_path / "missing")) is None


def test_a_folder_gone_from_inside_a_repository_is_that_repository_s_unless_its_branch_says_otherwise(
        tmp_path: Path) -> None:
    home = make_repo(tmp_path / "home")  # a home folder kept under git (dotfiles), on main
    (home / "build" / "tmp").mkdir(parents=True)
    shutil.rmtree(home / "build" / "tmp")
    # A subfolder deleted after its session: the repository's, whatever the branch (main is the repository's).
    assert vanished_root(str(home / "build" / "tmp"), "main") == real(home)
    assert vanished_root(str(home / "build" / "tmp")) == real(home)
    # A repository of its own that lived inside it, deleted since, its sessions on a branch the home never had.
    assert vanished_root(str(home / "code" / "old-app"), "trunk") is None
    assert project_root(str(home / "code" / "old-app"), "trunk") == str(home / "code" / "old-app")
