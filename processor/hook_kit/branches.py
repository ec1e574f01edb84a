"""Which of the project's git branches a call means, when it names one by a number the project already has.

Asked to "switch to the phase 12 branch", a session ran ``git checkout main && git pull && git checkout -b
feat/phase-12-mfa``: a new, empty branch. The project's phase 12 had been worked on for days on
``feat/phase-12-multi-factor``; the user had to say so, and the session deleted the wrong one. Every line of a
Claude Code transcript carries the branch it was written on (``messages.git_branch``), so the processor knows the
branches a project's sessions worked on; it keeps them beside its lesson index, in the file map
(``processor/recall/file_map.py``), under ``branch_key``: the name up to its first number (``feat/phase-12``).
Before a call that makes a branch (``git checkout -b``, ``git switch -c``, ``git branch``, ``git worktree add -b``)
whose key is the one branch's the project worked on under another name, the PreToolUse hook tells it
(``branch_lines``); after a ``git checkout``/``git switch`` of a branch that is not there, the failure hook does.

The key is the name's stem and number both: ``fix/issue-42-…`` is not ``feat/issue-42-…``, and ``phase-12.2`` is
not ``phase-12``; a name with no number (``…-9fl2H`` is none) or nothing before it has no key.

Stdlib only and no ``re``: the hook's start-up is its cost.
"""

if __package__:
    from .failure_keys import BRANCH_MISSING
    from .tool_keys import simple_commands
else:  # a hook's flat import (the kit's folder on sys.path)
    from failure_keys import BRANCH_MISSING
    from tool_keys import simple_commands

PREFIX = "branch:"  # the file map's key of a branch stem and number
_SEPARATORS = "/-_"
_MAKES = {("checkout", "-b"), ("checkout", "-B"), ("switch", "-c"), ("switch", "-C"), ("switch", "--create"),
          ("worktree", "-b"), ("worktree", "-B")}
_SWITCHES = ("checkout", "switch")
_BRANCH_FLAGS_OFF = {"-d", "-D", "--delete", "-m", "-M", "--move", "-c", "-C", "--copy", "--list", "-l", "-a", "-r",
                     "--all", "--remotes", "-v", "-vv", "--show-current", "--contains", "--merged", "--no-merged",
                     "--edit-description", "--unset-upstream", "-u", "--set-upstream-to"}


def branch_key(name: str) -> str | None:
    """The key a branch is looked up by: its name up to the end of its first number (digits and dots: ``12``,
    ``12.2``, ``014``), when a stem comes before it; else None."""
    start = 0
    for index, char in enumerate(name + "/"):
        if char not in _SEPARATORS:
            continue
        token = name[start:index]
        if token and any(c.isdigit() for c in token):
            is_number = all(c.isdigit() or c == "." for c in token) and token[0].isdigit()
            return name[:index] if is_number and start > 0 else None
        start = index + 1
    return None


def _words(segment: str) -> list[str]:
    return [w.strip("'\"") for w in segment.split()]


def git_args(segment: str) -> list[str] | None:
    """The words after ``git`` (and its ``-C dir``, ``-c k=v`` options) of a step that runs git; else None."""
    words = _words(segment)
    while words and "=" in words[0] and not words[0].startswith("-"):
        words = words[1:]  # VAR=value
    if not words or words[0].rpartition("/")[2] != "git":
        return None
    words = words[1:]
    while len(words) >= 2 and words[0] in ("-C", "-c"):
        words = words[2:]
    return words


def switched_to(args: list[str]) -> str | None:
    """The branch a ``git checkout``/``git switch`` (its `git_args`) leaves checked out, one it makes too; None for a
    file's checkout or a detached one."""
    if not args or args[0] not in _SWITCHES or "--" in args or "--detach" in args:
        return None
    rest = args[1:]
    for index, word in enumerate(rest[:-1]):
        if (args[0], word) in _MAKES:
            return rest[index + 1]
    names = [w for w in rest if not w.startswith("-")]
    return names[0] if len(names) == 1 else None


def pull_keys(command: str, branch: str | None) -> list[str]:
    """``pull:<branch>`` for the branch each ``git pull`` of a command pulls into: the checked-out one (`branch`), as
    a ``git checkout``/``git switch`` earlier in the command moves it (``git checkout main && git pull``)."""
    keys: list[str] = []
    for segment in simple_commands(command):
        args = git_args(segment)
        if args is None:
            continue
        branch = switched_to(args) or branch
        if args[:1] == ["pull"] and branch and "pull:" + branch not in keys:
            keys.append("pull:" + branch)
    return keys


def made_branches(command: str) -> list[str]:
    """The branches a shell command makes: ``git checkout -b NAME``, ``git switch -c NAME``, ``git branch NAME``,
    ``git worktree add -b NAME …``."""
    made = []
    for segment in simple_commands(command):
        args = git_args(segment)
        if not args:
            continue
        sub, rest = args[0], args[1:]
        for index, word in enumerate(rest[:-1]):
            if (sub, word) in _MAKES:
                made.append(rest[index + 1])
                break
        else:
            if sub == "branch" and rest and not any(w in _BRANCH_FLAGS_OFF for w in rest) \
                    and not rest[0].startswith("-"):
                made.append(rest[0])
    return [name for name in made if name and not name.startswith("-")]


def missed_branch(command: str, error: str) -> str | None:
    """The branch a failed ``git checkout NAME`` / ``git switch NAME`` asked for that is not there ("pathspec 'X'
    did not match any file(s) known to git", "invalid reference: X"); else None."""
    lowered = error[:2000].lower()
    if not any(marker in lowered for marker in BRANCH_MISSING):
        return None
    for segment in simple_commands(command):
        args = git_args(segment)
        if args and args[0] in _SWITCHES:
            names = [w for w in args[1:] if not w.startswith("-")]
            if len(names) == 1 and names[0] in error:
                return names[0]
    return None


def branch_lines(name: str, entries: list, session_id: str) -> list[tuple[str, str]]:
    """(id, line) of the one branch of `name`'s key an earlier session worked on under another name; [] when the
    project worked on `name` itself, on none, or on more than one of that key."""
    found = []
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 3 and all(isinstance(v, str) for v in entry)):
            continue
        branch, date, first_session = entry
        if branch == name:
            return []
        if first_session != session_id and branch not in [b for b, _ in found]:
            found.append((branch, date))
    if len(found) != 1:
        return []
    branch, date = found[0]
    return [(PREFIX + branch, f"- `{name}` is not there: this project's branch of that number is `{branch}` "
                              f"(worked on {date[:10]}).")]
