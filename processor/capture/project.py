"""Project identity: the git repository a message's cwd belongs to.

Worktrees of one repository share a git common dir, so they are one project.
A cwd outside any repository (or not present on this machine) is its own project.
The folder basename is never used: two "api" folders are different projects.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path


def _common_dir_of(dot_git: Path) -> Path | None:
    if dot_git.is_dir():
        return dot_git
    try:
        # A worktree's .git is a file: "gitdir: <repo>/.git/worktrees/<name>".
        first = dot_git.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    if not first.startswith("gitdir:"):
        return None
    git_dir = Path(first[len("gitdir:"):].strip())
    if not git_dir.is_absolute():
        git_dir = dot_git.parent / git_dir
    try:
        common = (git_dir / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        return git_dir
    common_path = Path(common)
    return common_path if common_path.is_absolute() else (git_dir / common_path)


@functools.lru_cache(maxsize=4096)
def project_root(cwd: str) -> str:
    """The repository root for cwd (shared by its worktrees), else cwd itself."""
    try:
        start = Path(cwd)
        if not start.is_absolute() or not start.exists():
            return cwd
        for folder in (start, *start.parents):
            dot_git = folder / ".git"
            if os.path.lexists(dot_git):
                common = _common_dir_of(dot_git)
                if common is None:
                    return str(folder)
                common = Path(os.path.normpath(common))
                # The common dir is normally "<root>/.git"; a bare layout has no such parent.
                return str(common.parent if common.name == ".git" else common)
    except OSError:
        pass
    return cwd
