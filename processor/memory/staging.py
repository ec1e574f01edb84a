"""Staging everything that then had to be partly undone, found without an LLM: a gotcha about ``git add -A``.

``git add -A`` (or ``.``, ``--all``, ``-u``, ``git commit -a``) swept in files — a user's own notes, build output,
``.DS_Store`` — that the next calls took out of the index again (``git reset <paths>``, ``git restore --staged
<paths>``). What was swept in, and how it was undone, is told before the next ``git add -A`` of the project: stage
files by name. One per round at most, mined with the round's lessons (``processor/memory/lessons.py``), whose
origin it is stored with. It goes once a later session stops tracking what was swept in on purpose (a clean ``git
rm --cached .DS_Store``: the project ignores it now; ``untracked``), as BookMinder did the day it learned it.
"""

from __future__ import annotations

from processor.memory.command_text import command_told, without_console
from processor.memory.findings import Finding
from processor.memory.identity import episode_id
from processor.memory.kinds import scope_for
from processor.redaction import redact
from processor.store.tool_calls import StoredToolCall

UNDONE_WITHIN_CALLS = 7  # the calls after a broad stage that may take its files out again


def _broad_stage(command: str) -> str | None:
    """``git add -A`` / ``git add .`` / ``git add --all`` / ``git commit -a``: staging everything, as typed."""
    for segment in command.replace("&&", "\n").replace(";", "\n").splitlines():
        words = segment.split()
        if len(words) >= 3 and words[0] == "git" and words[1] == "add" and any(w in ("-A", "--all", ".", "-u")
                                                                                for w in words[2:]):
            return " ".join(words[:3])
        if len(words) >= 3 and words[0] == "git" and words[1] == "commit" and any(
                w.startswith("-") and not w.startswith("--") and "a" in w for w in words[2:]):
            return "git commit -a"
    return None


def _unstaged(command: str) -> list[str]:
    """The paths a ``git reset <paths>`` or ``git restore --staged <paths>`` took out of the index."""
    for segment in without_console(command).replace("&&", "\n").replace(";", "\n").splitlines():
        words = segment.split()
        if words[:2] == ["git", "reset"] and not any(w.startswith(("--hard", "--soft", "--mixed", "HEAD"))
                                                     for w in words[2:]):
            return [w for w in words[2:] if not w.startswith("-") and w not in (".", "…")]
        if words[:2] == ["git", "restore"] and "--staged" in words:
            return [w for w in words[2:] if not w.startswith("-") and w not in (".", "…")]
    return []


def undone_staging(calls: list[StoredToolCall], project: str | None) -> list[Finding]:
    """Each broad stage among these calls that the calls after it partly undid, as a gotcha."""
    found: list[Finding] = []
    for index, call in enumerate(calls):
        staged = _broad_stage(call.target or "") if call.tool == "Bash" and not call.failed else None
        if staged is None:
            continue
        for later in calls[index + 1:index + 1 + UNDONE_WITHIN_CALLS]:
            paths = _unstaged(later.target or "") if later.tool == "Bash" and not later.failed else []
            if not paths:
                continue
            shown = ", ".join(f"`{p}`" for p in paths[:3])
            text = (f"`{staged}` here also staged {shown}, which had to be taken out again "
                    f"(`{command_told(later.target, 80, project)}`): stage the changed files by name.")
            seed = f"undone:{project}:{staged.split()[1]}:{' '.join(sorted(paths))}"
            found.append(Finding(id=episode_id(seed), kind="gotcha", summary=redact(text), full_content=redact(text),
                                 entities=[redact(f"$ {staged}"), *(redact(p) for p in paths[:3])],
                                 source_uuids=[call.use_uuid, later.use_uuid], created_at=later.ts_ms,
                                 miner="lesson", scope=scope_for(None, project)))
            break
    return found


def untracked(calls: list[StoredToolCall]) -> dict[str, StoredToolCall]:
    """The paths these calls took out of git's index on purpose, keeping the files (a clean ``git rm --cached
    <paths>``, not one whose failure an ``|| true`` hid), each with the call."""
    found: dict[str, StoredToolCall] = {}
    for call in calls:
        if call.tool != "Bash" or call.failed or not call.target:
            continue
        for segment in without_console(call.target).replace("&&", "\n").replace(";", "\n").splitlines():
            if "||" in segment:
                continue
            words = segment.split()
            if words[:2] == ["git", "rm"] and "--cached" in words:
                for word in words[2:]:
                    if not word.startswith("-") and not word.startswith(("2>", ">", "/dev/null")):
                        found.setdefault(word.rstrip("/"), call)
    return found
