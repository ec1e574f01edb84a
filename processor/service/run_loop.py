"""The running processor (`Processor`): discover, watch and tail every transcript until told to stop.

The capture loop runs in the calling thread and owns its connection; everything that needs the
embedding model happens in the memory thread, and every LLM call in the job worker. All of them read
one SettingsHolder, so a reload (SIGHUP) reaches every thread at once.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from pathlib import Path

import apsw

from processor.capture.agents import transcript_formats
from processor.capture.automem import MEMORY_FOLDER, memory_folders
from processor.capture.backfill import BackfillReport, Progress, backfill
from processor.capture.captured import CapturedLine
from processor.capture.claude import ClaudeFormat
from processor.capture.discover import discover_all
from processor.capture.problems import PROBLEMS_FILE, CaptureProblems
from processor.capture.project import known_project
from processor.capture.project_merge import reconcile
from processor.capture.tailer import Tailer, TailResult
from processor.capture.watcher import AppearanceWatcher, FolderWatcher, TranscriptWatcher
from processor.clock import utc_date
from processor.config import AGENT_NAMES, Settings, SettingsHolder
from processor.hook_kit.hook_io import LESSONS_FOLDER
from processor.jobs import JobRunner
from processor.memory.automem import sync_folder
from processor.memory.episode_store import EpisodeStore, Expansion
from processor.memory.gguf_convert import remove_stale_conversions
from processor.memory.unasked import offers
from processor.recall.recollections import RecollectionWriter, drop_bites, record_opt_out, requested_opt_out
from processor.service.memory_thread import (
    BuildEpisodes,
    FinalizeIdle,
    IngestInjections,
    MemoryThread,
    ReadAutoMemory,
    Recollect,
)
from processor.share.sync import ShareThread
from processor.store import open_store, rescan

log = logging.getLogger(__name__)

# The loop wakes at least this often to notice stop requests and retry locked paths.
_IDLE_WAIT_SECONDS = 1.0


class Processor:
    def __init__(self, settings: Settings, *, mock: bool = False) -> None:
        self.holder = SettingsHolder(settings)
        self.stop_event = threading.Event()
        # Every captured agent's transcripts; Claude Code's filter also finds its auto-memory folders.
        self.formats = transcript_formats(settings)
        self.filter = next((f for f in self.formats if isinstance(f, ClaudeFormat)),
                           ClaudeFormat.from_settings(settings))
        self.paths: queue.Queue[Path | None] = queue.Queue()
        self.started_at = time.time()
        self.recollections = RecollectionWriter(self.holder)
        self.memory = MemoryThread(self.holder, recollect=self.recollections.handle)
        self.memory.periodic.append(self.recollections.remove_idle)
        self.memory.learned = self.recollections.refresh_lessons
        self.memory.periodic.append(self.ingest_injections)
        self.memory.periodic.append(self.redact_stored_text_again)
        self._automem_dirs: set[Path] = set()  # project folders whose auto memory was asked for once already
        self.jobs = JobRunner(self.holder, self.stop_event, mock=mock)
        # Shared memory's sync (processor/share/): a thread of its own, idle unless shared_database_url is set.
        self.share = ShareThread(self.holder, self.stop_event)
        self.jobs.hot_path_busy = self.memory.serving_user
        self._wake = threading.Event()
        self._pending_settings: Settings | None = None
        self.problems = CaptureProblems()  # capture problems, each logged once; listed by `engram status`
        self.memory.problems = self.problems
        self.rescans = 0

    @property
    def settings(self) -> Settings:
        return self.holder.current

    def _open_tailer(self) -> Tailer:
        """The capture's tailer, after what now resolves to one project was merged (``project_merge``)."""
        tailer = Tailer(
            open_store(self.settings.db_path),
            batch_bytes=self.settings.batch_bytes,
            max_line_bytes=self.settings.max_line_bytes,
            listeners=[self._on_captured],
            problems=self.problems,
            opt_out_listeners=[self._on_opt_out],
            opt_out_request=lambda session_id: requested_opt_out(self.settings.recollections_dir, session_id),
            formats=self.formats,
            recent_days=self.settings.recent_days,
            lessons_dir=self.settings.recollections_dir / LESSONS_FOLDER,
        )
        try:
            reconcile(tailer.conn, tailer.projects, self.settings.recollections_dir / LESSONS_FOLDER)
        except apsw.BusyError:
            log.warning("database locked by another process for over 5 s: projects that now resolve to one are "
                        "merged at the next start")
        except Exception:  # each merge is one transaction: what failed is whole, and tried again at the next start
            log.exception("merging the projects that now resolve to one failed; capture goes on, the merge is "
                          "tried again at the next start")
        return tailer

    def _on_opt_out(self, result: TailResult) -> None:
        # Committed already (with the session's row): now tell the hooks, and take what an off-the-record
        # session's episodes were out of every other session's recollection.
        assert result.opt_out is not None
        record_opt_out(self.settings.recollections_dir, result.session_id, result.opt_out)
        drop_bites(self.settings.recollections_dir, set(result.dropped_episodes))
        log.info("session %s opted out of memory (%s)", result.session_id, result.opt_out)

    def _on_captured(self, session_id: str, lines: list[CapturedLine], finished: bool = False,
                     settle: float = 0.0) -> None:
        self.memory.note_capture()  # a live session: episodes leave it cores
        # A new user message asks for fresh recollections before anything else.
        for line in lines:
            if line.role == "user":
                self.memory.submit(Recollect(session_id, line))
        # A finished turn (Claude Code's end_turn on the last line, the Codex CLI's task_complete after it, a
        # Gemini answer that asked for no tool call once `settle` seconds passed with no newer line) makes its
        # round an episode at once, so a decision of a one-shot session is recallable from the next.
        self.memory.submit(BuildEpisodes(session_id, final=finished, settle=settle if finished else 0.0))
        self.jobs.on_messages_captured(session_id)

    def read_auto_memory(self, folder: Path) -> None:
        """A project's auto-memory folder may have changed: the memory thread re-reads it."""
        if self.settings.automem:
            self.memory.submit(ReadAutoMemory(folder))

    def _read_all_auto_memory(self) -> None:
        for folder in memory_folders(self.filter):
            self.read_auto_memory(folder)

    def ingest_injections(self) -> None:
        """The hooks left proof of an injection in the recollections folder: record it (memory thread)."""
        self.memory.submit(IngestInjections())

    def redact_stored_text_again(self) -> None:
        """After an upgrade that widened the redaction rules: a second of re-redaction per sweep (memory thread),
        the user messages that arrive meanwhile served between its batches."""
        store = self.memory.store
        if store is not None:
            rescan.rescan(store.conn, budget_seconds=1.0, between=self.memory.serve_recollections)

    # --- control from other threads and signal handlers ------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish; safe from any thread (the signal relay's, the memory watchdog's)."""
        self.stop_event.set()
        self.paths.put(None)

    def wake(self) -> bool:
        """Rescan the transcripts root and the remember queue now."""
        self._wake.set()
        self.jobs.wake()
        self.paths.put(None)
        return True

    def reload(self, settings: Settings) -> None:
        """Apply new settings at the loop's next turn (on SIGHUP, from the signal relay's thread)."""
        self._pending_settings = settings
        self.paths.put(None)

    def ping_info(self) -> dict[str, object]:
        """GET /ping: what the processor is doing (seed 000), cheap enough to call often."""
        return {
            "processing": self.jobs.ping_info()["job"] or self.memory.busy_with,
            "queue_depth": self.paths.qsize() + self.memory.backlog,
            "memory_backlog": self.memory.backlog,
            "memory_backlog_one_session": self.memory.session_backlog,
            "uptime_seconds": round(time.time() - self.started_at, 1),
            "episodes_paused": self.memory.problem,
            "capture_problems": len(self.problems.current()),
            "rescans": self.rescans,
            "share": self.share.state,
        }

    def viewer_store(self, conn: apsw.Connection) -> EpisodeStore:
        """A store on the viewer's connection that shares the memory thread's model and vectors."""
        main = self.memory.main_store()
        return EpisodeStore(self.holder, conn, embedder=main.embedder, index=main.index)

    def recall_for_http(self, query: str, *, limit: int, project: str | None, session_id: str | None = None) -> list:
        with self.memory.reading() as store:
            project = known_project(store.conn, project) if project else None  # a clone's root: its project
            return store.recall(query, limit=limit, project=project, session_id=session_id)

    def expand_for_http(self, item_id: str) -> Expansion:
        with self.memory.reading() as store:
            return store.expand(item_id)

    def offers_for_http(self, query: str, *, limit: int, project: str | None) -> list[dict]:
        """What clears the bar of a user message's bites for this text (``processor.memory.unasked``)."""
        with self.memory.reading() as store:
            project = known_project(store.conn, project) if project else None  # the prompt hook sends its root
            found = offers(store.conn, store.index, query, store.embedder.embed_query(query), project, limit=limit)
        return [{"id": o.episode.id, "bite": o.bite, "date": utc_date(o.episode.created_at),
                 "importance": o.episode.importance, "kind": o.episode.kind, "relevance": round(o.cosine, 4)}
                for o in found]

    # --- one pass ----------------------------------------------------------------------------

    def run_once(self, since_days: float | None, progress: Progress | None = None) -> tuple[BackfillReport, int]:
        """Capture transcripts modified within since_days (None: all) and turn them into episodes.

        Returns the capture report and the number of new episodes.
        """
        tailer = self._open_tailer()
        tailer.recent_days = since_days  # a database of sessions (opencode's): its sessions of that window
        try:
            report = backfill(tailer, self.formats, since_days, progress)
        finally:
            tailer.conn.close()
        # Remember requests are stored, but no LLM job runs in a one-shot pass.
        JobRunner(self.settings, self.stop_event).run_until_idle(only={"remember"})
        self.memory.open()
        try:
            built = self.memory.build_all(final=True)
            if self.settings.automem:
                assert self.memory.store is not None
                for folder in memory_folders(self.filter):
                    sync_folder(self.memory.store, folder, max_bytes=self.settings.automem_max_bytes,
                                problems=self.problems)
            return report, built
        finally:
            self.memory.close()

    # --- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        """Capture until stop(): an initial pass, then watch events and periodic rescans."""
        tailer = self._open_tailer()
        self.problems.save_to = self.settings.run_dir / PROBLEMS_FILE
        remove_stale_conversions(self.settings.models_dir)
        # One watcher per agent's root; Claude Code's also reports its projects' auto-memory folders.
        roots = [RootWatch(TranscriptWatcher(fmt, self.paths, on_memory=self.read_auto_memory
                                             if fmt is self.filter else None),
                           AppearanceWatcher(fmt.root, lambda root=fmt.root: self.paths.put(root)))
                 for fmt in self.formats]
        root_markers = {watch.root for watch in roots}
        queue_marker = self.settings.queue_dir
        queue_watcher = FolderWatcher(queue_marker, lambda: self.paths.put(queue_marker))
        injection_watcher = FolderWatcher(self.settings.recollections_dir, self.ingest_injections)

        def rediscover() -> set[Path]:
            return set(discover_all(self.formats, self.settings.recent_days, self.problems))

        self.memory.start()
        self.jobs.start()
        self.share.start()
        try:
            queue_watcher.start()
            injection_watcher.start()
            for watch in roots:
                watch.start()
            pending: set[Path] = rediscover()
            self._read_all_auto_memory()
            next_rescan = time.monotonic() + self.settings.rescan_seconds
            while not self.stop_event.is_set():
                self._apply_pending_settings()
                if self._wake.is_set():
                    self._wake.clear()
                    next_rescan = 0.0
                if queue_marker in pending:
                    pending.discard(queue_marker)
                    self.jobs.wake()
                if pending & root_markers:  # a change where a missing root will appear
                    appeared = [watch for watch in roots if watch.root in pending and watch.follow()]
                    pending -= root_markers
                    if appeared:
                        pending |= rediscover()
                locked = {path for path in sorted(pending) if not self.stop_event.is_set()
                          and not self._tail(tailer, path)}
                # Paths that met a locked database are retried after a pause; nothing is dropped.
                pending = self._drain(timeout=_IDLE_WAIT_SECONDS) | locked
                if time.monotonic() >= next_rescan:
                    next_rescan = time.monotonic() + self.settings.rescan_seconds
                    for watch in roots:
                        watch.follow()
                    pending |= rediscover()
                    self._read_all_auto_memory()  # unchanged files cost a stat each
                    self.rescans += 1
                    self.jobs.wake()
                    self.memory.submit(FinalizeIdle())
        finally:
            queue_watcher.stop()
            injection_watcher.stop()
            for watch in roots:
                watch.stop()
            self.jobs.stop()
            self.share.stop()
            self.memory.stop()
            tailer.conn.close()
            self.problems.discard_saved()
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
        except apsw.BusyError:
            log.warning("database locked by another process for over 5 s while capturing %s; will retry", path)
            return False
        if path.parent not in self._automem_dirs and self.filter.accepts(path):
            # Its project now has a captured session, which is what ties the auto-memory folder to a project
            # (Claude Code's own auto memory: its projects' folders only).
            self._automem_dirs.add(path.parent)
            if os.path.isdir(path.parent / MEMORY_FOLDER):
                self.read_auto_memory(path.parent / MEMORY_FOLDER)
        return True


