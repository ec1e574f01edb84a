"""The commits no session pushed: where the last sessions left a branch, told before a pull into it.

cipher-box 02-10: a session committed the todo it was starting on `main` (git said ``[main 63dbde7] docs: start work
on todo``), branched, pushed the branch and merged its pull request. The next session's ``git checkout main && git
pull`` met "Need to specify how to reconcile divergent branches" and spent calls finding the stray local commit
(both readers: it needed to know). What a session committed is a memory (``processor/capture/signals.py``: "Committed
63dbde7 on `main`: …"); what it pushed is in its shell calls.

A commit is unpushed when no clean call after it pushed its branch — ``git push`` naming it (``git push -u origin
feat/x``, ``git push origin HEAD``), a bare ``git push`` from where the branch was checked out (the branch of the
session's newest commit before it, or of a ``git checkout``/``git switch`` earlier in the same command), or ``--all``
— nor reset it to its remote (``git reset --hard origin/main``). Only the project's last sessions on this machine
count (``lesson_index.UNPUSHED_SESSIONS``): a teammate's commit, its memory pulled from the shared database, is in
another checkout. A commit made here and pushed from another machine looks unpushed: the tell says what the
sessions here did, not what the remote holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from processor.hook_kit.branches import git_args, switched_to
from processor.hook_kit.tool_keys import simple_commands
from processor.store.episodes import Episode
from processor.store.tool_calls import StoredToolCall

_COMMITTED = re.compile(r"^Committed ([0-9a-f]{7,40}) on `([^`\n]+)`: (.*)", re.DOTALL)
ALL = "*"  # what ``git push --all`` pushes: every branch
# git push's options that take no value of their own (a value is written with `=`).
_PUSH_FLAGS_WITH_VALUE = frozenset({"-o", "--push-option", "--repo", "--receive-pack", "--exec"})


@dataclass(frozen=True)
class Commit:
    """A commit a session made, as its memory says it."""

    memory_id: str
    sha: str
    branch: str
    message: str
    ts_ms: int
    session_id: str | None


def commit_of(ep: Episode) -> Commit | None:
    """The commit a memory records ("Committed 63dbde7 on `main`: docs: start work on todo"), or None."""
    found = _COMMITTED.match(ep.summary or "")
    if not found:
        return None
    message = found.group(3).strip().splitlines()[0] if found.group(3).strip() else ""
    return Commit(ep.id, found.group(1), found.group(2), message, ep.created_at or 0, ep.session_id)


def pushed(command: str, current: str | None) -> set[str]:
    """The branches a (clean) command pushed: named ones, the checked-out one for a bare push (`current`, as a
    checkout earlier in the command moves it), every one (``ALL``) for ``--all``/``--mirror``."""
    found: set[str] = set()
    for segment in simple_commands(command):
        words = git_args(segment)
        if words is None:
            continue
        current = switched_to(words) or current
        if words[:1] != ["push"]:
            continue
        args, positional, skip = words[1:], [], False
        for word in args:
            if skip:
                skip = False
            elif word in _PUSH_FLAGS_WITH_VALUE:
                skip = True
            elif word in ("--all", "--mirror"):
                found.add(ALL)
            elif not word.startswith(("-", "2>", ">", "&")):
                positional.append(word.strip("'\""))
        refs = [ref.lstrip("+").partition(":")[0] for ref in positional[1:]]
        for ref in refs or ["HEAD"]:
            branch = current if ref == "HEAD" else ref.removeprefix("refs/heads/")
            if branch:
                found.add(branch)
    return found


def reset_to_remote(command: str) -> set[str]:
    """The branches a command reset to their remote's (``git reset --hard origin/main``): what they held locally
    only is gone."""
    found: set[str] = set()
    for segment in simple_commands(command):
        words = git_args(segment)
        if words and words[0] == "reset" and "--hard" in words:
            found |= {w.partition("/")[2] for w in words[1:] if "/" in w and not w.startswith("-")}
    return found


def unpushed(commits: Iterable[Commit], calls: Iterable[StoredToolCall], here: set[str]) -> dict[str, list[Commit]]:
    """Branch → its commits no later call pushed or reset away, the newest first. `calls`: the project's clean
    ``git push``/``git reset`` calls; `here`: the sessions whose commits count, captured on this machine — a commit
    another machine's session made (its memory pulled from the shared database) is not in this checkout, and its
    pushes are not among `calls`."""
    commits = sorted((c for c in commits if c.session_id in here), key=lambda c: c.ts_ms)
    cleared: dict[str, int] = {}  # branch → when a call last pushed it (or reset it to its remote)
    for call in calls:
        at = call.ts_ms or 0
        # Where a bare push was run from: the branch of its session's newest commit before it.
        current = next((c.branch for c in reversed(commits) if c.session_id == call.session_id and c.ts_ms <= at),
                       None)
        for branch in pushed(call.target or "", current) | reset_to_remote(call.target or ""):
            cleared[branch] = max(cleared.get(branch, 0), at)
    left: dict[str, list[Commit]] = {}
    for commit in reversed(commits):
        if commit.ts_ms > max(cleared.get(commit.branch, -1), cleared.get(ALL, -1)):
            left.setdefault(commit.branch, []).append(commit)
    return left
