"""The running processor (`Processor`): discover, watch and tail every transcript until told to stop.

The capture loop runs in the calling thread and owns its connection; everything that needs the
embedding model happens in the memory thread, and every LLM call in the job worker. All of them read
one SettingsHolder, so a reload (SIGHUP) reaches every thread at once.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from pathlib import Path

import apsw

from processor.capture.backfill import BackfillReport, Progress, backfill
from processor.capture.discover import TranscriptFilter, discover
from processor.capture.parse import CapturedLine
from processor.capture.tailer import Tailer
from processor.capture.watcher import FolderWatcher, TranscriptWatcher
from processor.config import Settings, SettingsHolder
from processor.jobs import JobRunner
from processor.recall.recollections import RecollectionWriter
from processor.service.memory_thread import BuildEpisodes, FinalizeIdle, MemoryThread, Recollect
from processor.store import open_store

log = logging.getLogger(__name__)

# The loop wakes at least this often to notice stop requests and retry locked paths.
_IDLE_WAIT_SECONDS = 1.0


class Processor:
    def __init__(self, settings: Settings, *, mock: bool = False) -> None:
        self.holder = SettingsHolder(settings)
        self.stop_event = threading.Event()
        self.filter = TranscriptFilter(settings.transcripts_root, settings.agent_workdir)
        self.paths: queue.Queue[Path | None] = queue.Queue()
        self.started_at = time.time()
        self.recollections = RecollectionWriter(self.holder)
        self.memory = MemoryThread(self.holder, recollect=self.recollections.handle)
        self.memory.periodic.append(self.recollections.remove_idle)
        self.jobs = JobRunner(self.holder, self.stop_event, mock=mock)
        self._wake = threading.Event()
        self._pending_settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        return self.holder.current

    def _open_tailer(self) -> Tailer:
        return Tailer(
            open_store(self.settings.db_path),
            batch_bytes=self.settings.batch_bytes,
            max_line_bytes=self.settings.max_line_bytes,
            listeners=[self._on_captured],
        )

    def _on_captured(self, session_id: str, lines: list[CapturedLine]) -> None:
        # A new user message asks for fresh recollections before anything else.
        for line in lines:
            if line.role == "user":
                self.memory.submit(Recollect(session_id, line))
        self.memory.submit(BuildEpisodes(session_id))
        self.jobs.on_messages_captured(session_id)

    # --- control from other threads and signal handlers ------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish; safe from a signal handler or another thread."""
        self.stop_event.set()
        self.paths.put(None)

    def wake(self) -> bool:
        """Rescan the transcripts root and the remember queue now."""
        self._wake.set()
        self.jobs.wake()
        self.paths.put(None)
        return True

    def reload(self, settings: Settings) -> None:
        """Apply new settings at the loop's next turn (from a SIGHUP handler)."""
        self._pending_settings = settings
        self.paths.put(None)

    def ping_info(self) -> dict[str, object]:
        """GET /ping: what the processor is doing (seed 000), cheap enough to call often."""
        return {
            "processing": self.jobs.ping_info()["job"] or self.memory.busy_with,
            "queue_depth": self.paths.qsize() + self.memory.backlog,
            "uptime_seconds": round(time.time() - self.started_at, 1),
            "episodes_paused": self.memory.problem,
        }

    def recall_for_http(self, query: str, *, limit: int, project: str | None) -> list:
        return self.memory.reader().recall(query, limit=limit, project=project)

    # --- one pass ----------------------------------------------------------------------------

    def run_once(self, since_days: float | None, progress: Progress | None = None) -> tuple[BackfillReport, int]:
        """Capture transcripts modified within since_days (None: all) and turn them into episodes.

        Returns the capture report and the number of new episodes.
        """
        tailer = self._open_tailer()
        try:
            report = backfill(tailer, self.filter, since_days, progress)
        finally:
            tailer.conn.close()
        # Remember requests are stored, but no LLM job runs in a one-shot pass.
        JobRunner(self.settings, self.stop_event).run_until_idle(only={"remember"})
        self.memory.open()
        try:
            return report, self.memory.build_episodes(final=True)
        finally:
            self.memory.close()

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        """Capture until stop(): an initial pass, then watch events and periodic rescans."""
        tailer = self._open_tailer()
        watcher = TranscriptWatcher(self.filter, self.paths)
        queue_marker = self.settings.queue_dir
        queue_watcher = FolderWatcher(queue_marker, lambda: self.paths.put(queue_marker))
        self.memory.start()
        self.jobs.start()
        try:
            queue_watcher.start()
            watching = watcher.start()
            log.info("capturing %s (%s)", self.filter.root, "watching" if watching else "root missing, waiting")
            pending: set[Path] = set(discover(self.filter.root, self.filter, self.settings.recent_days))
            next_rescan = time.monotonic() + self.settings.rescan_seconds
            while not self.stop_event.is_set():
                self._apply_pending_settings()
                if self._wake.is_set():
                    self._wake.clear()
                    next_rescan = 0.0
                if queue_marker in pending:
                    pending.discard(queue_marker)
                    self.jobs.wake()
                locked = {path for path in sorted(pending) if not self.stop_event.is_set()
                          and not self._tail(tailer, path)}
                # Paths that met a locked database are retried after a pause; nothing is dropped.
                pending = self._drain(timeout=_IDLE_WAIT_SECONDS) | locked
                if time.monotonic() >= next_rescan:
                    next_rescan = time.monotonic() + self.settings.rescan_seconds
                    if not watcher.alive and watcher.start():
                        log.info("watching %s again", self.filter.root)
                    pending |= set(discover(self.filter.root, self.filter, self.settings.recent_days))
                    self.jobs.wake()
                    self.memory.submit(FinalizeIdle())
        finally:
            queue_watcher.stop()
            watcher.stop()
            self.jobs.stop()
            self.memory.stop()
            tailer.conn.close()
            log.info("processor stopped")

    def _apply_pending_settings(self) -> None:
        new, self._pending_settings = self._pending_settings, None
        if new is None:
            return
        if new.transcripts_root != self.settings.transcripts_root:
            log.warning("projects_dir changed to %s; restart Engram to watch it", new.transcripts_root)
        self.holder.replace(new)  # every thread reads the holder: nothing else to chase
        self.jobs.settings_changed()

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
            log.warning("database locked by another process for over 5 s while capturing %s; will retry", path)
            return False
