"""The close-out routine a project's sessions repeat at the end of their tasks, stated as a convention.

Teams have a routine for finishing a task (tests and linter, close the ticket, commit, push) that sessions
carry out every time and nobody ever writes down. It shows in the tool calls: the shell commands a task runs
after its last file change. A command (by its ``cmd:`` key, ``processor/hook_kit/tool_keys.py``) that closes at
least ``MIN_TASKS`` tasks in at least ``MIN_SESSIONS`` sessions belongs to the routine, and a routine has
at least two steps; it lists them in the order they usually run, each as the project types it when one short
form recurs (else by its program and subcommand), in one sentence:

    Close-out routine: `uv run pytest -q` → `uv run ruff check .` → `git commit` → `git push` (7 tasks,
    4 sessions).

It is one ``convention`` memory per project, with the commands as entities, so the PreToolUse hook tells a
later session the whole routine when it starts closing out (``processor/recall/lesson_index.py``) and the
SessionStart digest lists it with the project's rules. A changed routine is a new memory that supersedes
the old one. Only commands that ran clean count: a failed run is not the routine.

What sessions did is not a rule the user made. A step is left out when it contradicts what the user said or
what happened: a command the user declined or a hook blocked in any of the project's sessions, or one a rule or
decision of the project rules out ("never `git add -A`": ``forbidden``). A step is shown without the files it
named (``git add CLAUDE.md`` is that task's file, not the routine's).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict

from processor.hook_kit.tool_keys import command_key, command_keys, path_like
from processor.memory.findings import Finding
from processor.memory.identity import episode_id
from processor.store.tool_calls import StoredToolCall

MIN_TASKS = 3
MIN_SESSIONS = 2
MIN_STEPS = 2
MAX_STEPS = 6
SHOWN_CHARS = 40
_CHANGES = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
# Commands that only look: checking the state before a commit is not a step of closing out.
_LOOKS = ("cmd:git status", "cmd:git diff", "cmd:git log", "cmd:git show", "cmd:git branch", "cmd:git fetch",
          "cmd:git remote")


def _closing_commands(calls: list[StoredToolCall]) -> list[tuple[str, str]]:
    """(cmd key, command line) of the clean shell commands after a task's last file change, in order."""
    last_change = max((i for i, c in enumerate(calls) if c.tool in _CHANGES), default=None)
    if last_change is None:
        return []
    found: list[tuple[str, str]] = []
    for call in calls[last_change + 1:]:
        if call.tool != "Bash" or call.failed or not call.target:
            continue
        for segment_key in command_keys(call.target):
            if segment_key.startswith(_LOOKS):
                continue
            if segment_key.startswith("cmd:") and all(segment_key != k for k, _ in found):
                found.append((segment_key, _line_for(call.target, segment_key)))
    return found


def _line_for(command: str, key: str) -> str:
    """The simple command of a command line that has this key (what the project typed for that step)."""
    for line in command.replace("&&", "\n").replace(";", "\n").splitlines():
        if command_key(line.strip()) == key:
            return line.strip()
    return key[4:]


def tasks_of(calls: list[StoredToolCall], prompt_times: list[int]) -> list[list[StoredToolCall]]:
    """A session's tool calls cut into tasks at its user messages' times."""
    tasks: dict[int, list[StoredToolCall]] = defaultdict(list)
    for call in calls:
        if call.ts_ms is not None:
            tasks[bisect.bisect_right(prompt_times, call.ts_ms)].append(call)
    return [tasks[k] for k in sorted(tasks)]


_REFUSED = ("doesn't want to proceed", "user doesn't want", "was rejected", "hook blocked", "blocked by",
            "was blocked", "permission denied by", "not allowed")


