"""Which files are Claude Code session transcripts worth tailing.

A session transcript is ``<root>/<encoded project dir>/<session id>.jsonl``.
Subagent transcripts (``agent-*.jsonl``, anything under ``subagents/``), empty
files and the transcripts of Engram's own LLM jobs are not.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from pathlib import Path

from processor.capture.problems import CaptureProblems, load_saved, not_regular, stat_problem


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


def discover(root: Path, transcript_filter: TranscriptFilter, since_days: float | None,
             problems: CaptureProblems | None = None) -> list[Path]:
    """Non-empty session transcripts under root modified within since_days (None = all), oldest first.

    What cannot be captured (an unreadable folder, a symlink loop, a dangling link, a FIFO named
    ``*.jsonl``) goes to `problems`, which logs each only when it is new; non-regular files are
    recognised by stat and never opened.
    """
    problems = problems if problems is not None else CaptureProblems()
    cutoff = time.time() - since_days * 86400 if since_days is not None else None
    found: list[tuple[float, str]] = []
    seen: list[tuple[str, str, str]] = []
    try:
        project_dirs = list(os.scandir(root))
    except FileNotFoundError:
        seen.append((str(root), "root", "transcripts root does not exist (yet); nothing to capture"))
        project_dirs = []
    except OSError as exc:
        seen.append((str(root), "root", f"cannot list the transcripts root: {exc.strerror or exc}"))
        project_dirs = []
    for project_dir in project_dirs:
        try:
            if not project_dir.is_dir() or transcript_filter.is_own_agent_dir(project_dir.name):
                if project_dir.is_symlink() and not os.path.exists(project_dir.path):
                    seen.append((project_dir.path, *stat_problem(project_dir.path, _stat_error(project_dir.path),
                                                                 directory=True)))
                continue
            entries = list(os.scandir(project_dir.path))
        except OSError as exc:  # vanished, unreadable, or a symlink loop
            if os.path.lexists(project_dir.path):
                seen.append((project_dir.path, *stat_problem(project_dir.path, exc, directory=True)))
            continue
        for entry in entries:
            if not entry.name.endswith(".jsonl") or entry.name.startswith("agent-"):
                continue
            try:
                st = entry.stat()
            except FileNotFoundError as exc:
                if entry.is_symlink():  # a dangling link; a file deleted just now is no problem
                    seen.append((entry.path, *stat_problem(entry.path, exc)))
                continue
            except OSError as exc:
                seen.append((entry.path, *stat_problem(entry.path, exc)))
                continue
            if not stat.S_ISREG(st.st_mode):
                seen.append((entry.path, *not_regular(entry.path, st.st_mode)))
                continue
            if st.st_size == 0:
                continue
            if cutoff is not None and st.st_mtime < cutoff:
                continue
            found.append((st.st_mtime, entry.path))
    problems.replace_discovered(seen)
    found.sort()
    return [Path(p) for _, p in found]


def _stat_error(path: str) -> OSError:
    try:
        os.stat(path)
    except OSError as exc:
        return exc
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


def survey(transcript_filter: TranscriptFilter, processor_problems: Path | None = None) -> list[dict[str, object]]:
    """The capture problems right now: a fresh, silent discover pass, plus what the running processor
    published in `processor_problems` (over-long lines, unreadable files: only reading reveals those)."""
    fresh = CaptureProblems(quiet=True)
    discover(transcript_filter.root, transcript_filter, None, fresh)
    merged = {(str(p["path"]), str(p["kind"])): p for p in fresh.current()}
    if processor_problems is not None:
        for problem in load_saved(processor_problems):
            merged.setdefault((str(problem.get("path")), str(problem.get("kind"))), problem)
    return [merged[key] for key in sorted(merged)]
