"""How a memory writes a command a session ran: its first line, without where it ran or a commit's message, cut.

Lessons, recipes and the staging gotcha quote commands (``git add -f dist/app.js``); a later session reads them in a
bite of a few hundred characters, so what says nothing about the lesson is left out.
"""

from __future__ import annotations

import re

# What a console printed after a call it shows cut ("…", then its cost and time), left in a command written down
# from a terminal: never part of the command, and unreadable in a bite.
_CONSOLE_TAIL = re.compile(r"\)?…\s{2,}.*$|\s{3,}Cost: \$[\d.]+.*$")


def without_console(command: str) -> str:
    """The command without a console's rendering around it (``…   Cost: $0.02 (7.1s``)."""
    return _CONSOLE_TAIL.sub("", command)


# A message given to a git command: -m "…", -am '…', --message="…" (quoted; the first line of a multi-line one).
_GIT_MESSAGE = re.compile(r"""((?:^|\s)(?:-[a-zA-Z]*m|--message))(=|\s+)(?:"(?:[^"\\]|\\.)*"?|'[^']*'?)""")


def command_shown(target: str | None, limit: int = 120, keep_cd: bool = False) -> str:
    """A command as a memory shows it: its first line, without a leading ``cd <folder> &&`` (where it ran is
    the project, not the lesson; ``keep_cd``: unless the `cd` is what failed), cut."""
    first = without_console((target or "").strip().splitlines()[0]) if (target or "").strip() else ""
    while not keep_cd and first.startswith("cd ") and "&&" in first:
        first = first.split("&&", 1)[1].strip()
    cut = len(first) > limit or "\n" in (target or "").strip()
    return first[:limit] + ("…" if cut else "")


def command_told(target: str | None, limit: int = 120, root: str | None = None, keep_cd: bool = False) -> str:
    """A command as a memory tells it: as ``command_shown``, without a ``cd <the project> &&`` later in it
    either (where it ran is the project) — but a leading `cd` into a folder of the project (`root`) is kept,
    relative (``cd apps/api && node -e …``: where it ran may be what fixed it) —, and with a git message
    (``-m "…"``) left out: it says what that one commit was, never what the lesson is, and at a hundred
    characters it pushed the fix out of the bite."""
    if root and not keep_cd:
        target, keep_cd = _cd_below(target, root)
    shown = command_shown(target, 10_000, keep_cd)
    if root:
        for folder in (root, f'"{root}"', f"'{root}'"):
            shown = shown.replace(f"&& cd {folder} && ", "&& ").replace(f"; cd {folder} && ", "; ")
    if shown.startswith("git ") or " git " in shown:
        shown = _GIT_MESSAGE.sub(r'\1\2"…"', shown)
    return shown[:limit] + ("…" if len(shown) > limit else "")


# A remove in a chain: `rm -rf venv/`, `rm -r -f build`, `git rm -r old/` (its words up to the next command).
_REMOVE = re.compile(r"(?:^|&&|;|\|\||\|)\s*(?:git\s+)?rm\s+(?P<words>[^&;|]*)")


def recursive_removes(command: str) -> list[tuple[str, list[str]]]:
    """Each recursive remove of a command's chain (``rm -rf .uvenv``): the text of that step, and the paths it
    names (its words but the options)."""
    found = []
    for match in _REMOVE.finditer(command):
        words = match.group("words").split()
        if any(w.startswith("-") and "r" in w.lstrip("-").lower() for w in words):
            found.append((match.group(0), [w for w in words if not w.startswith("-")]))
    return found


def runs_elsewhere(command: str | None, folders: list[str]) -> bool:
    """Whether a command starts by going to a folder outside all of `folders` (the project's root and checkouts):
    ``cd /Users/me/Developer/OtherProject && source venv/bin/activate && …`` is another project's, run from a
    session of this one. Only an absolute `cd` says so (``~`` and ``$HOME`` may be the project's own)."""
    line = (command or "").lstrip()
    if not line.startswith("cd ") or not folders:
        return False
    folder = line[3:].split("&&", 1)[0].split(";", 1)[0].strip().strip("'\"").rstrip("/")
    if not folder.startswith("/"):
        return False
    return not any(folder == f.rstrip("/") or folder.startswith(f.rstrip("/") + "/") for f in folders if f)


def _cd_below(target: str | None, root: str) -> tuple[str | None, bool]:
    """(the command, whether its leading `cd` is kept): kept, relative to the project, when it goes into a folder of
    it (``cd /repo/apps/api && …`` → ``cd apps/api && …``) or to a relative folder."""
    line = (target or "").lstrip()
    if not line.startswith("cd ") or "&&" not in line.split("\n", 1)[0]:
        return target, False
    folder, _, rest = line[3:].partition("&&")
    folder, base = folder.strip().strip("'\""), root.rstrip("/")
    if folder.startswith(base + "/"):
        return f"cd {folder[len(base) + 1:].rstrip('/')} && {rest.strip()}", True
    if folder and not folder.startswith(("/", "~", "$")) and folder not in (".", "..") and not folder.startswith("../"):
        return target, True
    return target, False
