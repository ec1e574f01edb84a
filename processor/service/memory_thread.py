"""The processor's memory thread: verbatim episodes and recollections, off the capture path.

Capture must never wait for the embedding model, so captured sessions are handed to this thread,
which owns its own connection and the loaded model. Requests are small typed objects; each kind has
a priority: a recollection for a new user message goes before episode building.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import apsw

from processor.capture.parse import CapturedLine
from processor.config import Settings, SettingsSource
from processor.memory.episodes import EpisodeStore
from processor.memory.errors import EmbedderError
from processor.recall.injections import ingest as ingest_injections
from processor.store import episodes as episodes_sql
from processor.store import open_store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recollect:
    """A new user message: precompute the session's recollection (first: the hook is waiting for it)."""

    session_id: str
    line: CapturedLine
    priority: ClassVar[int] = 0


@dataclass(frozen=True)
class BuildEpisodes:
    """A session captured new messages: turn its complete rounds into episodes."""

    session_id: str
    priority: ClassVar[int] = 2


@dataclass(frozen=True)
class FinalizeIdle:
    """The periodic sweep: idle sessions' last rounds become episodes; housekeeping runs."""

    priority: ClassVar[int] = 3


@dataclass(frozen=True)
class IngestInjections:
    """The recollections folder changed: record the injections the hooks' files reveal."""

    priority: ClassVar[int] = 1


@dataclass(frozen=True)
class _Stop:
    priority: ClassVar[int] = -1


MemoryRequest = Recollect | BuildEpisodes | FinalizeIdle | IngestInjections | _Stop
RecollectHandler = Callable[[EpisodeStore, str, CapturedLine], object]


class MemoryThread:
    def __init__(self, settings: SettingsSource, recollect: RecollectHandler | None = None) -> None:
        self._settings = settings
        self.store: EpisodeStore | None = None
        self.problem: str | None = None  # why episodes are paused, if they are
        self.busy_with: str | None = None
        self.recollect = recollect  # the recollection writer's handler, if the processor writes them
        self.periodic: list[Callable[[], object]] = []  # run with each idle-session sweep
        self._requests: queue.PriorityQueue[tuple[int, int, MemoryRequest]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._readers = threading.local()

    # --- used inline (backfill) or by the thread ----------------------------------------------

    @property
    def settings(self) -> Settings:
        return self._settings.current

    def open(self) -> EpisodeStore:
        self.store = EpisodeStore(self._settings, open_store(self.settings.db_path))
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
        cutoff = int((time.time() - self.settings.idle_minutes * 60) * 1000)
        return episodes_sql.idle_sessions_with_new_messages(self.store.conn, cutoff)

    # --- the thread --------------------------------------------------------------------------

    def submit(self, request: MemoryRequest) -> None:
        self._requests.put((request.priority, next(self._order), request))

    @property
    def backlog(self) -> int:
        return self._requests.qsize()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="engram-memory", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 8.0) -> None:
        self._stop.set()
        self.submit(_Stop())
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
            while not self._stop.is_set():
                batch = [self._requests.get()[2]]
                while True:  # take everything queued now, so one pass serves many events
                    try:
                        batch.append(self._requests.get_nowait()[2])
                    except queue.Empty:
                        break
                batch.sort(key=lambda request: request.priority)
                episodize: set[str] = set()
                if IngestInjections() in batch:  # one folder scan serves every event of the batch
                    batch = [r for r in batch if not isinstance(r, IngestInjections)] + [IngestInjections()]
                for request in batch:
                    if self._stop.is_set():
                        break
                    if isinstance(request, BuildEpisodes):
                        episodize.add(request.session_id)
                    else:
                        self._handle(request)
                if episodize and not self._stop.is_set():
                    self._busy("episodes", lambda sessions=episodize: self.build_episodes(sessions=sessions))
        finally:
            self.close()

    def _handle(self, request: MemoryRequest) -> None:
        store = self.store
        assert store is not None
        if isinstance(request, FinalizeIdle):
            self._busy("episodes", lambda: self.build_episodes(sessions=self.idle_sessions(), final=True))
            for cleanup in self.periodic:
                self._busy("cleanup", cleanup)
        elif isinstance(request, IngestInjections):
            self._busy("injections", lambda: ingest_injections(store.conn, self.settings.recollections_dir))
        elif isinstance(request, Recollect) and self.recollect is not None:
            recollect = self.recollect
            self._busy("recollection", lambda: recollect(store, request.session_id, request.line))

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
            store = EpisodeStore(self._settings, open_store(self.settings.db_path), embedder=main.embedder,
                                 index=main.index)
            self._readers.store = store
        return store
