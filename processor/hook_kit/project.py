"""The project a folder belongs to: its git repository's root (shared by the repository's worktrees, found through
a symlinked folder too), also for a folder that is gone (a removed worktree), and the name of the project's lesson
index.

One implementation for the hooks and the processor (``processor/capture/project.py`` adds what the store
remembers: paths seen alive, and clones known by their remote): both sides must name the same project, or a hook
reads another project's lessons. A folder outside any repository is its own project; the folder's name alone
never is (two "api" folders are two projects).

A folder that is not on this machine (a worktree removed after its session, a backfill of months-old sessions)
belongs to the repository it was a worktree of, when that is still here and one of these says so, in this order
(``vanished_root``): the repository's ``.git/worktrees/*/gitdir`` still lists it (deleted without ``git worktree
remove``); a layout that names the repository — ``<repo>/.claude/worktrees/<name>`` (Claude Code's
``--worktree``), ``<repo>/.worktrees/<name>``, ``<repo>-worktrees/<name>``, ``<repo>.worktrees/<name>``;
``<repo>-<branch>`` beside the repository, where a branch says so (the session's, or one the repository still
has); a folder left inside a repository that is still there, unless the session's branch is none of its branches (a
repository of its own that was nested in it); the session's branch, when exactly one of the
repositories the caller knows has it (and not as its main checkout's branch). Else the folder is its own project,
as before.

Stdlib only. Not on a hook's common path: a hook asks for the project only before the processor wrote the
session's recollection file (which names it), so this module is loaded only then; a live hook's folder exists,
so the walk over a vanished one is the processor's (capture, backfill).
"""

import os
import os.path

INDEX_SUFFIX = ".index"  # hook_io.LESSONS_SUFFIX
# Folders that hold a repository's worktrees beside it: <repo>-worktrees/<name>, <repo>.worktrees/<name>.
SIBLING_SUFFIXES = ("-worktrees", ".worktrees")
# Folders inside a repository that hold its worktrees: Claude Code's --worktree sessions, and a common convention.
INNER_FOLDERS = ("/.claude/worktrees/", "/.worktrees/")


def index_name(project: str | None) -> str:
    """The file name of the project's lesson index (``<recollections>/lessons/<name>``)."""
    import hashlib  # here: only a hook that reads the index pays for it

    return hashlib.sha1((project or "").encode()).hexdigest()[:16] + INDEX_SUFFIX


def _read_text(path: str, limit: int = 4096) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _gitdir_of(dot_git: str) -> str | None:
    """The folder a worktree's ``.git`` file points at (``gitdir: <repo>/.git/worktrees/<name>``), or None."""
    text = _read_text(dot_git)
    first = text.splitlines()[0] if text else ""
    if not first.startswith("gitdir:"):
        return None
    git_dir = first[len("gitdir:"):].strip()
    if not git_dir.startswith("/"):
        git_dir = os.path.dirname(dot_git) + "/" + git_dir
    return os.path.normpath(git_dir)


def _common_dir(dot_git: str) -> tuple[str | None, str | None]:
    """(the git common dir behind a ``.git`` folder or a worktree's ``.git`` file, the gitdir that file names).
    A worktree whose repository was moved names a gitdir that is gone: (None, that gitdir)."""
    if os.path.isdir(dot_git):
        return dot_git, None
    git_dir = _gitdir_of(dot_git)
    if git_dir is None:
        return None, None
    common = _read_text(git_dir + "/commondir")
    if common is None:
        return (git_dir, git_dir) if os.path.isdir(git_dir) else (None, git_dir)
    common = common.strip()
    return os.path.normpath(common if common.startswith("/") else git_dir + "/" + common), git_dir


def _root_of_common(common: str) -> str:
    # The common dir is normally "<root>/.git"; a bare layout has no such parent.
    return os.path.dirname(common) if os.path.basename(common) == ".git" else common


def _clean(path: str) -> str:
    folder = os.path.normpath(path)
    return "/" + folder.lstrip("/") if folder.startswith("//") else folder


