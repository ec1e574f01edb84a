"""Which files are session transcripts worth tailing: one walk of every captured agent's folders.

Each agent's format says which folders and files below its root are its sessions (``claude``, ``codex``,
``gemini``); the walk finds the non-empty ones, and reports once what it cannot read (``problems``).
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Sequence
from pathlib import Path

from processor.capture.formats import TranscriptFormat
from processor.capture.problems import CaptureProblems, load_saved, not_regular, stat_problem


def discover(root: Path, transcript_format: TranscriptFormat, since_days: float | None,
             problems: CaptureProblems | None = None) -> list[Path]:
    """Non-empty session transcripts of one format under root, modified within since_days (None = all), oldest
    first (``discover_all`` for several agents at once)."""
    if Path(os.path.abspath(root)) != transcript_format.root:
        raise ValueError(f"{root} is not the root of {transcript_format.agent}'s transcripts "
                         f"({transcript_format.root})")
    return discover_all([transcript_format], since_days, problems)


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
        modified = fmt.last_modified(entry.path, st)
        if cutoff is not None and modified < cutoff:
            continue
        found.append((modified, entry.path))


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
