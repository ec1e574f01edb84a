"""The long-running processor: discover, watch and tail every transcript until told to stop."""

from __future__ import annotations

import logging
import queue
import threading
import time
from pathlib import Path

import apsw

from processor.capture.backfill import backfill
from processor.capture.discover import TranscriptFilter, discover
from processor.capture.tailer import Tailer
from processor.capture.watcher import TranscriptWatcher
from processor.config import Settings, ensure_home
from processor.store import open_store

log = logging.getLogger(__name__)

# The loop wakes at least this often to notice stop requests and retry locked paths.
_IDLE_WAIT_SECONDS = 1.0


class Processor:
    """Owns the capture thread's DB connection, the watcher and the tail loop."""

    def __init__(self, settings: Settings, stop: threading.Event | None = None) -> None:
        self.settings = settings
        self.stop_event = stop or threading.Event()
        self.filter = TranscriptFilter(settings.transcripts_root, settings.agent_workdir)
        self.paths: queue.Queue[Path | None] = queue.Queue()
        self.started_at = time.time()
        self._conn: apsw.Connection | None = None
        self._tailer: Tailer | None = None

    def open(self) -> Tailer:
        ensure_home(self.settings)
        self._conn = open_store(self.settings.db_path)
        self._tailer = Tailer(
            self._conn,
            batch_bytes=int(self.settings.batch_bytes),
            max_line_bytes=int(self.settings.max_line_bytes),
        )
        return self._tailer

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def stop(self) -> None:
        """Ask the loop to finish; safe from a signal handler or another thread."""
        self.stop_event.set()
        self.paths.put(None)

    def run_once(self) -> int:
        """Capture what is on disk now, then return the number of new messages."""
        tailer = self.open()
        try:
            return backfill(tailer, self.filter, float(self.settings.recent_days)).messages
        finally:
            self.close()

    def run(self) -> None:
        """Capture until stop(): an initial pass, then watch events and periodic rescans."""
        tailer = self.open()
        watcher = TranscriptWatcher(self.filter, self.paths)
        try:
            watching = watcher.start()
            log.info("capturing %s (%s)", self.filter.root, "watching" if watching else "root missing, waiting")
            pending: set[Path] = set(discover(self.filter.root, self.filter, float(self.settings.recent_days)))
            next_rescan = time.monotonic() + float(self.settings.rescan_seconds)
            while not self.stop_event.is_set():
                locked = {path for path in sorted(pending) if not self.stop_event.is_set()
                          and not self._tail(tailer, path)}
                # Paths that met a locked database are retried after a pause; nothing is dropped.
                pending = self._drain(timeout=_IDLE_WAIT_SECONDS) | locked
                if time.monotonic() >= next_rescan:
                    next_rescan = time.monotonic() + float(self.settings.rescan_seconds)
                    if not watcher.alive and watcher.start():
                        log.info("watching %s again", self.filter.root)
                    pending |= set(discover(self.filter.root, self.filter, float(self.settings.recent_days)))
        finally:
            watcher.stop()
            self.close()
            log.info("processor stopped")

    def _drain(self, timeout: float) -> set[Path]:
        dirty: set[Path] = set()
        try:
            item = self.paths.get(timeout=timeout)
        except queue.Empty:
            return dirty
        while True:
            if item is not None:
                dirty.add(item)
            try:
                item = self.paths.get_nowait()
            except queue.Empty:
                return dirty

    def _tail(self, tailer: Tailer, path: Path) -> bool:
        """Tail one file; False when the database stayed locked (the path is retried, nothing dropped)."""
        try:
            tailer.tail(path)
            return True
        except apsw.BusyError:
            log.warning("database locked by another process for over 5 s while capturing %s; will retry",
                        path)
            return False
