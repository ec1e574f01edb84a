"""Which files are session transcripts worth tailing: Claude Code's here, and one walk for every agent's.

A Claude Code session transcript is ``<root>/<encoded project dir>/<session id>.jsonl``.
Subagent transcripts (``agent-*.jsonl``, anything under ``subagents/``), empty
files and the transcripts of Engram's own LLM jobs are not. The Codex CLI's and the Gemini CLI's
transcripts are found by the same walk (``discover``), each format saying which folders and files are its
sessions (``processor/capture/codex.py``, ``processor/capture/gemini.py``).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from processor.capture.formats import CLAUDE, ClaudeReader, LineReader, SessionInfo, TranscriptFormat, accepts_path
from processor.capture.problems import CaptureProblems, load_saved, not_regular, stat_problem


def encoded_project_dir(cwd: Path) -> str:
    """The folder name Claude Code gives the transcripts of sessions started in `cwd`."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(cwd))


class TranscriptFilter:
    """Claude Code's transcripts: decides, from the path alone, whether a file is a session transcript to capture."""

    agent = CLAUDE
    depth = 2  # <root>/<project dir>/<session>.jsonl
    report_missing_root = True

    def __init__(self, root: Path, agent_workdir: Path | None = None) -> None:
        self.root = Path(os.path.abspath(root))
        # Claude Code names the folder after the resolved cwd: cover a symlinked ENGRAM_HOME too.
        self._own_dirs = (
            {encoded_project_dir(Path(os.path.abspath(agent_workdir))), encoded_project_dir(agent_workdir.resolve())}
            if agent_workdir else set()
        )

    def is_own_agent_dir(self, project_dir_name: str) -> bool:
        return any(project_dir_name == own or project_dir_name.startswith(own + "-") for own in self._own_dirs)

    def wants_dir(self, parts: tuple[str, ...]) -> bool:
        return len(parts) == 1 and not self.is_own_agent_dir(parts[0])

    def wants_file(self, parts: tuple[str, ...]) -> bool:
        # subagents/ and any other nesting live deeper than the depth
        return parts[-1].endswith(".jsonl") and not parts[-1].startswith("agent-")

    def accepts(self, path: Path) -> bool:
        return accepts_path(self, path)

    def session_info(self, path: Path, f: BinaryIO) -> SessionInfo:
        """Claude Code names each transcript after its session id; every line carries its own cwd."""
        return SessionInfo(path.stem)

    def reader(self, info: SessionInfo) -> LineReader:
        return ClaudeReader()


def discover(root: Path, transcript_filter: TranscriptFormat, since_days: float | None,
             problems: CaptureProblems | None = None) -> list[Path]:
    """Non-empty session transcripts of one format under root, modified within since_days (None = all), oldest
    first (``discover_all`` for several agents at once)."""
    if Path(os.path.abspath(root)) != transcript_filter.root:
        raise ValueError(f"{root} is not the root of {transcript_filter.agent}'s transcripts "
                         f"({transcript_filter.root})")
    return discover_all([transcript_filter], since_days, problems)


def discover_all(formats: Sequence[TranscriptFormat], since_days: float | None,
                 problems: CaptureProblems | None = None) -> list[Path]:
    """Non-empty session transcripts of every format, modified within since_days (None = all), oldest first.

    What cannot be captured (an unreadable folder, a symlink loop, a dangling link, a FIFO named
    ``*.jsonl``) goes to `problems`, which logs each only when it is new; non-regular files are
    recognised by stat and never opened. A missing root is a problem only for a format that says so
    (Claude Code's): an agent that is not installed has no folder.
    """
    problems = problems if problems is not None else CaptureProblems()
    cutoff = time.time() - since_days * 86400 if since_days is not None else None
    found: list[tuple[float, str]] = []
    seen: list[tuple[str, str, str]] = []
    for fmt in formats:
        try:
            top = list(os.scandir(fmt.root))
        except FileNotFoundError:
            if fmt.report_missing_root:
                seen.append((str(fmt.root), "root", "transcripts root does not exist (yet); nothing to capture"))
            continue
        except OSError as exc:
            seen.append((str(fmt.root), "root", f"cannot list the transcripts root: {exc.strerror or exc}"))
            continue
        _walk(fmt, top, (), cutoff, found, seen)
    problems.replace_discovered(seen)
    found.sort()
    return [Path(p) for _, p in found]


def _walk(fmt: TranscriptFormat, entries: list[os.DirEntry[str]], parts: tuple[str, ...], cutoff: float | None,
          found: list[tuple[float, str]], seen: list[tuple[str, str, str]]) -> None:
    """The session files among `entries` (the folder at `parts` below the root), descending to the format's depth."""
    if len(parts) + 1 < fmt.depth:
        for folder in entries:
            try:
                if not folder.is_dir() or not fmt.wants_dir((*parts, folder.name)):
                    if folder.is_symlink() and not os.path.exists(folder.path):
                        seen.append((folder.path, *stat_problem(folder.path, _stat_error(folder.path),
                                                                directory=True)))
                    continue
                inner = list(os.scandir(folder.path))
            except OSError as exc:  # vanished, unreadable, or a symlink loop
                if os.path.lexists(folder.path):
                    seen.append((folder.path, *stat_problem(folder.path, exc, directory=True)))
                continue
            _walk(fmt, inner, (*parts, folder.name), cutoff, found, seen)
        return
    for entry in entries:
        if not fmt.wants_file((*parts, entry.name)):
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


def _stat_error(path: str) -> OSError:
    try:
        os.stat(path)
    except OSError as exc:
        return exc
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


def survey(formats: TranscriptFormat | Sequence[TranscriptFormat],
           processor_problems: Path | None = None) -> list[dict[str, object]]:
    """The capture problems right now: a fresh, silent discover pass, plus what the running processor
    published in `processor_problems` (over-long lines, unreadable files: only reading reveals those)."""
    fresh = CaptureProblems(quiet=True)
    discover_all([formats] if not isinstance(formats, Sequence) else formats, None, fresh)
    merged = {(str(p["path"]), str(p["kind"])): p for p in fresh.current()}
    if processor_problems is not None:
        for problem in load_saved(processor_problems):
            merged.setdefault((str(problem.get("path")), str(problem.get("kind"))), problem)
    return [merged[key] for key in sorted(merged)]
