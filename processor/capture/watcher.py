"""Watching the transcripts root: watchdog events become paths to tail (and auto-memory folders to re-read).

The observer thread only queues paths; the capture thread does the work, so
file events never touch the database from another thread.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from processor.capture.automem import memory_folder_of
from processor.capture.formats import TranscriptFormat

log = logging.getLogger(__name__)


def _watch(handler: FileSystemEventHandler, folder: Path, *, recursive: bool) -> Observer:
    """A started observer of `folder` (OSError when it cannot be watched)."""
    observer = Observer()
    observer.schedule(handler, str(folder), recursive=recursive)
    observer.start()
    return observer


def _unwatch(observer: Observer | None) -> None:
    if observer is not None:
        observer.stop()
        observer.join(timeout=5)


class _QueueingHandler(FileSystemEventHandler):
    def __init__(self, transcript_format: TranscriptFormat, paths: queue.Queue[Path | None],
                 on_memory: Callable[[Path], None] | None = None) -> None:
        self.filter = transcript_format
        self.paths = paths
        self.on_memory = on_memory

    def _auto_memory(self, event: FileSystemEvent) -> None:
        """A file in a project's auto-memory folder was written, moved or deleted: that folder is re-read."""
        if self.on_memory is None or event.event_type not in ("created", "modified", "closed", "moved", "deleted"):
            return
        folders = {memory_folder_of(Path(str(p)), self.filter)
                   for p in (event.src_path, getattr(event, "dest_path", "")) if p}
        for folder in folders - {None}:
            assert folder is not None
            self.on_memory(folder)

    def on_any_event(self, event: FileSystemEvent) -> None:
        if not event.is_directory:
            self._auto_memory(event)
        if event.is_directory:
            if event.event_type == "deleted" and Path(str(event.src_path)) == self.filter.root:
                log.warning("transcripts root %s was deleted; waiting for it to come back", event.src_path)
            return
        if event.event_type in ("created", "modified", "closed"):
            target = str(event.src_path)
        elif event.event_type == "moved":
            target = str(getattr(event, "dest_path", "") or "")
        elif event.event_type == "deleted":
            if self.filter.accepts(Path(str(event.src_path))):
                log.info("transcript %s was deleted; its captured messages are kept", event.src_path)
            return
        else:
            return
        path = self.filter.transcript_of(Path(target)) if target else None
        if path is not None:
            self.paths.put(path)


class TranscriptWatcher:
    """Recursive watchdog observer on the transcripts root that feeds a queue of paths."""

    def __init__(self, transcript_format: TranscriptFormat, paths: queue.Queue[Path | None],
                 on_memory: Callable[[Path], None] | None = None) -> None:
        self.filter = transcript_format
        self.paths = paths
        self.on_memory = on_memory  # called with a project's auto-memory folder when a file in it changes
        self._observer: Observer | None = None

    @property
    def alive(self) -> bool:
        return self._observer is not None and self._observer.is_alive()

    def start(self) -> bool:
        """Start watching; False when the root does not exist yet (call again later)."""
        self.stop()
        if not self.filter.root.is_dir():
            return False
        try:
            # A format whose files lie in the root itself (opencode's database) is not watched below it: opencode's
            # data folder also holds its snapshots (git repositories), many files that are no session's.
            observer = _watch(_QueueingHandler(self.filter, self.paths, self.on_memory), self.filter.root,
                              recursive=self.filter.depth > 1)
        except OSError as exc:
            log.warning("cannot watch %s: %s; relying on periodic rescans", self.filter.root, exc)
            return False
        self._observer = observer
        return True

    def stop(self) -> None:
        _unwatch(self._observer)
        self._observer = None


class _NotifyingHandler(FileSystemEventHandler):
    def __init__(self, notify: Callable[[], None]) -> None:
        self.notify = notify

    def on_any_event(self, event: FileSystemEvent) -> None:
        if not event.is_directory and event.event_type in ("created", "moved", "closed"):
            self.notify()


class FolderWatcher:
    """Calls `notify` when a file lands in one folder (not recursive), e.g. the remember queue."""

    def __init__(self, folder: Path, notify: Callable[[], None]) -> None:
        self.folder = folder
        self.notify = notify
        self._observer: Observer | None = None

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._observer = _watch(_NotifyingHandler(self.notify), self.folder, recursive=False)

    def stop(self) -> None:
        _unwatch(self._observer)
        self._observer = None


class _AnyEventHandler(FileSystemEventHandler):
    def __init__(self, notify: Callable[[], None]) -> None:
        self.notify = notify

    def on_any_event(self, event: FileSystemEvent) -> None:
        self.notify()


def nearest_existing(path: Path) -> Path | None:
    """The path itself or its closest ancestor that is a directory now."""
    for folder in (path, *path.parents):
        if folder.is_dir():
            return folder
    return None


class AppearanceWatcher:
    """Until a folder exists, watches its nearest existing ancestor (not recursively: that may be the home
    folder) and calls `notify` on any change there, so the caller can look again at once.

    A fresh home has no ``~/.claude/projects`` until Claude Code's first session writes its first line;
    without this, that session waited for the next periodic rescan (a minute) to be captured.
    """

    def __init__(self, target: Path, notify: Callable[[], None]) -> None:
        self.target = target
        self.notify = notify
        self.watched: Path | None = None
        self._observer: Observer | None = None

    def follow(self) -> bool:
        """(Re)point the watch at the nearest existing ancestor; False (and nothing watched) once the
        target exists or nothing can be watched."""
        folder = None if self.target.is_dir() else nearest_existing(self.target.parent)
        if folder == self.watched and (folder is None or self._observer is not None):
            return folder is not None
        self.stop()
        if folder is None:
            return False
        try:
            observer = _watch(_AnyEventHandler(self.notify), folder, recursive=False)
        except OSError as exc:
            log.warning("cannot watch %s for %s to appear: %s; relying on periodic rescans", folder, self.target, exc)
            return False
        self._observer, self.watched = observer, folder
        return True

    def stop(self) -> None:
        _unwatch(self._observer)
        self._observer = None
        self.watched = None
