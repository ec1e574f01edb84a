"""The processor's memory thread: verbatim episodes and recollections, off the capture path.

Capture must never wait for the embedding model, so captured sessions are handed to this thread,
which owns its own connection and the loaded model. Requests are small typed objects, coalesced as
they arrive so the backlog stays bounded under any load: per session at most one recollection (the
newest user message wins; an older one is dropped, never computed) and one episode build, and one
idle sweep. Recollections go first, and episodes are built in slices with recollections served
between them, so a long backlog never holds a new user message's bites back for long.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar

import apsw

from processor.capture.agent_process import runs_in, working_folders
from processor.capture.agents import FORMATS
from processor.capture.captured import CapturedLine
from processor.capture.problems import CaptureProblems
from processor.config import Settings, SettingsSource
from processor.memory.automem import sync_folder
from processor.memory.episode_store import EpisodeStore
from processor.memory.episodize import EPISODE_SLICE_PIECES, Episodizer
from processor.memory.errors import EmbedderError
from processor.recall.injections import ingest as ingest_injections
from processor.store import episodes as episodes_sql
from processor.store import open_store, retry_when_busy

log = logging.getLogger(__name__)

T = TypeVar("T")
# Sessions that may wait for a recollection (and, separately, for episodes) at once; past this, requests
# are dropped with a counted warning (see PendingWork._drop).
MAX_WAITING_SESSIONS = 1000
# Stores (each a connection with its own page cache) lent to control-plane requests. More would not answer
# a burst sooner: the interpreter lock and the one query context serialise most of a search, and a burst
# that opened a store per request spent its time opening (and migrating) connections. A request waits
# for one up to READER_WAIT_SECONDS, then opens one of its own, closed when it is handed back.
READERS = 4
READER_WAIT_SECONDS = 5.0
STARTING_WAIT_SECONDS = 10.0  # a request that comes before the memory thread opened the store waits this long
# A session that captured lines this recently is live: bulk embedding (episodes) then leaves it half the
# model's contexts, so its capture, hooks and searches find a core; with none live it uses them all.
LIVE_SECONDS = 10.0
# Episodes embedded per slice when nobody waits between slices (a backfill, a drain with no session live).
BACKFILL_SLICE_PIECES = 4 * EPISODE_SLICE_PIECES
BACKFILL_SESSIONS = 16  # sessions whose slices a backfill's builder embeds together


@dataclass(frozen=True)
class Recollect:
    """A new user message: precompute the session's recollection (first: the hook is waiting for it)."""

    session_id: str
    line: CapturedLine
    priority: ClassVar[int] = 0


@dataclass(frozen=True)
class BuildEpisodes:
    """A session captured new messages: turn its complete rounds into episodes.

    final: the session's last captured line ends a finished turn (Claude Code's ``end_turn``), so its
    last round is complete too and becomes an episode now, not at the idle sweep minutes later.
    settle: the end counts only once this many seconds passed with no newer request for the session (a Gemini
    answer may still be written again with tool calls that were running).
    """

    session_id: str
    final: bool = False
    settle: float = 0.0
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
class ReadAutoMemory:
    """A project's auto-memory folder (Claude Code's MEMORY.md and topic files) may have changed: re-read it."""

    folder: Path
    priority: ClassVar[int] = 2


@dataclass(frozen=True)
class _Stop:
    priority: ClassVar[int] = -1


MemoryRequest = Recollect | BuildEpisodes | FinalizeIdle | IngestInjections | ReadAutoMemory | _Stop
RecollectHandler = Callable[[EpisodeStore, str, CapturedLine], object]


