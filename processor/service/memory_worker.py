"""The processor's memory thread: verbatim episodes and recollections, off the capture path.

Capture must never wait for the embedding model, so captured sessions are handed
to this thread, which owns its own connection and the loaded model. Requests are
prioritised: a recollection for a new user message goes before episode building.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import apsw

from processor.config import Settings
from processor.memory.episodes import EpisodeStore
from processor.memory.errors import EmbedderError
from processor.store import open_store

log = logging.getLogger(__name__)

RECOLLECT, EPISODIZE, FINALIZE_IDLE = 0, 2, 3  # priorities: lower runs first

Handler = Callable[[EpisodeStore, Any], None]


class MemoryWorker:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store: EpisodeStore | None = None
        self.problem: str | None = None  # why episodes are paused, if they are
        self.busy_with: str | None = None
        self.handlers: dict[int, Handler] = {}  # extra request kinds (recollections) register here
        self.periodic: list[Callable[[], object]] = []  # run with each idle-session sweep
        self._requests: queue.PriorityQueue[tuple[int, int, Any]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._readers = threading.local()

    # --- used inline (backfill) or by the thread ----------------------------------------------

    def open(self) -> EpisodeStore:
        self.store = EpisodeStore(self.settings, open_store(self.settings.db_path))
        return self.store

    def close(self) -> None:
        if self.store is not None:
            self.store.conn.close()
            self.store = None

    def build_episodes(self, sessions: set[str] | None = None, final: bool = False) -> int:
        """Episodes for complete rounds; failures pause episodes (capture goes on) and are retried later."""
        store = self.store
        assert store is not None
        try:
            if sessions is None:
                added = store.episodize(final=final)
            else:
                added = sum(store.episodize(sid, final=final) for sid in sorted(sessions))
        except EmbedderError as exc:
            if self.problem != str(exc):
                log.error("episodes are paused (capture continues): %s", exc)
            self.problem = str(exc)
            return 0
        except apsw.BusyError:
            log.warning("database locked while building episodes; will retry")
            return 0
        if self.problem:
            log.info("episodes resumed")
            self.problem = None
        return added

    def idle_sessions(self) -> set[str]:
        """Sessions quiet for idle_minutes: their last round is complete enough to become an episode."""
        assert self.store is not None
        cutoff = int((time.time() - float(self.settings.idle_minutes) * 60) * 1000)
        rows = self.store.conn.execute(
            "SELECT s.session_id FROM sessions s WHERE s.updated_at < ? AND EXISTS "
            "(SELECT 1 FROM messages m WHERE m.session_id = s.session_id AND m.id > s.episodized_through)",
            (cutoff,),
        ).fetchall()
        return {row[0] for row in rows}

    # --- the thread --------------------------------------------------------------------------

    def submit(self, priority: int, payload: Any = None) -> None:
        self._requests.put((priority, next(self._order), payload))

    @property
    def backlog(self) -> int:
        return self._requests.qsize()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="engram-memory", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 8.0) -> None:
        self._stop.set()
        self.submit(-1)
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            if self._thread.is_alive():
                log.warning("memory thread still busy at shutdown; its work is redone on the next start")

    def _run(self) -> None:
        store = self.open()
        try:
            try:
                store.check_model()
                store.index  # noqa: B018 - load the model and the vectors now, not on the first user message
            except EmbedderError as exc:
                self.problem = str(exc)
                log.error("episodes are paused (capture continues): %s", exc)
            # Rounds captured before a restart or a crash get their episodes now, not when their
            # session next writes; sessions idle since then get their last round too.
            self._busy("episodes", self.build_episodes)
            self._handle(FINALIZE_IDLE, None)
            while not self._stop.is_set():
                priority, _, payload = self._requests.get()
                if priority < 0:
                    continue
                episodize: set[str] = set()
                batch = [(priority, payload)]
                while True:  # take everything queued now, so one pass serves many events
                    try:
                        more = self._requests.get_nowait()
                    except queue.Empty:
                        break
                    if more[0] >= 0:
                        batch.append((more[0], more[2]))
                batch.sort(key=lambda item: item[0])
                for kind, arg in batch:
                    if self._stop.is_set():
                        break
                    if kind == EPISODIZE:
                        episodize.add(arg)
                    else:
                        self._handle(kind, arg)
                if episodize and not self._stop.is_set():
                    self._busy("episodes", lambda sessions=episodize: self.build_episodes(sessions=sessions))
        finally:
            self.close()

    def _handle(self, kind: int, arg: Any) -> None:
        store = self.store
        assert store is not None
        if kind == FINALIZE_IDLE:
            self._busy("episodes", lambda: self.build_episodes(sessions=self.idle_sessions(), final=True))
            for cleanup in self.periodic:
                self._busy("cleanup", cleanup)
        elif kind in self.handlers:
            self._busy(f"handler {kind}", lambda: self.handlers[kind](store, arg))

    def _busy(self, what: str, fn: Callable[[], object]) -> None:
        self.busy_with = what
        try:
            fn()
        except Exception:
            log.exception("memory thread: %s failed; it is retried on the next event", what)
        finally:
            self.busy_with = None

    def reader(self) -> EpisodeStore:
        """A per-thread store for control-plane requests, sharing the worker's model and vectors."""
        store = getattr(self._readers, "store", None)
        if store is None:
            main = self.store
            if main is None:
                raise EmbedderError("the memory thread is not running")
            store = EpisodeStore(self.settings, open_store(self.settings.db_path), embedder=main.embedder,
                                 index=main.index)
            self._readers.store = store
        return store