def _refused(calls: list[StoredToolCall]) -> tuple[set[str], list[str]]:
    """The keys and typed commands the user declined or a hook blocked: never a step of the routine."""
    keys: set[str] = set()
    typed: list[str] = []
    for call in calls:
        if call.tool == "Bash" and call.failed and call.target and any(m in (call.error or "").lower()
                                                                       for m in _REFUSED):
            for line in call.target.replace("&&", "\n").replace(";", "\n").splitlines():
                key = command_key(line.strip())
                if key:
                    typed.append(" ".join(line.split()))
                    if _is_bare(line, key):
                        keys.add(key)
    return keys, typed


def _is_bare(line: str, key: str) -> bool:
    """The command is its key alone (``git push``), not a form of it with flags (``git push --force``)."""
    return " ".join(line.split()) == key[4:]


def _ruled_out(line: str, forbidden: list[str]) -> bool:
    shown = " ".join(line.split())
    return any(shown == f or shown.startswith(f + " ") for f in forbidden)


def routine(project: str, sessions: dict[str, list[list[StoredToolCall]]],
            forbidden: list[str] | tuple[str, ...] = ()) -> Finding | None:
    """The project's close-out routine from its sessions' tasks, or None when nothing repeats enough (miner
    ``routine``): made when a task last closed out this way, the memory's time, not the clock's. `forbidden`:
    commands the project's rules and decisions rule out, as typed (``git add -A``)."""
    refused_keys, refused_typed = _refused([c for tasks in sessions.values() for task in tasks for c in task])
    forbidden = [" ".join(f.split()) for f in (*forbidden, *refused_typed) if f.strip()]
    task_count: Counter[str] = Counter()
    last_ms = 0
    session_sets: dict[str, set[str]] = defaultdict(set)
    positions: dict[str, list[float]] = defaultdict(list)
    typed: dict[str, Counter[str]] = defaultdict(Counter)
    for session_id, tasks in sessions.items():
        for task in tasks:
            closing = _closing_commands(task)
            if closing:
                last_ms = max(last_ms, max(c.ts_ms or 0 for c in task))
            for position, (key, line) in enumerate(closing):
                task_count[key] += 1
                session_sets[key].add(session_id)
                positions[key].append(position / max(len(closing) - 1, 1))
                typed[key][line] += 1
    steps = [k for k, n in task_count.items() if n >= MIN_TASKS and len(session_sets[k]) >= MIN_SESSIONS
             and k not in refused_keys and not any(_ruled_out(line, forbidden) for line in typed[k])]
    if not steps:
        return None
    steps.sort(key=lambda k: (sorted(positions[k])[len(positions[k]) // 2], -task_count[k]))
    steps = steps[:MAX_STEPS]
    if len(steps) < MIN_STEPS:
        return None  # one command after every change is a habit, not a routine to tell anyone
    shown = [_as_typed(k, typed[k]) for k in steps]
    tasks = max(task_count[k] for k in steps)
    sessions_seen = len(set().union(*(session_sets[k] for k in steps)))
    # Few words besides the commands: a generated sentence's boilerplate ("in this project", "the last steps")
    # would otherwise match every query that says those words.
    steps_text = " → ".join(f"`{line}`" for line in shown)
    text = f"Close-out routine: {steps_text} ({tasks} tasks, {sessions_seen} sessions)."
    # Normal, not high: it is in the digest by its kind, and the ranking's floor for important memories would
    # lift a routine (which names the project's commands) over what answers a query.
    return Finding(id=episode_id(f"routine:{project}:{' '.join(steps)}"), kind="convention", summary=text,
                   full_content=text, entities=[f"$ {line}" for line in shown], source_uuids=[], created_at=last_ms,
                   miner="routine", importance="normal")


def _as_typed(key: str, typed: Counter[str]) -> str:
    """The step as the project usually types it, without the files it named, when one form recurs and is short;
    else its program and subcommand (a one-off form, such as a test file's path, says nothing about the
    routine)."""
    forms: Counter[str] = Counter()
    for line, count in typed.items():
        forms[" ".join(w for w in line.split() if not path_like(w))] += count
    line, count = forms.most_common(1)[0]
    return line if count >= 2 and len(line) <= SHOWN_CHARS else key[4:]
