"""The project a folder belongs to: its git repository's root (shared by the repository's worktrees), and the
name of the project's lesson index.

One implementation for the hooks and the processor (``processor/capture/project.py`` caches it): both sides
must name the same project, or a hook reads another project's lessons. A cwd outside any repository, or not
present on this machine, is its own project; the folder's name alone never is (two "api" folders are two
projects).

Stdlib only. Not on a hook's common path: a hook asks for the project only before the processor wrote the
session's recollection file (which names it), so this module is loaded only then.
"""

import os.path

INDEX_SUFFIX = ".index"  # hook_io.LESSONS_SUFFIX


def index_name(project: str | None) -> str:
    """The file name of the project's lesson index (``<recollections>/lessons/<name>``)."""
    import hashlib  # here: the SessionStart hook asks for the project's root, never for its index

    return hashlib.sha1((project or "").encode()).hexdigest()[:16] + INDEX_SUFFIX


def _read_text(path: str, limit: int = 4096) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _common_dir(dot_git: str) -> str | None:
    """The git common dir behind a ``.git`` folder, or behind a worktree's ``.git`` file (``gitdir: <repo>/
    .git/worktrees/<name>``, whose ``commondir`` names the repository's ``.git``)."""
    if os.path.isdir(dot_git):
        return dot_git
    text = _read_text(dot_git)
    first = text.splitlines()[0] if text else ""
    if not first.startswith("gitdir:"):
        return None
    git_dir = first[len("gitdir:"):].strip()
    if not git_dir.startswith("/"):
        git_dir = os.path.dirname(dot_git) + "/" + git_dir
    common = _read_text(git_dir + "/commondir")
    if common is None:
        return git_dir
    common = common.strip()
    return common if common.startswith("/") else git_dir + "/" + common


def project_root(cwd: str) -> str:
    """The repository root for cwd (shared by its worktrees), else cwd itself."""
    try:
        if not cwd.startswith("/") or not os.path.exists(cwd):
            return cwd
        folder = os.path.normpath(cwd)
        if folder.startswith("//"):
            folder = "/" + folder.lstrip("/")
        while True:
            dot_git = folder.rstrip("/") + "/.git"
            if os.path.lexists(dot_git):
                common = _common_dir(dot_git)
                if common is None:
                    return folder
                common = os.path.normpath(common)
                # The common dir is normally "<root>/.git"; a bare layout has no such parent.
                return os.path.dirname(common) if os.path.basename(common) == ".git" else common
            if folder == "/":
                return cwd
            folder = os.path.dirname(folder)
    except (OSError, ValueError):  # a path the OS refuses (too long, a NUL byte)
        return cwd
