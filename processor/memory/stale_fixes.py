"""Which error fixes a later session showed are no longer needed: the failing command ran clean without the fix.

A fix is told right after the same failure, and before the call once the failure recurred, for as long as it
holds. It stops holding when the project changes under it: the virtual environment a fix activated was replaced
(``pytest`` now runs clean bare), the tool a fix put on ``PATH`` is installed. The evidence is positive: a later
session ran the very command that failed (the same command line, as a memory writes it), it ran clean, and
nothing the fix added (its ``uses``: ``source``, ``activate``…) was in that command or in the session's calls
before it. Another command of the same program proves nothing (``node -e`` of another script) — unless the
failure was that program not found (``command not found: uv``): any clean run of it by its name shows the shell
has it now.

Only a failure that said something was missing (``command not found``, ``No module named``, ``not installed``…)
is retired this way: whether a tool exists is a fact of the environment, while most other failures depend on the
moment (a branch with no upstream yet, a lock file left behind, a hook that rewrote what was staged) and a clean
run later says nothing about the next time. A fix naming a path that is gone from the project (its virtualenv
folder removed) is retired by ``missing_paths`` when the project's folder is on this machine.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator

from processor.hook_kit.failure_keys import call_key
from processor.memory.absent_programs import runs_bare
from processor.memory.command_text import command_told, recursive_removes
from processor.memory.environments import missing_program
from processor.store.failures import FailureSignature
from processor.store.tool_calls import StoredToolCall

# What a failure says when something it needed is not there (English, the tools' own words).
_MISSING = re.compile(r"not found|no module named|cannot find module|is not installed|not installed|"
                      r"no such file or directory|unknown command|is not recogni[sz]ed", re.IGNORECASE)


def _words(command: str | None) -> set[str]:
    """A command's words as a fix's added words are compared with (a path by its last part)."""
    return {w.rstrip("/").rsplit("/", 1)[-1] for w in (command or "").split()}


def shell_calls(calls: list[StoredToolCall]) -> Iterator[tuple[StoredToolCall, set[str], set[str]]]:
    """One session's shell calls in order, each with its words and every word of the calls before it (what a
    call, with the session so far, may already apply of a fix)."""
    seen: set[str] = set()
    for call in calls:
        words = _words(call.target)
        if call.tool == "Bash" and call.target:
            yield call, words, seen
        seen |= words


def said_missing(fix: FailureSignature) -> bool:
    """Whether the failure said something it needed was missing (its signature's lines)."""
    return any(_MISSING.search(line) for line in fix.signature)


def retirable(fixes: Iterable[FailureSignature], session_id: str) -> list[FailureSignature]:
    """The fixes a session could show unneeded: told by a memory, with words the fix added, for a failure that
    said something was missing, never met in this session."""
    return [fix for fix in fixes if fix.memory_id and fix.uses and said_missing(fix) and session_id not in fix.sessions]


def ran_clean_without(fixes: Iterable[FailureSignature], failed_commands: dict[str, str],
                      calls: list[StoredToolCall], session_id: str) -> dict[str, StoredToolCall]:
    """The fixes (by memory id) that `calls` — one session's, in order — showed unneeded: a clean run of the
    command that failed (`failed_commands`: memory id → the failed command as its memory writes it), in a session
    other than those that failed it, after the fix was learned, with none of the fix's added words in it or in the
    session's calls before it. Each with the call that showed it."""
    by_key: dict[str, list[FailureSignature]] = {}
    for fix in retirable(fixes, session_id):
        if fix.memory_id in failed_commands:
            by_key.setdefault(fix.call_key, []).append(fix)
    if not by_key:
        return {}
    # A program that was not found is found once any command runs it by its name clean: not only the one that failed.
    missing = [(fix, fix.fail_key[5:]) for fixes_of_key in by_key.values() for fix in fixes_of_key
               if missing_program(fix.signature, fix.fail_key[5:])]
    shown: dict[str, StoredToolCall] = {}
    for call, words, seen in shell_calls(calls):
        if call.failed:
            continue
        found = [fix for fix, program in missing if runs_bare(call.target or "", program)]
        for fix in [*by_key.get(call_key(call.tool, call.target, "") or "", []), *found]:
            learned = fix.first_ms or 0
            same = fix in found or command_told(call.target) == failed_commands[fix.memory_id]  # type: ignore[index]
            if same and (call.ts_ms or 0) > learned and not any(u in seen or u in words for u in fix.uses or []):
                shown.setdefault(fix.memory_id, call)  # type: ignore[arg-type]
    return shown


def _project_paths(command: str, root: str) -> list[tuple[str, str]]:
    """The words of a command that name a path inside the project, each with that path relative to its root
    (a relative word is taken from the root, where the project's commands run)."""
    top = root.rstrip("/") + "/"
    found = []
    for word in (command or "").replace("`", " ").split():
        word = word.strip("'\";&|()")
        if not word or word.startswith(("-", "$", "~", "http")) or "=" in word or "*" in word or "{" in word:
            continue
        path = os.path.normpath(word if word.startswith("/") else top + word)
        if path.startswith(top) and not path[len(top):].startswith(".."):
            found.append((word, path[len(top):]))
    return found


def missing_paths(command: str, root: str | None) -> list[str]:
    """The paths inside the project that a fix's command names and whose top folder is gone (``venv/bin/activate``
    once ``venv/`` was removed), when the project's folder is on this machine ([] when it is not: nothing can be
    said). A path whose folder is there is kept: the fix may create the file."""
    if not root or not os.path.isdir(root):
        return []
    top = root.rstrip("/") + "/"
    return [word for word, relative in _project_paths(command, root) if "/" in word
            and not os.path.exists(top + relative) and not os.path.exists(top + relative.split("/", 1)[0])]




def removed_folders(calls: list[StoredToolCall], root: str | None) -> dict[str, StoredToolCall]:
    """The project's top folders (``venv``) that one session's `calls` removed and did not use again, each with
    the clean call that removed it. What the machine's folder holds is not read: a session replayed or run on
    another machine says it by what it ran. A folder made again is used again by a path inside it (``rm -rf .venv
    && uv venv``, then ``source .venv/bin/activate``): a bare word is not enough (``uv venv`` names no folder)."""
    if not root:
        return {}
    removed: dict[str, StoredToolCall] = {}
    for call in calls:
        if call.tool != "Bash" or not call.target:
            continue
        rest = call.target
        for step, paths in recursive_removes(call.target):
            rest = rest.replace(step, " ")  # what the command names besides what it removes
            if call.failed:
                continue
            for _, relative in _project_paths(" ".join(paths), root):
                if "/" not in relative.rstrip("/") and relative not in (".", ".."):
                    removed[relative.rstrip("/")] = call
        for name in names_removed(rest, list(removed), root):
            removed.pop(name)  # used again: made again, or not the folder the fix meant
    return removed


def names_removed(command: str | None, removed: Iterable[str], root: str | None) -> list[str]:
    """The removed folders a command names a path inside (``venv/bin/activate`` once ``venv`` was removed)."""
    if not command or not root:
        return []
    gone = set(removed)
    return list(dict.fromkeys(relative.split("/", 1)[0] for word, relative in _project_paths(command, root)
                              if "/" in word.rstrip("/") and relative.split("/", 1)[0] in gone))