class RootWatch:
    """One agent's transcripts root: watched while it exists, its nearest existing ancestor while it does not
    (an agent installed after the processor started: its folder appears later, and is captured at once)."""

    def __init__(self, watcher: TranscriptWatcher, appearance: AppearanceWatcher) -> None:
        self.watcher = watcher
        self.appearance = appearance
        self.root = watcher.filter.root
        self.agent = AGENT_NAMES.get(watcher.filter.agent, watcher.filter.agent)

    def start(self) -> None:
        if self.watcher.start():
            log.info("capturing %s's sessions in %s (watching)", self.agent, self.root)
        elif self.appearance.follow():
            log.info("capturing %s's sessions in %s (missing: watching %s until it appears)", self.agent,
                     self.root, self.appearance.watched)
        else:
            log.info("capturing %s's sessions in %s (missing: looked for at each rescan)", self.agent, self.root)

    def follow(self) -> bool:
        """Start watching the root if it exists now (True when this call started it); while it is missing,
        keep the appearance watch on its nearest existing ancestor."""
        if self.watcher.alive or self.appearance.follow() or not self.watcher.start():
            return False
        log.info("watching %s (%s's sessions)", self.root, self.agent)
        return True

    def stop(self) -> None:
        self.appearance.stop()
        self.watcher.stop()
