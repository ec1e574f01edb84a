"""Watching the transcripts root: watchdog events become paths to tail.

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

from processor.capture.discover import TranscriptFilter

log = logging.getLogger(__name__)


class _QueueingHandler(FileSystemEventHandler):
    def __init__(self, transcript_filter: TranscriptFilter, paths: queue.Queue[Path | None]) -> None:
        self.filter = transcript_filter
        self.paths = paths

    def on_any_event(self, event: FileSystemEvent) -> None:
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
        path = Path(target)
        if target and self.filter.accepts(path):
            self.paths.put(path)


class TranscriptWatcher:
    """Recursive watchdog observer on the transcripts root that feeds a queue of paths."""

    def __init__(self, transcript_filter: TranscriptFilter, paths: queue.Queue[Path | None]) -> None:
        self.filter = transcript_filter
        self.paths = paths
        self._observer: Observer | None = None

    @property
    def alive(self) -> bool:
        return self._observer is not None and self._observer.is_alive()

    def start(self) -> bool:
        """Start watching; False when the root does not exist yet (call again later)."""
        self.stop()
        if not self.filter.root.is_dir():
            return False
        observer = Observer()
        observer.schedule(_QueueingHandler(self.filter, self.paths), str(self.filter.root), recursive=True)
        try:
            observer.start()
        except OSError as exc:
            log.warning("cannot watch %s: %s; relying on periodic rescans", self.filter.root, exc)
            return False
        self._observer = observer
        return True

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
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
        observer = Observer()
        observer.schedule(_NotifyingHandler(self.notify), str(self.folder), recursive=False)
        observer.start()
        self._observer = observer

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None
