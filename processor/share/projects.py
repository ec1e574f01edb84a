"""A project's identity across machines: its git remote URL, normalised, else the repository root's path.

Two clones of one repository, at different paths on different machines (over ssh on one, https on the
other), are one project: ``git@GitHub.com:Org/App.git``, ``https://me@github.com/Org/App`` and
``ssh://git@github.com:22/Org/App.git`` all become ``github.com/Org/App`` (no scheme, no user, no port,
no ``.git``, the host in lower case; the path keeps its case). A repository without a remote is known by
its root path, which matches only clones at the same path. The rule that normalises a remote lives in the hooks'
kit (``processor/hook_kit/remotes.py``), where capture names a clone on this machine by the same key.
"""

from __future__ import annotations

from processor.hook_kit.remotes import normalise_remote
from processor.memory.code_check import RepoUnavailable, git

__all__ = ["GIT_TIMEOUT_SECONDS", "PATH_PREFIX", "normalise_remote", "project_key", "remote_url"]

GIT_TIMEOUT_SECONDS = 5.0
PATH_PREFIX = "path:"


def _git(root: str, *args: str) -> str | None:
    """What the git call printed, or None when it failed (no git, no repository, too slow)."""
    try:
        status, out = git(root, list(args), GIT_TIMEOUT_SECONDS)
    except RepoUnavailable:
        return None
    return out if status == 0 else None


def remote_url(root: str) -> str | None:
    """The URL of the repository's `origin` remote, else of its first remote (by name)."""
    url = _git(root, "remote", "get-url", "origin")
    if url and url.strip():
        return url.strip()
    names = (_git(root, "remote") or "").split()
    for name in sorted(names):
        url = _git(root, "remote", "get-url", name)
        if url and url.strip():
            return url.strip()
    return None


def project_key(root: str) -> tuple[str, bool]:
    """(the project's key, whether it comes from a git remote)."""
    url = remote_url(root)
    key = normalise_remote(url) if url else None
    if key:
        return key, True
    return PATH_PREFIX + root, False
