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


def command_shown(target: str | None, limit: int = 120) -> str:
    """A command as a memory shows it: its first line, without a leading ``cd <folder> &&`` (where it ran is
    the project, not the lesson), cut."""
    first = without_console((target or "").strip().splitlines()[0]) if (target or "").strip() else ""
    while first.startswith("cd ") and "&&" in first:
        first = first.split("&&", 1)[1].strip()
    cut = len(first) > limit or "\n" in (target or "").strip()
    return first[:limit] + ("…" if cut else "")


def command_told(target: str | None, limit: int = 120, root: str | None = None) -> str:
    """A command as a memory tells it: as ``command_shown``, without a ``cd <the project> &&`` later in it
    either (where it ran is the project), and with a git message (``-m "…"``) left out — it says what that one
    commit was, never what the lesson is, and at a hundred characters it pushed the fix out of the bite."""
    shown = command_shown(target, 10_000)
    if root:
        for folder in (root, f'"{root}"', f"'{root}'"):
            shown = shown.replace(f"&& cd {folder} && ", "&& ").replace(f"; cd {folder} && ", "; ")
    if shown.startswith("git ") or " git " in shown:
        shown = _GIT_MESSAGE.sub(r'\1\2"…"', shown)
    return shown[:limit] + ("…" if len(shown) > limit else "")
