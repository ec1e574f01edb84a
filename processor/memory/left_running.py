"""What the last sessions started in the background and never stopped: told before a call that starts it again.

cipher-box 02-16: a session started the API (`pnpm --filter api dev`), the web app and `ngrok http 3000` with
Claude Code's ``run_in_background`` and ended with them running. Two hours later the next session, asked to start
the dev server and ngrok, started all three again: ngrok refused (one agent session at a time), the API died with
EADDRINUSE, Vite moved to another port and CORS failed, until the user said to kill every instance first (both
readers: it needed to know). 02-13 alike: "There's an old frontend on `5173`", left by the session before.

A background start is a memory of its own (``processor/capture/signals.py``: "Started in the background (task
`bf99c5a`): `pnpm --filter api dev`"). It is left running when no later call of the project's last sessions here
stopped it: a TaskStop (or KillShell) naming its task, or a shell call that kills (``kill``, ``pkill``,
``killall``, ``lsof … | xargs kill``) — which process a kill hit is not known, so any kill after a start counts
as its stop: the tell stays for what nothing could have stopped. Processes outlive a session for hours, not for
days (the machine sleeps, restarts, the user closes the terminal): only what a session left within
``LEFT_RUNNING_HOURS`` of the call being told is told, and the words say "may still be running".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from processor.capture.signals import STARTED
from processor.hook_kit.tool_keys import assigned, command_key, kills, simple_commands
from processor.store.episodes import Episode
from processor.store.tool_calls import StoredToolCall

LEFT_RUNNING_HOURS = 12
STOP_TOOLS = ("TaskStop", "KillShell", "KillBash")  # Claude Code's tools that end a background task
_START = re.compile(re.escape(STARTED) + r"(?: \(task `([\w-]+)`\))?: `(.*)`\s*$", re.DOTALL)


@dataclass(frozen=True)
class Start:
    """A command a session started in the background, as its memory says it."""

    memory_id: str
    command: str
    task: str | None
    ts_ms: int
    session_id: str | None

    @property
    def runs(self) -> str:
        """What it started, without the variables it set, its redirections or a pipe after it (``DB_HOST=… pnpm
        --filter api dev 2>&1`` → ``pnpm --filter api dev``): what a later call starting it again runs."""
        return next((core for seg in simple_commands(self.command) if (core := assigned(seg)[1])), self.command)

    @property
    def key(self) -> str | None:
        """The ``cmd:`` key it is filed under (``cmd:pnpm dev``: the filter is left out; ``runs`` tells them apart)."""
        return command_key(self.runs)


def start_of(ep: Episode) -> Start | None:
    """The background start a memory records, or None."""
    found = _START.match(ep.full_content or "")
    if not found:
        return None
    return Start(ep.id, found.group(2).strip(), found.group(1), ep.created_at or 0, ep.session_id)


def stops(call: StoredToolCall) -> str | None:
    """What a call stopped: its task's id (a TaskStop), ``"*"`` for a shell call that kills (which process is not
    known), None for any other call."""
    if call.failed:
        return None
    if call.tool in STOP_TOOLS:
        return call.target or "*"
    if call.tool == "Bash" and call.target and kills(call.target):
        return "*"
    return None


def left_running(starts: Iterable[Start], calls: Iterable[StoredToolCall]) -> list[Start]:
    """The starts no later call stopped, the oldest first. `calls`: the stopping calls of the sessions the starts
    were read from (``stops``)."""
    stopped: dict[str, int] = {}  # task id (or "*": any) → when a call last stopped it
    for call in calls:
        what = stops(call)
        if what is not None:
            stopped[what] = max(stopped.get(what, 0), call.ts_ms or 0)
    return sorted((s for s in starts if s.ts_ms > max(stopped.get("*", -1), stopped.get(s.task or "*", -1))),
                  key=lambda s: s.ts_ms)


def told_together(starts: list[Start], last_calls: dict[str, int]) -> tuple[list[Start], int] | None:
    """What is told as left running: the starts of the sessions whose last call (`last_calls`) came within
    ``LEFT_RUNNING_HOURS`` of the newest such session's, one a command (its newest), the oldest first; and that
    newest last call. None when nothing is left running."""
    ended = [last_calls[s.session_id] for s in starts if s.session_id in last_calls]
    if not ended:
        return None
    newest = max(ended)
    kept: dict[str, Start] = {}
    for start in sorted(starts, key=lambda s: s.ts_ms):
        if last_calls.get(start.session_id or "", -1) >= newest - LEFT_RUNNING_HOURS * 3_600_000:
            kept.pop(start.runs, None)
            kept[start.runs] = start
    return list(kept.values()), newest
