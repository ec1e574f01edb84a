"""A local override an earlier session wrote and left: told before a call starts what reads it.

cipher-box 02-13: to try the web app against staging, a session wrote ``apps/web/.env.local`` ("# Override API
to staging", ``VITE_API_URL=https://api-staging.cipherbox.cc``), kept it out of its commit and ended. Two
sessions later the user asked for the full local stack; the web app came up talking to staging and the user could
not get past the OTP screen, until the agent found the file (both readers: it needed to know).

What a session writes to a local override — a ``*.local`` file, a ``*.local.*`` one, a compose override
(``processor/capture/signals.py`` ``is_override``) — is a memory ("Wrote local override `…/apps/web/.env.local`:
# Override API to staging VITE_API_URL=…"); the file's newest one, written by one of the project's last
``RECENT_SESSIONS`` sessions, is told before a call that starts what the project's sessions started in the
background (its servers: ``left_running.Start``) in the override's folder — the command names the folder
(``pnpm --filter web dev`` for ``apps/web``), or the override is at the project's top.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from processor.capture.signals import WROTE
from processor.memory.left_running import Start
from processor.store.episodes import Episode

RECENT_SESSIONS = 3  # the project's last sessions whose overrides are told: one written long ago is settled
_WRITTEN = re.compile(re.escape(WROTE) + r" `([^`]+)`: (.*)", re.DOTALL)


@dataclass(frozen=True)
class Written:
    """A local override a session wrote, as its memory says it."""

    memory_id: str
    path: str  # below the project's folder
    text: str
    ts_ms: int
    session_id: str | None

    @property
    def folder(self) -> str:
        return self.path.rpartition("/")[0]


def written_of(ep: Episode, root: str | None) -> Written | None:
    """The override a memory records (its path below `root`), or None."""
    found = _WRITTEN.match(ep.full_content or "")
    if not found:
        return None
    path = found.group(1)
    if root and path.startswith(root.rstrip("/") + "/"):
        path = path[len(root.rstrip("/")) + 1:]
    return Written(ep.id, path, found.group(2).strip(), ep.created_at or 0, ep.session_id)


def left_in_place(written: Iterable[Written], recent: list[str]) -> list[Written]:
    """Each override file's newest write, when one of the `recent` sessions (the project's newest first) wrote it."""
    told_from = set(recent[:RECENT_SESSIONS])
    newest: dict[str, Written] = {}
    for w in sorted(written, key=lambda w: w.ts_ms):
        newest[w.path] = w
    return [w for w in newest.values() if w.session_id in told_from]


def started_there(override: Written, starts: Iterable[Start]) -> list[str]:
    """What the project's sessions started in the background that runs where the override is read: a command that
    names its folder (``apps/web``) or that folder's name as a word (``pnpm --filter web dev``); any, for one at the
    project's top."""
    found: list[str] = []
    name = override.folder.rpartition("/")[2]
    for start in starts:
        words = start.runs.split()
        if not override.folder or override.folder in start.runs or name in words:
            found.append(start.runs)
    return list(dict.fromkeys(found))
