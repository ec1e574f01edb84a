"""The durable single-worker job queue (seed 000, made durable in SQLite): it runs job types, knowing none by name.

Jobs live in the ``jobs`` table: type, dedupe key (unique while pending or running), priority
(lower first), JSON payload, attempts, next_attempt_at, last_error and state. ``JobRunner`` runs
exactly one worker thread with its own connection; a process runs at most one JobRunner, and every
backend call goes through the LLM gate (``llm_gate.py``), so there are never two LLM calls at once.

What runs is a set of job types (``registry.py``), each with its handler, priority and a ``due``
function the runner asks after captures and on a periodic sweep; the runner queues what they name.

Failures retry with exponential backoff (retry_base_seconds doubling up to retry_max_seconds, or
longer when the server sent Retry-After); nothing is dropped. The gate's breaker and budget pause
LLM job types; pauses do not count as attempts, and job types that need no LLM keep running.

A worker killed mid-job leaves its job 'running' with a dead owner pid; the next worker puts it
back to pending. Handlers commit their results with their progress, so rerunning is safe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import apsw

from processor.clock import now_ms
from processor.config import Settings, SettingsSource
from processor.jobs import costs
from processor.jobs.backends import (
    Backend,
    BackendError,
    BackendUnavailable,
    LLMRequest,
    choose_backend,
    create_backend,
)
from processor.jobs.backends.claude_backend import ENGRAM_CHILD_ENV
from processor.jobs.backends.mock_backend import MockBackend
from processor.jobs.base import DueCheck, Handler, JobContext, JobRejected, JobType, RetryLater
from processor.jobs.llm_gate import BreakerOpen, LLMGate
from processor.jobs.registry import built_in_job_types
from processor.jobs.status import jobs_status
from processor.memory.embedder import Embedder
from processor.memory.episode_store import EpisodeStore
from processor.memory.errors import EmbedderError
from processor.store import connect, open_store, retry_when_busy, write_transaction
from processor.store import jobs as sql
from processor.store.jobs import JobRow

log = logging.getLogger(__name__)

T = TypeVar("T")

SWEEP_SECONDS = 30.0          # time-based triggers and housekeeping, at least this often
KEEP_DONE_DAYS = 7            # finished jobs are kept this long for `engram status`
STALE_RUNNING_MS = 3 * 3600 * 1000  # a 'running' job this old has lost its worker even if the pid lives on
MAX_WAIT_SECONDS = 5.0
MAX_YIELD_SECONDS = 2.0     # the longest a job waits for the hot path at one point (a recollection takes ~0.1 s)
YIELD_POLL_SECONDS = 0.005

# One JobRunner per process works the queue: held by the worker for as long as it runs.
_WORKER_LOCK = threading.Lock()


class WorkerBusy(RuntimeError):
    """Another JobRunner is already working the queue in this process."""


_CONFIGURED = object()  # JobRunner(backend=...) default: build the backend the settings choose
_BACKEND_KEYS = ("extractor", "openai_base_url", "openai_model", "openai_api_key_env", "claude_model", "llama_model")


class JobRunner:
    """The one worker: queues what its job types say is due, and runs the most urgent ready job."""

    def __init__(self, settings: SettingsSource, stop_event: threading.Event | None = None, *,
                 backend: Any = _CONFIGURED, mock: bool = False, embedder: Embedder | None = None,
                 types: Iterable[JobType] | None = None, sweep_seconds: float = SWEEP_SECONDS) -> None:
        self._settings = settings
        self.stop_event = stop_event or threading.Event()
        self.mock = mock
        self._backend_arg = backend
        self._embedder = embedder
        self.sweep_seconds = sweep_seconds
        self.types: dict[str, JobType] = {t.name: t for t in (types if types is not None else built_in_job_types())}
        self.backend: Backend | None = None
        self.backend_name = "verbatim"
        self.backend_reason = ""
        self.problem: str | None = None          # why LLM jobs cannot run at all, if so
        self.current_job: JobRow | None = None
        self.gate = LLMGate(settings, self.stop_event)
        self.conn: apsw.Connection = None  # type: ignore[assignment]  # opened in the worker thread
        self.store: EpisodeStore = None  # type: ignore[assignment]
        self._wake = threading.Event()
        self._captured: set[str] = set()
        self._captured_lock = threading.Lock()
        self._poked = True
        self._next_sweep = 0.0
        self._thread: threading.Thread | None = None
        self._owns_worker_lock = False
        self._backend_settings = self._backend_key(self.settings)
        self._only: set[str] | None = None
        self._reconfigure_backend = False
        # True while the processor serves a user message (the memory thread's recollection): the worker
        # starts nothing then, and long jobs pause at their slice boundaries (JobContext.make_way).
        self.hot_path_busy: Callable[[], bool] | None = None

    @property
    def settings(self) -> Settings:
        return self._settings.current

    @staticmethod
    def _backend_key(settings: Settings) -> tuple[Any, ...]:
        return tuple(getattr(settings, k) for k in _BACKEND_KEYS)

    # --- wiring API (any thread) ------------------------------------------------------------

    def register(self, job_type: str, handler: Handler, priority: int, *, uses_llm: bool = True) -> None:
        """Add a job type that is only queued explicitly (enqueue); LLM types pause with the budget and breaker."""
        self.types[job_type] = JobType(job_type, handler, priority, uses_llm)

    def on_messages_captured(self, session_id: str) -> None:
        """Capture stored messages of a session: ask the job types what is due for it soon (cheap, non-blocking)."""
        with self._captured_lock:
            self._captured.add(session_id)
        self._wake.set()

    def wake(self) -> None:
        """Something changed (a remember request, new settings, `engram run` poked us): check now."""
        self._next_sweep = 0.0
        self._poked = True
        self._wake.set()

    def settings_changed(self) -> None:
        """The settings holder has new settings (SIGHUP): rebuild the backend if it changed, re-check the budget."""
        key = self._backend_key(self.settings)
        if key != self._backend_settings:
            self._backend_settings = key
            self._reconfigure_backend = True
        self.gate.settings_changed()
        self.wake()

    def enqueue(self, job_type: str, dedupe_key: str, payload: dict[str, Any], *,
                conn: apsw.Connection | None = None, not_before_ms: int | None = None) -> int | None:
        """Queue a registered job type; None when a pending or running job holds the key already."""
        if job_type not in self.types:
            raise KeyError(f"no job type {job_type!r} is registered; register() it first")
        priority = self.types[job_type].priority
        own = conn is None
        conn = conn or open_store(self.settings.db_path)
        try:
            with write_transaction(conn):
                job_id = sql.insert_job(conn, job_type, dedupe_key, priority, payload, now_ms(), not_before_ms)
        finally:
            if own:
                conn.close()
        self._wake.set()
        return job_id

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the one worker thread (it opens its own connection)."""
        if not _WORKER_LOCK.acquire(blocking=False):
            raise WorkerBusy("another JobRunner already works the queue in this process; there is one worker")
        self._owns_worker_lock = True
        self._thread = threading.Thread(target=self._run, name="engram-jobs", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self.stop_event.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            if self._thread.is_alive():
                log.warning("job worker still busy at shutdown (%s); the job runs again on the next start",
                            self.current_job.type if self.current_job else "?")
            self._thread = None

    def _run(self) -> None:
        try:
            while not self.stop_event.is_set():
                try:
                    self.open()
                    break
                except Exception as exc:  # e.g. the database locked by a migration elsewhere
                    log.error("job worker cannot start (%s); retrying in 30 s — jobs wait, capture continues", exc)
                    self.close()
                    self.stop_event.wait(30)
            while not self.stop_event.is_set():
                try:
                    ran = self.step()
                except apsw.BusyError:
                    log.warning("database locked for over 5 s in the job worker; retrying")
                    ran = False
                except Exception:
                    log.exception("job worker: unexpected error; continuing")
                    ran = False
                if not ran:
                    self._wake.wait(self._wait_seconds())
                    self._wake.clear()
        finally:
            self.close()
            if self._owns_worker_lock:
                self._owns_worker_lock = False
                _WORKER_LOCK.release()

    def open(self) -> None:
        """Open the worker's connection and backend, and recover jobs a dead worker left running."""
        self.conn = open_store(self.settings.db_path)
        self.store = EpisodeStore(self._settings, self.conn, embedder=self._embedder)
        self.gate.load(self.conn)
        self._build_backend()
        self.recover_orphans()

    def close(self) -> None:
        if self.backend is not None and self._backend_arg is _CONFIGURED:  # a caller's backend is the caller's
            with contextlib.suppress(Exception):
                self.backend.close()
            self.backend = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None  # type: ignore[assignment]

    def _build_backend(self) -> None:
        self._reconfigure_backend = False
        if self.backend is not None and self._backend_arg is _CONFIGURED and not self.mock:
            with contextlib.suppress(Exception):
                self.backend.close()
        self.problem = None
        if os.environ.get(ENGRAM_CHILD_ENV):
            # Started inside Engram's own agent child: never spawn another LLM call from there.
            self.backend, self.backend_name = None, "verbatim"
            self.backend_reason = f"${ENGRAM_CHILD_ENV} is set: this process is Engram's own agent"
            return
        if self.mock:
            self.backend = self._backend_arg if isinstance(self._backend_arg, MockBackend) else MockBackend()
            self.backend_name, self.backend_reason = "mock", "--mock: canned outputs, no network"
            return
        if self._backend_arg is not _CONFIGURED:
            self.backend = self._backend_arg
            self.backend_name = self.backend.name if self.backend else "verbatim"
            self.backend_reason = "given by the caller"
            return
        try:
            name, reason = choose_backend(self.settings)
            self.backend_name, self.backend_reason = name, reason
            self.backend = create_backend(self.settings, name)
        except BackendUnavailable as exc:
            self.backend = None
            self.problem = str(exc)
            log.error("LLM extraction is off: %s (verbatim episodes continue)", exc)
            return
        log.info("extractor: %s (%s)", self.backend_name, self.backend_reason)

    def recover_orphans(self) -> int:
        """Running jobs whose worker is gone (killed, crashed) go back to pending."""
        recovered = 0
        now = now_ms()
        with write_transaction(self.conn):
            for job in sql.running_jobs(self.conn):
                dead = job.owner_pid is None or job.owner_pid == os.getpid() or not _pid_alive(job.owner_pid)
                if dead or (job.started_at or 0) < now - STALE_RUNNING_MS:
                    sql.release_job(self.conn, job.id, now)
                    recovered += 1
                    log.warning("job %s #%d was left running by a worker that is gone (pid %s); it runs again",
                                job.type, job.id, job.owner_pid)
        return recovered

    # --- one turn of the worker --------------------------------------------------------------

    def make_way(self) -> None:
        """Wait while the hot path is busy, at most MAX_YIELD_SECONDS: a flag stuck on never stalls the queue."""
        busy = self.hot_path_busy
        if busy is None:
            return
        deadline = time.monotonic() + MAX_YIELD_SECONDS
        while busy() and time.monotonic() < deadline and not self.stop_event.is_set():
            time.sleep(YIELD_POLL_SECONDS)

    def step(self) -> bool:
        """Queue what is due, then run the most urgent ready job; False when there was none."""
        self.make_way()
        if self._reconfigure_backend:
            self._build_backend()
        now = now_ms()
        with self._captured_lock:
            captured, self._captured = self._captured, set()
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + self.sweep_seconds
            self._poked = False
            self.enqueue_due(None, now)
            with write_transaction(self.conn):
                sql.prune_done_jobs(self.conn, now - KEEP_DONE_DAYS * 86_400_000)
        elif self._poked:
            self._poked = False
            self.enqueue_due(frozenset(captured), now)
        elif captured:
            self.enqueue_due(frozenset(captured), now, on_capture=True)
        job = self._claim(now)
        if job is None:
            return False
        self.execute(job)
        return True

    def enqueue_due(self, sessions: frozenset[str] | None, now: int, *, on_capture: bool = False) -> list[int]:
        """Ask the job types what is due (sessions: the ones just captured; None: a full sweep) and queue it.

        on_capture: only sessions captured, so only the types asked on capture are asked."""
        check = DueCheck(self.conn, self.settings, now, sessions, self._llm_available(now))
        due = [(job_type, job) for job_type in self.types.values() if job_type.asked_on_capture or not on_capture
               for job in job_type.due(check)]
        queued: list[int] = []
        if not due:
            return queued
        with write_transaction(self.conn):
            for job_type, job in due:
                job_id = sql.insert_job(self.conn, job_type.name, job.dedupe_key, job_type.priority, job.payload, now)
                if job_id is not None:
                    queued.append(job_id)
                    log.info("queued %s #%d: %s", job_type.name, job_id, job.reason)
        return queued

    def _llm_available(self, now: int) -> bool:
        return self.backend is not None and self.gate.available(now)

    def _runnable_types(self, now: int) -> list[str]:
        llm_ok = self._llm_available(now)
        return [t.name for t in self.types.values()
                if (llm_ok or not t.uses_llm) and (self._only is None or t.name in self._only)]

    def _claim(self, now: int) -> JobRow | None:
        types = self._runnable_types(now)
        with write_transaction(self.conn):
            return sql.claim_next_job(self.conn, types, now, os.getpid())

    def _wait_seconds(self) -> float:
        now = now_ms()
        wait = min(MAX_WAIT_SECONDS, max(self._next_sweep - time.monotonic(), 0.05))
        try:
            ready = sql.next_ready_time(self.conn, self._runnable_types(now))
        except apsw.BusyError:
            ready = None
        if ready is not None:
            wait = min(wait, max((ready - now) / 1000, 0.0))
        for resume in self.gate.resume_times():
            if resume > now:
                wait = min(wait, (resume - now) / 1000 + 0.01)
        return max(wait, 0.01)

    def run_until_idle(self, max_jobs: int | None = None, *, sweep: bool = True,
                       only: set[str] | None = None) -> int:
        """Work in the calling thread until no job is ready (CLI one-shots, tests); returns jobs run.

        only: run just these job types (e.g. {"remember"} for a backfill that must not call an LLM).
        """
        if not _WORKER_LOCK.acquire(blocking=False):
            raise WorkerBusy("another JobRunner already works the queue in this process; there is one worker")
        self._only = only
        try:
            opened_here = self.conn is None
            if opened_here:
                self.open()
            if not sweep:
                self._next_sweep = time.monotonic() + self.sweep_seconds
            ran = 0
            try:
                while (max_jobs is None or ran < max_jobs) and not self.stop_event.is_set():
                    if not self.step():
                        break
                    ran += 1
                    self._next_sweep = time.monotonic() + self.sweep_seconds  # one sweep per drain
            finally:
                if opened_here:
                    self.close()
            return ran
        finally:
            self._only = None
            _WORKER_LOCK.release()

    # --- running a job ------------------------------------------------------------------------

    def execute(self, job: JobRow) -> None:
        job_type = self.types.get(job.type)
        self.current_job = job
        started = time.monotonic()
        try:
            if job_type is None:  # claimed only registered types; a race with unregister is a pause
                raise RetryLater(f"no handler registered for job type {job.type!r}", 3600)
            job_type.handler(JobContext(job, self.settings, self.conn, self.store, self.backend, self.stop_event,
                                        self.call_llm, self.make_way), job)
        except RetryLater as pause:
            self._reschedule(job, now_ms() + int(pause.delay_seconds * 1000), pause.reason, pause.count_attempt)
        except costs.BudgetExhausted as exc:
            self.gate.pause(self.conn, exc.resume_at_ms, str(exc))
            self._reschedule(job, exc.resume_at_ms, str(exc), False)
        except BreakerOpen as exc:
            self._reschedule(job, exc.until_ms, str(exc), False)
        except JobRejected as exc:
            note = str(exc)[:2000]
            log.error("job %s #%d rejected and kept as failed: %s", job.type, job.id, note)
            self._write(lambda: sql.finish_job(self.conn, job.id, now_ms(), "failed", note))
        except apsw.BusyError:
            self._reschedule(job, now_ms() + 1000, "database locked; retrying", False)
        except BackendError as exc:
            self._failed(job, exc, exc.retry_after)
        except EmbedderError as exc:
            self._failed(job, exc, None)
        except Exception as exc:
            log.exception("job %s #%d failed with an unexpected error", job.type, job.id)
            self._failed(job, exc, None)
        else:
            self._write(lambda: sql.finish_job(self.conn, job.id, now_ms(), "done"))
            log.info("job %s #%d done in %.1f s", job.type, job.id, time.monotonic() - started)
        finally:
            self.current_job = None

    def _write(self, fn: Callable[[], object]) -> None:
        def txn() -> None:
            with write_transaction(self.conn):
                fn()
        retry_when_busy(txn, what="recording a job's outcome", stop=self.stop_event)

    def _reschedule(self, job: JobRow, at_ms: int, reason: str, count_attempt: bool) -> None:
        self._write(lambda: sql.reschedule_job(self.conn, job.id, at_ms, now_ms(), error=reason[:2000],
                                               count_attempt=count_attempt))

    def _failed(self, job: JobRow, exc: BaseException, retry_after: float | None) -> None:
        attempts = job.attempts + 1
        delay = min(self.settings.retry_base_seconds * 2 ** (attempts - 1), self.settings.retry_max_seconds)
        if retry_after:
            delay = max(delay, retry_after)
        message = f"{type(exc).__name__}: {exc}"
        log.warning("job %s #%d failed (attempt %d): %s; retrying in %.0f s", job.type, job.id, attempts, message,
                    delay)
        self._reschedule(job, now_ms() + int(delay * 1000), message, True)

    # --- the LLM call ---------------------------------------------------------------------------

    def call_llm(self, job: JobRow | None, request: LLMRequest, parse: Callable[[str], T]) -> T:
        backend = self.backend
        if backend is None:
            raise RetryLater(self.problem or "no LLM backend is configured", 3600)
        return self.gate.call(self.conn, backend, job, request, parse)

    # --- what status and /ping show ----------------------------------------------------------

    def ping_info(self) -> dict[str, Any]:
        job = self.current_job
        return {"job": job.type if job else None, "job_id": job.id if job else None}

    def status(self) -> dict[str, Any]:
        """For `engram status` through the control plane: the database's view plus this worker's."""
        conn = connect(self.settings.db_path, readonly=True)
        try:
            status = jobs_status(conn, self.settings)
        finally:
            conn.close()
        status.update({
            "extractor": self.backend_name, "extractor_reason": self.backend_reason, "extractor_problem": self.problem,
            "processing": self.ping_info()["job"],
        })
        return status


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