def locate(folder: str) -> tuple[str, str, str | None] | None:
    """For an existing folder inside a git checkout: (the repository's root — its main worktree's folder, the
    same for every worktree —, the top folder of this checkout, the git common dir). The common dir is None for
    a worktree whose repository was moved away (its root is then where the repository was) and for a ``.git``
    file that names no gitdir (its folder is then the root). None outside any repository."""
    folder = _clean(folder)
    while True:
        dot_git = folder.rstrip("/") + "/.git"
        if os.path.lexists(dot_git):
            common, git_dir = _common_dir(dot_git)
            if common is not None:
                return _root_of_common(common), folder, common
            if git_dir is not None and "/.git/worktrees/" in git_dir + "/":
                return git_dir[:git_dir.rindex("/.git/worktrees/")] or "/", folder, None
            return folder, folder, None  # a .git file that names no gitdir: the folder stands for itself
        if folder == "/":
            return None
        folder = os.path.dirname(folder)


def project_root(cwd: str, branch: str | None = None, known: tuple[str, ...] | list[str] = ()) -> str:
    """The repository root for cwd (shared by its worktrees; a symlinked folder as the folder it links to), else
    the folder itself. For a folder that is not on this machine, the repository it was a worktree of when one of
    ``vanished_root``'s signs shows it (`branch`: the session's git branch; `known`: repository roots to look
    for it in), else cwd as given. A worktree whose repository was moved belongs to the known repository that
    still lists it, else to where the repository was."""
    try:
        if not cwd.startswith("/"):
            return cwd
        if not os.path.exists(cwd):
            return vanished_root(cwd, branch, known) or cwd
        real = os.path.realpath(cwd)
        found = locate(real)
        if found is None:
            return real
        if found[2] is None:
            return _listing(found[1], known) or found[0]
        return found[0]
    except (OSError, ValueError):  # a path the OS refuses (too long, a NUL byte)
        return cwd


# --- a folder that is gone --------------------------------------------------------------------------------


def _repository(folder: str) -> str | None:
    """The root of the repository whose main checkout (or bare folder) `folder` is, if it is one."""
    found = locate(folder) if os.path.isdir(folder) and os.path.lexists(folder.rstrip("/") + "/.git") else None
    return found[0] if found is not None and found[2] is not None else None


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def listed_worktrees(root: str) -> list[str]:
    """The worktree folders the repository at `root` still lists (``.git/worktrees/*/gitdir``)."""
    found = locate(root) if os.path.isdir(root) else None
    common = found[2] if found is not None else None
    if common is None:
        return []
    try:
        names = os.listdir(common + "/worktrees")
    except OSError:
        return []
    folders = []
    for name in names:
        text = _read_text(f"{common}/worktrees/{name}/gitdir")
        gitdir = text.strip() if text else ""
        if gitdir.startswith("/"):
            folders.append(os.path.dirname(os.path.normpath(gitdir)))
    return folders


def _branches(root: str) -> tuple[set[str], str | None]:
    """(the local branches of the repository at `root`, the branch its main checkout is on)."""
    found = locate(root)
    common = found[2] if found is not None else None
    if common is None:
        return set(), None
    names: set[str] = set()
    for folder, _, files in os.walk(common + "/refs/heads"):
        names.update((folder + "/" + f)[len(common) + len("/refs/heads/"):] for f in files)
    for line in (_read_text(common + "/packed-refs", 1 << 22) or "").splitlines():
        ref = line.partition(" ")[2]
        if ref.startswith("refs/heads/"):
            names.add(ref[len("refs/heads/"):])
    head = (_read_text(common + "/HEAD") or "").strip()
    main = head[len("ref: refs/heads/"):] if head.startswith("ref: refs/heads/") else None
    try:
        worktrees = os.listdir(common + "/worktrees")
    except OSError:
        worktrees = []
    for name in worktrees:  # a worktree's branch is a branch of the repository (a ref under refs/heads)
        text = (_read_text(f"{common}/worktrees/{name}/HEAD") or "").strip()
        if text.startswith("ref: refs/heads/"):
            names.add(text[len("ref: refs/heads/"):])
    return names, main