class PendingWork:
    """What the memory thread has still to do, coalesced by session; `take()` blocks until there is some."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self._ready = threading.Condition()
        self._recollect: dict[str, Recollect] = {}   # session → its newest user message
        self._build: dict[str, BuildEpisodes] = {}   # sessions with captured messages to turn into episodes
        self._finalize = False
        self._ingest = False  # the recollections folder changed: one scan serves every change since
        self._automem: dict[Path, ReadAutoMemory] = {}  # auto-memory folders to re-read, each once
        self._stop = False
        self.coalesced = 0  # requests absorbed by a newer one of the same session
        self.dropped = 0    # requests refused because max_sessions sessions were already waiting
        self.peak = 0       # the largest backlog seen
        self._last_drop_log = 0.0

    def put(self, request: MemoryRequest) -> None:
        with self._ready:
            if isinstance(request, _Stop):
                self._stop = True
            elif isinstance(request, FinalizeIdle):
                self._finalize = True
            elif isinstance(request, IngestInjections):
                self._ingest = True
            elif isinstance(request, ReadAutoMemory):
                self._automem[request.folder] = request
            else:
                pending: dict = self._recollect if isinstance(request, Recollect) else self._build
                if request.session_id in pending:
                    self.coalesced += 1
                    # Re-inserted below: the newest request wins (for a build, the newest line decides
                    # whether the turn is finished).
                    del pending[request.session_id]
                elif len(pending) >= self.max_sessions:
                    self._drop(request)
                    return
                pending[request.session_id] = request
            self.peak = max(self.peak, self._size())
            self._ready.notify()

    def _drop(self, request: MemoryRequest) -> None:
        # Nothing is lost for good: a dropped build is redone by the idle sweep (progress lives in the
        # database), and a dropped recollection only means that message gets no fresh bites.
        self.dropped += 1
        now = time.monotonic()
        if now - self._last_drop_log >= 60:
            self._last_drop_log = now
            log.warning("memory thread: %d sessions already wait; dropped %d request(s) so far (latest: %s)",
                        self.max_sessions, self.dropped, type(request).__name__)

    def take(self, timeout: float | None = None) -> list[MemoryRequest]:
        """Everything pending, most urgent first (empty after a timeout)."""
        with self._ready:
            if not self._has_work():
                self._ready.wait(timeout)
            work: list[MemoryRequest] = [*self._recollect.values()]
            if self._ingest:
                work.append(IngestInjections())
            work.extend(self._build.values())
            work.extend(self._automem.values())
            if self._finalize:
                work.append(FinalizeIdle())
            if self._stop:
                work.insert(0, _Stop())
            self._recollect, self._build, self._finalize, self._ingest = {}, {}, False, False
            self._automem = {}
            return work

    def take_recollections(self) -> list[Recollect]:
        """Only the waiting recollections: served between slices of episode building."""
        with self._ready:
            work, self._recollect = list(self._recollect.values()), {}
            return work

    def has_recollections(self) -> bool:
        with self._ready:
            return bool(self._recollect)

    def _has_work(self) -> bool:
        return bool(self._recollect or self._build or self._finalize or self._ingest or self._automem or self._stop)

    def _size(self) -> int:
        return (len(self._recollect) + len(self._build) + int(self._finalize) + int(self._ingest)
                + len(self._automem))

    def size_besides(self, building: list[str]) -> int:
        with self._ready:
            return (len(self._recollect) + len(self._build.keys() | set(building)) + int(self._finalize)
                    + int(self._ingest) + len(self._automem))

    def most_for_one_session(self, building: list[str]) -> int:
        """The most requests any one session has waiting (a recollection and a build at most, by design)."""
        with self._ready:
            sessions = self._recollect.keys() | self._build.keys() | set(building)
            return max((int(s in self._recollect) + int(s in self._build or s in building) for s in sessions),
                       default=0)

    def __len__(self) -> int:
        with self._ready:
            return self._size()


class MemoryThread:
    def __init__(self, settings: SettingsSource, recollect: RecollectHandler | None = None) -> None:
        self._settings = settings
        self.store: EpisodeStore | None = None
        self.episodizer: Episodizer | None = None  # the store's: episodes are built on the worker's connection
        self.problem: str | None = None  # why episodes are paused, if they are
        self.busy_with: str | None = None
        self.recollect = recollect  # the recollection writer's handler, if the processor writes them
        self.problems: CaptureProblems | None = None  # where unreadable auto-memory files are reported
        self.periodic: list[Callable[[], object]] = []  # run with each idle-session sweep
        # Run once a session's captured rounds are all episodes: its project's lesson index is brought up to date
        # (a rule said in its last round guards the next session's calls, and leaves its digest, from the start).
        self.learned: Callable[[EpisodeStore, str], object] | None = None
        self.pending = PendingWork(MAX_WAITING_SESSIONS)
        self._building: list[str] = []  # sessions whose episodes are being built, a slice at a time
        self._finished: set[str] = set()  # of those, sessions whose last captured line ended a turn
        self._settling: dict[str, float] = {}  # sessions whose turn's end counts at this time.monotonic()
        self._stop = threading.Event()
        self._opened = threading.Event()  # set while the store is open: a request in the first instant waits for it
        self._thread: threading.Thread | None = None
        self._readers = threading.local()  # long-lived threads' own stores (the MCP tools' database thread)
        self._idle_readers: list[EpisodeStore] = []  # stores lent to request threads, back in the pool
        self._idle_readers_lock = threading.Lock()
        self._reader_slots = threading.BoundedSemaphore(READERS)
        self._last_capture = float("-inf")  # when a session last captured lines (monotonic)

    # --- used inline (backfill) or by the thread ----------------------------------------------

    @property
    def settings(self) -> Settings:
        return self._settings.current

    def open(self) -> EpisodeStore:
        self.store = EpisodeStore(self._settings, open_store(self.settings.db_path))
        self.episodizer = Episodizer(self.store)
        self._opened.set()
        return self.store

    def close(self) -> None:
        self._opened.clear()
        if self.store is not None:
            self.store.conn.close()
            self.store = None
            self.episodizer = None
        with self._idle_readers_lock:
            idle, self._idle_readers = self._idle_readers, []
        for reader in idle:
            reader.conn.close()

    def build_episodes(self, sessions: set[str] | None = None, final: bool = False) -> int:
        """Episodes for complete rounds; failures pause episodes (capture goes on) and are retried later."""
        episodizer = self.episodizer
        assert episodizer is not None
        return self._episode_errors(lambda: episodizer.episodize(final=final) if sessions is None
                                    else sum(episodizer.episodize(sid, final=final) for sid in sorted(sessions))) or 0

    def build_all(self, final: bool = True) -> int:
        """Every session's episodes with nobody waiting (a backfill, `engram run --once`): one builder per
        context of the model, each on its own connection, taking BACKFILL_SESSIONS sessions at a time and
        embedding a slice of each (BACKFILL_SLICE_PIECES pieces at most) in one call. While one builder reads,
        splits and commits (the interpreter's work), another's texts are on the model, so the cores stay busy;
        short sessions share decodes instead of taking one each. Returns the episodes added."""
        store, episodizer = self.store, self.episodizer
        assert store is not None and episodizer is not None
        builders = store.embedder.max_contexts if len(sessions := self._episode_errors(
            episodizer.sessions_to_episodize) or []) > 1 else 1
        waiting = list(reversed(sessions))
        taking = threading.Condition()
        in_flight = [0]  # batches being built: their sessions may come back with more
        added: list[int] = []
        failures: list[BaseException] = []

        def build(builder: Episodizer) -> None:
            try:
                while True:
                    with taking:
                        while not waiting and in_flight[0] and not failures:
                            taking.wait()
                        if not waiting or failures:
                            return
                        batch = [waiting.pop() for _ in range(min(BACKFILL_SESSIONS, len(waiting)))]
                        in_flight[0] += 1
                    more: list[str] = []
                    try:
                        count, more = retry_when_busy(lambda b=batch: builder.episodize_sessions(
                            b, final, BACKFILL_SLICE_PIECES), what="building episodes")
                        added.append(count)
                    finally:
                        with taking:  # their next slices come next, one builder at a time
                            waiting.extend(reversed(more))
                            in_flight[0] -= 1
                            taking.notify_all()
            except BaseException as exc:  # the first failure stops the others; the caller reports it
                with taking:
                    failures.append(exc)
                    taking.notify_all()
            finally:
                if builder is not episodizer:
                    builder.conn.close()

        def run() -> int:
            helpers = [threading.Thread(target=build, args=(Episodizer(EpisodeStore(
                self._settings, open_store(self.settings.db_path), embedder=store.embedder, index=store.index)),),
                name=f"engram-build-{n}", daemon=True) for n in range(1, builders)]
            for thread in helpers:
                thread.start()
            build(episodizer)
            for thread in helpers:
                thread.join()
            if failures:
                raise failures[0]
            # What the builders left (a session that got new signals meanwhile), and the signals of none.
            return sum(added) + episodizer.episodize(final=final, max_pieces=BACKFILL_SLICE_PIECES)

        built = self._episode_errors(run) or 0
        for session_id in sessions:
            self._after_learning(session_id)
        return built

    def note_capture(self) -> None:
        """A session captured lines: it is live for LIVE_SECONDS (capture's thread calls this)."""
        self._last_capture = time.monotonic()

    def share_cores(self) -> bool:
        """Half the model's contexts for episodes while a session is live, all of them with none live, at most
        those the embedder has for them (the running processor has one: it lends none of its query context,
        whose buffers long packs would make resident for good: bench/load.py's peak went over 300 MB);
        returns whether a session is live."""
        live = time.monotonic() - self._last_capture < LIVE_SECONDS
        embedder = self.store.loaded_embedder if self.store is not None else None
        if embedder is not None:
            wanted = max(1, embedder.max_contexts // 2) if live else embedder.max_contexts
            embedder.bulk_contexts = min(wanted, embedder.bulk_capacity)
        return live

    def build_slice(self, session_id: str, final: bool = False) -> bool:
        """One slice of a session's episodes; True when more complete rounds wait (and nothing failed)."""
        episodizer = self.episodizer
        assert episodizer is not None
        self.share_cores()
        # Slices of EPISODE_SLICE_PIECES even with no session live: four times as many (a page of 1,024 messages
        # and 64 pieces at once) added 30 MB to the processor's peak under bench/load.py's drain.
        outcome = self._episode_errors(lambda: episodizer.episodize_slice(session_id, final,
                                                                          between=self.serve_recollections))
        return bool(outcome and outcome[1])

    def _after_learning(self, session_id: str) -> None:
        """``learned`` for a session whose rounds are all episodes; a failure is logged, never the thread's end."""
        if self.learned is None or self.store is None:
            return
        try:
            self.learned(self.store, session_id)
        except (apsw.Error, OSError) as exc:
            log.warning("the lesson index of session %s's project was not brought up to date: %s", session_id, exc)

    def _episode_errors(self, build: Callable[[], T]) -> T | None:
        try:
            result = build()
        except EmbedderError as exc:
            if self.problem != str(exc):
                log.error("episodes are paused (capture continues): %s", exc)
            self.problem = str(exc)
            return None
        except apsw.BusyError:
            log.warning("database locked while building episodes; will retry")
            return None
        if self.problem:
            log.info("episodes resumed")
            self.problem = None
        return result

    def idle_sessions(self) -> set[str]:
        """Sessions quiet for idle_minutes: their last round is complete enough to become an episode."""
        assert self.store is not None
        cutoff = int((time.time() - self.settings.idle_minutes * 60) * 1000)
        return episodes_sql.idle_sessions_with_new_messages(self.store.conn, cutoff)

    def gone_sessions(self) -> set[str]:
        """Sessions of an agent that marks no end to some turns (the Gemini CLI killed mid-call) whose CLI no
        longer runs in their folder: their last round is over, before idle_minutes."""
        assert self.store is not None
        now = time.time()
        gone: set[str] = set()
        for agent, fmt in FORMATS.items():
            if not fmt.process_names:
                continue
            span = (int((now - self.settings.idle_minutes * 60) * 1000), int((now - fmt.turn_end_settle) * 1000))
            unfinished = episodes_sql.unfinished_turns(self.store.conn, agent, span)
            if not unfinished:
                continue  # the process table is read only when a session waits on it
            folders = working_folders(fmt.process_names)
            gone |= {session_id for session_id, folder in unfinished if not runs_in(folders, folder)}
        return gone

    # --- the thread --------------------------------------------------------------------------

    def submit(self, request: MemoryRequest) -> None:
        self.pending.put(request)

    @property
    def backlog(self) -> int:
        """Requests waiting, counting a session once per kind: a build in progress and a new one are one."""
        return self.pending.size_besides(self._building)

    @property
    def session_backlog(self) -> int:
        """The most requests one session has waiting: at most 2 (its newest recollection and one build)."""
        return self.pending.most_for_one_session(self._building)

    def serving_user(self) -> bool:
        """A user message's recollection is being computed or waits: the hot path other work makes way for."""
        return self.busy_with == "recollection" or self.pending.has_recollections()

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
                # A running processor makes no spare contexts and lends episodes none of its query context (each
                # context's buffers stay resident once a long pack used them): RSS stays under 300 MB under
                # bench/load.py. Searches still borrow the idle bulk context. `engram backfill` keeps its spares.
                store.embedder.keep_spares(0, lend_query_context=False)
                # Load the model and the vectors now, not on the first user message (nor mid-session, on the
                # first search that reads them: a 100k store takes seconds).
                store.index.refresh(store.conn)
            except EmbedderError as exc:
                self.problem = str(exc)
                log.error("episodes are paused (capture continues): %s", exc)
            # Rounds captured before a restart or a crash get their episodes now, not when their session
            # next writes; sessions idle since then get their last round too.
            # A turn that had ended (the tailer keeps that with the lines) has its last round built too: the
            # request a crash lost is made again.
            ended = episodes_sql.ended_turns_with_new_messages(store.conn)
            for session_id, _, _ in episodes_sql.sessions_with_new_messages(store.conn):
                agent = ended.get(session_id)
                fmt = FORMATS.get(agent) if agent is not None else None
                self.submit(BuildEpisodes(session_id, final=agent is not None,
                                          settle=fmt.turn_end_settle if fmt is not None else 0.0))
            self.submit(FinalizeIdle())
            builds = self._building
            while not self._stop.is_set():
                work = self.pending.take(timeout=0 if builds else self._settle_wait())
                for request in work:
                    if isinstance(request, BuildEpisodes):
                        if request.session_id not in builds:
                            builds.append(request.session_id)
                        self._note_turn(request)
                    elif not isinstance(request, _Stop):
                        self._handle(request)
                for session_id in self._settled():
                    if session_id not in builds:
                        builds.append(session_id)
                if builds and not self._stop.is_set():
                    # One slice of one session, then back to the top: new user messages come first.
                    session_id = builds[0]
                    self.busy_with = "episodes"
                    try:
                        more = self.build_slice(session_id, final=session_id in self._finished)
                    finally:
                        self.busy_with = None
                        builds.pop(0)
                    if more:
                        builds.append(session_id)
                    else:
                        self._finished.discard(session_id)
                        self._after_learning(session_id)
        finally:
            self.close()

    def _note_turn(self, request: BuildEpisodes) -> None:
        """Whether the session's last round is finished now, at a time to come (its end settling), or not."""
        self._settling.pop(request.session_id, None)
        self._finished.discard(request.session_id)
        if request.final and request.settle > 0:
            self._settling[request.session_id] = time.monotonic() + request.settle
        elif request.final:
            self._finished.add(request.session_id)

    def _settle_wait(self) -> float | None:
        """How long the thread may wait for work: until the next turn's end settles (None: no end is settling)."""
        if not self._settling:
            return None
        return max(0.0, min(self._settling.values()) - time.monotonic())

    def _settled(self) -> list[str]:
        """The sessions whose turn's end stood long enough: finished now, their last round to build."""
        now = time.monotonic()
        settled = [session_id for session_id, at in self._settling.items() if at <= now]
        for session_id in settled:
            del self._settling[session_id]
            self._finished.add(session_id)
        return settled

    def serve_recollections(self) -> None:
        """Between two embedding calls of a long episode build: the user messages that arrived meanwhile."""
        for request in self.pending.take_recollections():
            self._handle(request)

    def _handle(self, request: MemoryRequest) -> None:
        store = self.store
        assert store is not None
        if isinstance(request, FinalizeIdle):
            self._busy("episodes", lambda: self.build_episodes(sessions=self.idle_sessions() | self.gone_sessions(),
                                                               final=True))
            for cleanup in self.periodic:
                self._busy("cleanup", cleanup)
        elif isinstance(request, IngestInjections):
            self._busy("injections", lambda: ingest_injections(store.conn, self.settings.recollections_dir))
        elif isinstance(request, ReadAutoMemory):
            if self.settings.automem:
                # A missing model or a locked database pauses it like episodes (logged once); the next
                # event or rescan reads the folder again.
                self._busy("auto memory", lambda: self._episode_errors(lambda: sync_folder(
                    store, request.folder, max_bytes=self.settings.automem_max_bytes, problems=self.problems,
                    between=self.serve_recollections)))
        elif isinstance(request, Recollect) and self.recollect is not None:
            recollect = self.recollect
            self._busy("recollection", lambda: recollect(store, request.session_id, request.line))

    def _busy(self, what: str, fn: Callable[[], object]) -> None:
        previous, self.busy_with = self.busy_with, what  # a recollection served inside a cleanup: back to it after
        try:
            fn()
        except Exception:
            log.exception("memory thread: %s failed; it is retried on the next event", what)
        finally:
            self.busy_with = previous

    def reader(self) -> EpisodeStore:
        """A store of the calling thread's own, sharing the worker's model and vectors: for a long-lived
        thread (the MCP tools' database thread). A request's short-lived thread borrows one (`reading`)."""
        store = getattr(self._readers, "store", None)
        if store is None:
            store = self._open_reader()
            self._readers.store = store
        return store

    @contextlib.contextmanager
    def reading(self) -> Iterator[EpisodeStore]:
        """A store for one control-plane request, lent from a pool of READERS and handed back after it.

        The control plane serves each connection on a new thread: a store per thread opened (and
        migrated) a connection for every request, and each one's page cache and statements lived on
        until the garbage collector found it.
        """
        pooled = self._reader_slots.acquire(timeout=READER_WAIT_SECONDS)
        store = None
        if pooled:
            with self._idle_readers_lock:
                store = self._idle_readers.pop() if self._idle_readers else None
        try:
            if store is None:
                store = self._open_reader()
            yield store
        finally:
            handed_back = False
            if store is not None and pooled:
                # Under the lock close() empties the pool with: a store handed back after it would never close.
                with self._idle_readers_lock:
                    if self.store is not None:
                        self._idle_readers.append(store)
                        handed_back = True
            if store is not None and not handed_back:
                store.conn.close()  # one of its own (the pool was busy too long), or the thread has stopped
            if pooled:
                self._reader_slots.release()

    @property
    def idle_readers(self) -> int:
        with self._idle_readers_lock:
            return len(self._idle_readers)

    def main_store(self) -> EpisodeStore:
        """The memory thread's store, whose model and vectors readers share. The control plane listens before
        the thread has opened it: a request in that instant waits for it rather than failing."""
        main = self.store
        if main is None and not self._stop.is_set() and self._opened.wait(STARTING_WAIT_SECONDS):
            main = self.store
        if main is None:
            raise EmbedderError("the memory thread is not running")
        return main

    def _open_reader(self) -> EpisodeStore:
        main = self.main_store()
        return EpisodeStore(self._settings, open_store(self.settings.db_path), embedder=main.embedder,
                            index=main.index)
