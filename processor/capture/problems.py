"""Which capture problems exist right now, and whether one is news worth a log line.

A transcript that stays unreadable, a symlink loop, a FIFO named ``*.jsonl``: the
rescan meets the same unfixable thing every minute. The registry keys each problem
by (path, kind) and logs it only when it appears or its detail changes, and once
more (at info) when it goes away. ``current()`` is what `engram status` and
`engram doctor` show.

The capture thread writes; the control plane reads from its own thread: one lock.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Where a running processor publishes its current problems, inside its run directory.
PROBLEMS_FILE = "capture-problems.json"
# Problems a discover pass can see; each pass replaces them all (a fixed one disappears).
DISCOVER_KINDS = frozenset({"root", "unreadable_dir", "symlink_loop", "dangling_link", "not_regular", "cannot_stat"})
# Problems only reading a file reveals; a later successful read clears the first two.
CANNOT_OPEN, CANNOT_READ, LONG_LINE = "cannot_open", "cannot_read", "long_line"


@dataclass(frozen=True)
class Problem:
    path: str
    kind: str
    detail: str  # what is wrong and what to do; a different detail is a new state, logged again
    since: float  # unix time it was first seen in this state


def file_type(mode: int) -> str:
    """A short name for a non-regular file type."""
    for test, name in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def not_regular(path: str | os.PathLike[str], mode: int) -> tuple[str, str]:
    return "not_regular", f"is {file_type(mode)}, not a transcript file; skipped without opening it"


def stat_problem(path: str | os.PathLike[str], exc: OSError, *, directory: bool = False) -> tuple[str, str]:
    """(kind, detail) for a path that cannot be stat'ed or listed."""
    if exc.errno == errno.ELOOP:
        return "symlink_loop", "symbolic link loop; skipped (remove or fix the link)"
    if exc.errno == errno.ENOENT and os.path.islink(path):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return "dangling_link", f"symbolic link to missing {target}; skipped (remove or fix the link)"
    if exc.errno in (errno.EACCES, errno.EPERM):
        what = "directory" if directory else "file"
        return ("unreadable_dir" if directory else "cannot_stat",
                f"{what} is not readable ({exc.strerror}); skipped (check its permissions)")
    return ("unreadable_dir" if directory else "cannot_stat", f"{exc.strerror or exc}; skipped")


class CaptureProblems:
    """The current capture problems; each is logged once per (path, kind, detail)."""

    def __init__(self, *, quiet: bool = False, save_to: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._current: dict[tuple[str, str], Problem] = {}
        self.quiet = quiet  # doctor's fresh pass: collect, do not log
        self.save_to = save_to  # the processor publishes its list here for `engram status`

    def report(self, path: str | os.PathLike[str], kind: str, detail: str) -> bool:
        """Record a problem; logs and returns True only when it is new or its detail changed."""
        key = (str(path), kind)
        with self._lock:
            old = self._current.get(key)
            if old is not None and old.detail == detail:
                return False
            self._current[key] = Problem(str(path), kind, detail, time.time())
        if not self.quiet:
            log.warning("%s: %s", path, detail)
        self._save()
        return True

    def resolve(self, path: str | os.PathLike[str], kinds: Iterable[str]) -> None:
        """The given kinds of problem no longer hold for path."""
        gone = []
        with self._lock:
            for kind in kinds:
                problem = self._current.pop((str(path), kind), None)
                if problem is not None:
                    gone.append(problem)
        self._announce_resolved(gone)

    def replace_discovered(self, found: Iterable[tuple[str, str, str]]) -> None:
        """A discover pass saw exactly `found` (path, kind, detail): report those, resolve the rest."""
        seen = set()
        for path, kind, detail in found:
            seen.add((path, kind))
            self.report(path, kind, detail)
        with self._lock:
            stale = [key for key, p in self._current.items()
                     if key not in seen and (p.kind in DISCOVER_KINDS or not os.path.lexists(p.path))]
            gone = [self._current.pop(key) for key in stale]
        self._announce_resolved(gone)

    def current(self) -> list[dict[str, object]]:
        with self._lock:
            problems = sorted(self._current.values(), key=lambda p: (p.path, p.kind))
        return [asdict(p) for p in problems]

    def _announce_resolved(self, gone: list[Problem]) -> None:
        if not gone:
            return
        if not self.quiet:
            for problem in gone:
                log.info("%s: resolved (%s)", problem.path, problem.kind)
        self._save()

    def _save(self) -> None:
        if self.save_to is None:
            return
        tmp = self.save_to.with_name(self.save_to.name + f".{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(self.current(), f)
            os.replace(tmp, self.save_to)
        except OSError as exc:  # status only: capture must not stop over it
            log.debug("cannot write %s: %s", self.save_to, exc)

    def discard_saved(self) -> None:
        if self.save_to is not None:
            self.save_to.unlink(missing_ok=True)


def load_saved(path: Path) -> list[dict[str, object]]:
    """The list a running processor published; empty when there is none."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [p for p in data if isinstance(p, dict)] if isinstance(data, list) else []