def _names(root: str) -> set[str]:
    """Every branch the repository knows: its local branches and its main checkout's."""
    names, main = _branches(root)
    return names | ({main} if main else set())


def _has_branch(root: str, branch: str) -> bool:
    names, main = _branches(root)
    return branch in names and branch != main  # the main checkout's branch says nothing of a worktree


def _slug(branch: str) -> str:
    return branch.replace("/", "-")


def _listing(path: str, roots: tuple[str, ...] | list[str]) -> str | None:
    """The root of the first of `roots` whose worktree list holds `path` (the worktree or a folder in it)."""
    for root in roots:
        if os.path.isdir(root) and any(_under(path, folder) for folder in listed_worktrees(root)):
            return _repository(root) or root
    return None


def _layouts(path: str) -> list[str]:
    """Where a known layout puts the repository of the worktree folder `path`: <repo>/.claude/worktrees/<name>,
    <repo>/.worktrees/<name>, <repo>-worktrees/<name>, <repo>.worktrees/<name> (the deepest first)."""
    found = []
    for inner in INNER_FOLDERS:
        at = (path + "/").find(inner)
        if at > 0:
            found.append(path[:at])
    parts = path.split("/")
    for depth in range(len(parts) - 1, 0, -1):
        name = parts[depth]
        for suffix in SIBLING_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                found.append("/".join(parts[:depth]) + "/" + name[:-len(suffix)])
    return list(dict.fromkeys(found))


def _beside(path: str, existing: str, branch: str | None) -> str | None:
    """../<repo>-<branch>: the repository beside the first folder of `path` that is gone, whose name is the
    repository's and a suffix, when a branch confirms it: the session's (the suffix is its name with / as -, or the
    repository has it), or one of the repository's (the suffix is its name)."""
    first_gone = path
    while os.path.dirname(first_gone) != existing:
        first_gone = os.path.dirname(first_gone)
    name = os.path.basename(first_gone)
    try:
        siblings = sorted(os.listdir(existing), key=len, reverse=True)  # the longest name first: app-web before app
    except OSError:
        return None
    for sibling in siblings:
        if not name.startswith(sibling + "-") or len(name) <= len(sibling) + 1:
            continue
        found = _repository(existing.rstrip("/") + "/" + sibling)
        if found is None:
            continue
        suffix = name[len(sibling) + 1:]
        if branch and (suffix == _slug(branch) or _has_branch(found, branch)):
            return found
        if suffix in {_slug(b) for b in _branches(found)[0]}:  # the branch the worktree was made for is still here
            return found
    return None


def vanished_root(cwd: str, branch: str | None = None, known: tuple[str, ...] | list[str] = ()) -> str | None:
    """The root of the repository that a folder no longer on this machine was a worktree of, or None. The signs,
    in the order they are read: a repository still lists it as a worktree (deleted, not removed with `git
    worktree remove`); a layout that names the repository; ../<repo>-<branch> beside the repository; a folder
    left inside a repository that is still here (when the session's branch, if known, is one of its branches); the
    session's branch, held by exactly one known repository."""
    path = _clean(cwd)
    if not path.startswith("/") or path == "/":
        return None
    existing = os.path.dirname(path)  # the nearest folder above it that is still here
    while existing != "/" and not os.path.isdir(existing):
        existing = os.path.dirname(existing)
    above = locate(existing)
    inside = above[0] if above is not None and above[2] is not None else None
    layouts = _layouts(path)
    candidates = list(dict.fromkeys([*layouts, *([inside] if inside else []), *known]))
    if inside is not None and branch and branch not in _names(inside):
        inside = None  # a repository of its own that was nested in this one (a home folder under git): not it
    found = (_listing(path, candidates)
             or next((r for r in map(_repository, layouts) if r is not None), None)
             or _beside(path, existing, branch)
             or inside)
    if found is None and branch:
        having = [r for r in dict.fromkeys(filter(None, map(_repository, candidates))) if _has_branch(r, branch)]
        found = having[0] if len(having) == 1 else None
    return os.path.realpath(found) if found is not None else None
