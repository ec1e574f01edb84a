"""Which files are Claude Code session transcripts worth tailing.

A session transcript is ``<root>/<encoded project dir>/<session id>.jsonl``.
Subagent transcripts (``agent-*.jsonl``, anything under ``subagents/``), empty
files and the transcripts of Engram's own LLM jobs are not.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

log = logging.getLogger(__name__)


def encoded_project_dir(cwd: Path) -> str:
    """The folder name Claude Code gives the transcripts of sessions started in `cwd`."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(cwd))


class TranscriptFilter:
    """Decides, from the path alone, whether a file is a session transcript to capture."""

    def __init__(self, root: Path, agent_workdir: Path | None = None) -> None:
        self.root = Path(os.path.abspath(root))
        # Claude Code names the folder after the resolved cwd: cover a symlinked ENGRAM_HOME too.
        self._own_dirs = (
            {encoded_project_dir(Path(os.path.abspath(agent_workdir))), encoded_project_dir(agent_workdir.resolve())}
            if agent_workdir else set()
        )

    def is_own_agent_dir(self, project_dir_name: str) -> bool:
        return any(project_dir_name == own or project_dir_name.startswith(own + "-") for own in self._own_dirs)

    def accepts(self, path: Path) -> bool:
        try:
            rel = Path(os.path.abspath(path)).relative_to(self.root)
        except ValueError:
            return False
        parts = rel.parts
        if len(parts) != 2:  # subagents/ and any other nesting live deeper
            return False
        project_dir, name = parts
        return name.endswith(".jsonl") and not name.startswith("agent-") and not self.is_own_agent_dir(project_dir)


def discover(root: Path, transcript_filter: TranscriptFilter, since_days: float | None) -> list[Path]:
    """Non-empty session transcripts under root modified within since_days (None = all), oldest first."""
    cutoff = time.time() - since_days * 86400 if since_days is not None else None
    found: list[tuple[float, str]] = []
    try:
        project_dirs = list(os.scandir(root))
    except FileNotFoundError:
        log.warning("transcripts root %s does not exist (yet); nothing to capture", root)
        return []
    except OSError as exc:
        log.warning("cannot list transcripts root %s: %s", root, exc)
        return []
    for project_dir in project_dirs:
        try:
            if not project_dir.is_dir() or transcript_filter.is_own_agent_dir(project_dir.name):
                continue
            entries = list(os.scandir(project_dir.path))
        except OSError as exc:  # vanished, unreadable, or a symlink loop
            log.warning("cannot list %s: %s; skipped", project_dir.path, exc)
            continue
        for entry in entries:
            if not entry.name.endswith(".jsonl") or entry.name.startswith("agent-"):
                continue
            try:
                st = entry.stat()
            except OSError as exc:
                log.warning("cannot stat %s: %s; skipped", entry.path, exc)
                continue
            if not entry.is_file() or st.st_size == 0:
                continue
            if cutoff is not None and st.st_mtime < cutoff:
                continue
            found.append((st.st_mtime, entry.path))
    found.sort()
    return [Path(p) for _, p in found]
