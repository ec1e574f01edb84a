"""Which files are captured: session transcripts only, never subagents or Engram's own jobs."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

from processor.capture.claude import ClaudeFormat, encoded_project_dir
from processor.capture.discover import discover
from processor.capture.problems import CaptureProblems
from processor.capture.project import project_root


def touch(path: Path, text: str = "{}\n", age_days: float = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if age_days:
        past = time.time() - age_days * 86400
        os.utime(path, (past, past))
    return path


def test_discovers_recent_non_empty_session_transcripts_only(tmp_path: Path) -> None:
    root = tmp_path / "projects"
    own_workdir = tmp_path / "home" / ".engram" / "agent-work"
    keep = touch(root / "-w-app" / "s1.jsonl")
    touch(root / "-w-app" / "agent-1234.jsonl")
    touch(root / "-w-app" / "s1" / "subagents" / "agent-a1.jsonl")
    touch(root / "-w-app" / "empty.jsonl", text="")
    touch(root / "-w-app" / "old.jsonl", age_days=30)
    touch(root / "-w-app" / "notes.txt")
    touch(root / encoded_project_dir(own_workdir) / "job.jsonl")
    touch(root / (encoded_project_dir(own_workdir) + "-sub") / "job.jsonl")
    flt = ClaudeFormat(root, own_workdir)
    assert discover(root, flt, since_days=7) == [keep]
    assert len(discover(root, flt, since_days=None)) == 2  # old.jsonl too


def test_filter_rejects_subagents_and_own_jobs_by_path(tmp_path: Path) -> None:
    root = tmp_path / "projects"
    own = tmp_path / "agent-work"
    flt = ClaudeFormat(root, own)
    assert flt.accepts(root / "-p" / "abc.jsonl")
    assert not flt.accepts(root / "-p" / "agent-abc.jsonl")
    assert not flt.accepts(root / "-p" / "abc" / "subagents" / "agent-x.jsonl")
    assert not flt.accepts(root / "-p" / "abc.json")
    assert not flt.accepts(root / encoded_project_dir(own) / "abc.jsonl")
    assert not flt.accepts(tmp_path / "elsewhere" / "abc.jsonl")


def test_symlink_loop_and_missing_root_are_survived(tmp_path: Path, caplog) -> None:
    root = tmp_path / "projects"
    keep = touch(root / "-w-app" / "s1.jsonl")
    os.symlink(root / "loop", root / "loop")  # a link to itself: ELOOP
    os.symlink(root, root / "-w-app" / "back")  # a cycle back to the root
    flt = ClaudeFormat(root)
    assert discover(root, flt, since_days=None) == [keep]
    assert discover(tmp_path / "missing", ClaudeFormat(tmp_path / "missing"), since_days=None) == []


def test_project_identity_is_the_git_root_shared_by_worktrees(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src" / "deep").mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "x"], check=True, env=env)
    worktree = tmp_path / "elsewhere" / "feature"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", str(worktree)], check=True, env=env)
    (worktree / "pkg").mkdir()
    assert project_root(str(repo / "src" / "deep")) == str(repo)
    assert project_root(str(worktree / "pkg")) == str(repo)
    plain = tmp_path / "api"
    plain.mkdir()
    assert project_root(str(plain)) == str(plain)  # not a repo: the cwd itself, not "api"
    assert project_root("/Users/someone/not/on/this/machine") == "/Users/someone/not/on/this/machine"


def test_each_problem_is_logged_once_across_rescans_then_once_when_resolved(tmp_path: Path, caplog) -> None:
    root = tmp_path / "projects"
    keep = touch(root / "-w-app" / "s1.jsonl")
    os.symlink(root / "-w-app" / "loop.jsonl", root / "-w-app" / "loop.jsonl")
    os.symlink(tmp_path / "target.jsonl", root / "-w-app" / "dangling.jsonl")
    os.mkfifo(root / "-w-app" / "pipe.jsonl")
    os.symlink(root / "-w-loop", root / "-w-loop")  # a project folder that is a link to itself
    flt = ClaudeFormat(root)
    problems = CaptureProblems()
    with caplog.at_level(logging.INFO):
        for _ in range(5):
            assert discover(root, flt, since_days=None, problems=problems) == [keep]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 4, warned
    assert {p["kind"] for p in problems.current()} == {"symlink_loop", "dangling_link", "not_regular"}
    assert len(problems.current()) == 4
    caplog.clear()
    touch(tmp_path / "target.jsonl")  # the link is fixed: captured, and said once
    (root / "-w-app" / "pipe.jsonl").unlink()
    fixed = root / "-w-app" / "dangling.jsonl"
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            assert set(discover(root, flt, since_days=None, problems=problems)) == {keep, fixed}
    assert sorted(r.getMessage().split(": ")[-1] for r in caplog.records) == [
        "resolved (dangling_link)", "resolved (not_regular)"]
    assert len(problems.current()) == 2


def test_missing_root_is_one_problem_until_it_appears(tmp_path: Path, caplog) -> None:
    root = tmp_path / "projects"
    flt = ClaudeFormat(root)
    problems = CaptureProblems()
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            assert discover(root, flt, since_days=None, problems=problems) == []
    assert caplog.text.count("does not exist") == 1
    root.mkdir()
    discover(root, flt, since_days=None, problems=problems)
    assert problems.current() == []
