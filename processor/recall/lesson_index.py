"""The per-project index the PreToolUse hook reads to speak about the file or command in hand.

When an earlier session left a lesson, a rule or a decision about a file or a command, the agent should hear
it just before it touches that file or runs that command, not at a user message that merely shares words.
The hook cannot search (it is stdlib-only and its start-up is its cost), so the processor files each such
memory under the keys of what it is about (``recall_hook/tool_keys.py``: ``file:…`` and ``cmd:…``) in a
small JSON file per project, ``recollections/lessons/<sha1 of the project>.json`` (a folder of its own:
nothing that scans the session files mistakes them for one)::

    {"project": str, "root": str, "at": ms, "keys": {"cmd:uv run pytest": ["ep_…"], "file:src/a.py": [...]},
     "bites": {"ep_…": {"bite": str, "date": "YYYY-MM-DD", "importance": str, "kind": str}}}

What is filed: memories that may be shown unasked (``processor.memory.unasked.pushable``) with something to
file them under: a lesson's failed command (entity ``$ …``) and changed files, a rule's backticked command
or path. Newest first, at most ``IDS_PER_KEY`` per key and ``MAX_BITES`` in all, under ``INDEX_LIMIT`` bytes.

The session's recollection file names its project's index (``"lessons"``), and the writer brings the index
up to date when the project's memories changed (``refresh``), so a lesson learned an hour ago in another
session is there for the next tool call. A forgotten memory leaves every index at once (``drop``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from processor.clock import now_ms, utc_date
from processor.files import ensure_private_dir, write_atomic
from processor.memory.unasked import bite_of, pushable
from processor.store import episodes as episodes_sql
from processor.store.episodes import Episode
from recall_hook.tool_keys import GENERIC, command_keys

log = logging.getLogger(__name__)

FOLDER = "lessons"  # recall_hook/hook_io.py LESSONS_FOLDER
IDS_PER_KEY = 5
MAX_BITES = 300
INDEX_LIMIT = 64 * 1024  # recall_hook/hook_io.py LESSONS_LIMIT
SCANNED = 5_000  # the project's newest memories looked at


def index_name(project: str | None) -> str:
    return hashlib.sha1((project or "").encode()).hexdigest()[:16] + ".json"


def keys_of(ep: Episode, root: str | None) -> list[str]:
    """What a memory is about, as tool-call keys: its commands and the files it names."""
    keys: list[str] = []
    for entity in ep.entities:
        entity = entity.strip().strip("`")
        if entity.startswith("$ "):
            found = command_keys(entity[2:], root)
        elif " " not in entity and ("/" in entity or "." in entity.strip(".")):
            found = command_keys("cat " + entity, root)  # a path: the file keys of `cat PATH`
        elif " " in entity and entity.split()[0] not in GENERIC:
            found = [k for k in command_keys(entity, root) if k.startswith("cmd:")]  # `uv run pytest -m x`
        else:
            found = []
        keys += [k for k in found if k not in keys]
    return keys


class LessonIndex:
    """Writes and refreshes the per-project index files in the recollections folder."""

    def __init__(self, recollections_dir: Path) -> None:
        self.folder = recollections_dir / FOLDER
        self._signatures: dict[str | None, tuple] = {}  # project → what its memories looked like when written

    def path(self, project: str | None) -> Path:
        return self.folder / index_name(project)

    def refresh(self, conn, project: str | None, root: str | None) -> str:
        """Bring the project's index up to date if its memories changed; returns the file's name."""
        signature = episodes_sql.memories_signature(conn, project)
        name = index_name(project)
        if self._signatures.get(project) == signature and (self.folder / name).exists():
            return name
        self.write(project, root, episodes_sql.project_memories(conn, project, SCANNED))
        self._signatures[project] = signature
        if len(self._signatures) > 1_000:  # one entry per project: only a store of many projects trims it
            self._signatures.pop(next(iter(self._signatures)))
        return name

    def write(self, project: str | None, root: str | None, memories: list[Episode]) -> Path:
        keys: dict[str, list[str]] = {}
        bites: dict[str, dict] = {}
        for ep in memories:  # newest first
            if len(bites) >= MAX_BITES or not pushable(ep):
                continue
            filed = False
            for key in keys_of(ep, root):
                ids = keys.setdefault(key, [])
                if len(ids) < IDS_PER_KEY:
                    ids.append(ep.id)
                    filed = True
            if filed:
                bites[ep.id] = {"bite": bite_of(ep), "date": utc_date(ep.created_at), "importance": ep.importance,
                                "kind": ep.kind}
        data = {"project": project, "root": root, "at": now_ms(), "keys": keys, "bites": bites}
        text = json.dumps(data, ensure_ascii=False)
        while len(text.encode()) > INDEX_LIMIT and bites:  # drop the oldest memories until it fits
            oldest = list(bites)[-1]
            del bites[oldest]
            data["keys"] = {k: [i for i in ids if i != oldest] for k, ids in keys.items()}
            data["keys"] = {k: ids for k, ids in data["keys"].items() if ids}
            keys = data["keys"]
            text = json.dumps(data, ensure_ascii=False)
        ensure_private_dir(self.folder.parent)
        ensure_private_dir(self.folder)
        path = self.path(project)
        write_atomic(path, text)
        return path

    def drop(self, ids: set[str] | frozenset[str]) -> int:
        """Take these memories out of every index (a forget); returns how many files were rewritten."""
        rewritten = 0
        try:
            entries = [e for e in os.scandir(self.folder) if e.name.endswith(".json") and not e.name.startswith(".")]
        except FileNotFoundError:
            return 0
        for entry in entries:
            try:
                data = json.loads(Path(entry.path).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            bites = data.get("bites") if isinstance(data, dict) else None
            if not isinstance(bites, dict) or not ids & bites.keys():
                continue
            data["bites"] = {i: b for i, b in bites.items() if i not in ids}
            data["keys"] = {k: [i for i in v if i not in ids] for k, v in (data.get("keys") or {}).items()}
            data["keys"] = {k: v for k, v in data["keys"].items() if v}
            write_atomic(Path(entry.path), json.dumps(data, ensure_ascii=False))
            rewritten += 1
        for project in list(self._signatures):
            self._signatures.pop(project)  # the next refresh rewrites from the store
        return rewritten
