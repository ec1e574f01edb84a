"""Real git repositories, worktrees and clones for tests and benchmarks: made and removed with the git command
itself, so what Engram reads of them is what git leaves on disk."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# A fixed identity, and nothing of the user's own git configuration (hooks, templates, signing).
GIT_ENV = {"GIT_AUTHOR_NAME": "Engram Test", "GIT_AUTHOR_EMAIL": "test@example.invalid",
           "GIT_COMMITTER_NAME": "Engram Test", "GIT_COMMITTER_EMAIL": "test@example.invalid",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}


def git(folder: Path, *args: str) -> str:
    """Run git in `folder`; its output (raises with git's own message when it fails)."""
    done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {folder} failed: {done.stderr.strip()}")
    return done.stdout


def make_repo(folder: Path, remote: str | None = None, files: dict[str, str] | None = None) -> Path:
    """A repository on branch main with one commit (the given files, else a README), and `remote` as origin."""
    folder.mkdir(parents=True, exist_ok=True)
    git(folder, "init", "-q", "-b", "main")
    for name, text in (files or {"README.md": f"# {folder.name}\n"}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    git(folder, "add", "-A")
    git(folder, "commit", "-q", "-m", "initial commit")
    if remote:
        git(folder, "remote", "add", "origin", remote)
    return folder


def add_worktree(repo: Path, folder: Path, branch: str) -> Path:
    """`git worktree add -b branch folder` (the branch made from main)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "add", "-q", "-b", branch, str(folder), "main")
    return folder


def remove_worktree(repo: Path, folder: Path) -> None:
    """`git worktree remove --force`: the folder and git's record of it go; the branch stays."""
    git(repo, "worktree", "remove", "--force", str(folder))


def clone(source: Path, folder: Path, remote: str | None = None) -> Path:
    """`git clone` of a local repository, its origin then set to `remote` (a clone of the same hosted repository)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    git(source.parent, "clone", "-q", str(source), str(folder))
    if remote:
        git(folder, "remote", "set-url", "origin", remote)
    return folder
