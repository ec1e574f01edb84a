"""Whether an agent's CLI still runs in a folder. The Gemini CLI writes no end of turn: a turn whose tool call
never came back (the CLI killed, the terminal closed) is over once no process of that CLI runs in the session's
folder any more. Read from the process table through psutil, never by hand."""

from __future__ import annotations

import os
from collections.abc import Collection

import psutil


def working_folders(names: Collection[str]) -> list[str] | None:
    """The working folders of the running processes called one of `names` (by their executable or the script they
    run: the Gemini CLI runs as ``node …/bin/gemini``); None when the process table cannot be read, or one of those
    processes cannot be looked into (then nothing may be taken to be gone)."""
    wanted = set(names)
    folders: list[str] = []
    try:
        for proc in psutil.process_iter(["name", "cmdline", "cwd"]):
            info = proc.info
            called = {os.path.basename(part) for part in (info.get("cmdline") or [])[:3]} | {info.get("name") or ""}
            if not called & wanted:
                continue
            if not info.get("cwd"):
                return None  # another user's, or gone while read: it could be the one we look for
            folders.append(os.path.realpath(info["cwd"]))
    except psutil.Error:
        return None
    return folders


def runs_in(folders: list[str] | None, folder: str) -> bool:
    """Whether one of `folders` (``working_folders``) is `folder` or below it; True when they are unknown."""
    if folders is None:
        return True
    top = os.path.realpath(folder)
    return any(f == top or f.startswith(top.rstrip(os.sep) + os.sep) for f in folders)
