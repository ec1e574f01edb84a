"""The durable single-worker job queue (seed 000, made durable in SQLite).

Jobs live in the ``jobs`` table: type, dedupe key (unique while pending or running), priority
(lower first: extract 0, remember 0, curator 1, context-check 2, inquisitor 3), JSON payload,
attempts, next_attempt_at, last_error and state. ``JobRunner`` runs exactly one worker thread
with its own connection; a process runs at most one JobRunner, and every backend call holds
``LLM_CALL_LOCK``, so there are never two LLM calls at once in the process.

Failures retry with exponential backoff (retry_base_seconds doubling up to retry_max_seconds,
or longer when the server sent Retry-After); nothing is dropped. ``breaker_failures``
consecutive backend failures open a circuit breaker that pauses LLM jobs for
``breaker_cooldown_seconds``; the next call after it is a trial that closes it or opens it
again. The daily budget pauses LLM jobs until the next UTC day. Pauses do not count as attempts,
and jobs that need no LLM (remember) keep running through them.

A worker killed mid-job leaves its job 'running' with a dead owner pid; the next worker puts it
back to pending. Handlers commit their results with their progress, so rerunning is safe.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import apsw

from processor.config import Settings, ensure_home
from processor.jobs import costs
from processor.jobs.backends import (
    LLM_CALL_LOCK,
    Backend,
    BackendError,
    BackendUnavailable,
    LLMRequest,
    OutputError,
    choose_backend,
    create_backend,
)
from processor.jobs.backends.claude_backend import ENGRAM_CHILD_ENV
from processor.jobs.backends.mock_backend import MockBackend
from processor.jobs.dedupe import Deduper
from processor.jobs.extraction import EXTRACT, Extractor, OutputLimits, dedupe_key, evaluate_sessions
from processor.jobs.remember import REMEMBER, enqueue_remember_files, remember_job
from processor.memory.embedder import Embedder
from processor.memory.episodes import EpisodeStore
from processor.memory.errors import EmbedderError
from processor.store import connect, open_store, retry_when_busy, write_transaction
from processor.store import episodes as episodes_sql
from processor.store import jobs as sql
from processor.store.jobs import JobRow

log = logging.getLogger(__name__)

T = TypeVar("T")

# Priorities (lower runs first). The last three job types are filled in by a later issue.
PRIORITY_EXTRACT = 0
PRIORITY_REMEMBER = 0
PRIORITY_CURATOR = 1
PRIORITY_CONTEXT_CHECK = 2
PRIORITY_INQUISITOR = 3

SWEEP_SECONDS = 30.0          # time-based triggers, remember files and housekeeping, at least this often
KEEP_DONE_DAYS = 7            # finished jobs are kept this long for `engram status`
STALE_RUNNING_MS = 3 * 3600 * 1000  # a 'running' job this old has lost its worker even if the pid lives on
MAX_WAIT_SECONDS = 5.0
BREAKER_META_KEY = "jobs.breaker"
PAUSE_META_KEY = "jobs.llm_pause"

# One JobRunner per process works the queue: held by the worker for as long as it runs.
_WORKER_LOCK = threading.Lock()


def now_ms() -> int:
    return int(time.time() * 1000)


class RetryLater(Exception):  # noqa: N818 - it is a signal, not an error
    """Put the job back for later without counting a failure (a pause, a shutdown)."""

    def __init__(self, reason: str, delay_seconds: float, *, count_attempt: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay_seconds = delay_seconds
        self.count_attempt = count_attempt


class JobRejected(Exception):  # noqa: N818 - the job, not the code, is wrong
    """The job can never run (a malformed payload): it is marked failed, kept and shown, not retried."""


class BreakerOpen(Exception):  # noqa: N818
    def __init__(self, until_ms: int, last_error: str | None) -> None:
        super().__init__(f"circuit breaker open until {_clock(until_ms)} after repeated backend failures"
                         + (f" (last: {last_error})" if last_error else ""))
        self.until_ms = until_ms


class WorkerBusy(RuntimeError):
    """Another JobRunner is already working the queue in this process."""


def _clock(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


Handler = Callable[["JobContext", JobRow], None]


@dataclass(frozen=True)
class JobType:
    name: str
    handler: Handler
    priority: int
    uses_llm: bool


@dataclass
class Breaker:
    failures: int = 0
    open_until_ms: int = 0
    last_error: str | None = None

    def is_open(self, now: int) -> bool:
        return self.open_until_ms > now


class JobContext:
    """What a handler gets: the worker's connection and stores, the backend, and the one way to call it."""

    def __init__(self, runner: JobRunner, job: JobRow) -> None:
        self.runner = runner
        self.job = job
        self.settings: Settings = runner.settings
        self.conn: apsw.Connection = runner.conn
        self.store: EpisodeStore = runner.store
        self.deduper: Deduper = runner.deduper
        self.backend: Backend | None = runner.backend

    def stop_requested(self) -> bool:
        return self.runner.stop_event.is_set()

    def call_llm(self, request: LLMRequest, parse: Callable[[str], T]) -> T:
        return self.runner.call_llm(self.job, request, parse)


_CONFIGURED = object()  # JobRunner(backend=...) default: build the backend the settings choose


class JobRunner:
    """The one worker. Wire it into the processor (see README_SECTION.md / the report)."""

    def __init__(self, settings: Settings, stop_event: threading.Event | None = None, *,
                 backend: Any = _CONFIGURED, mock: bool = False, embedder: Embedder | None = None,
                 output_limits: OutputLimits | None = None, sweep_seconds: float = SWEEP_SECONDS) -> None:
        self.settings = settings
        self.stop_event = stop_event or threading.Event()
        self.mock = mock
        self._backend_arg = backend
        self._embedder = embedder
        self.sweep_seconds = sweep_seconds
        self.types: dict[str, JobType] = {}
        self.backend: Backend | None = None
        self.backend_name = "verbatim"
        self.backend_reason = ""
        self.problem: str | None = None          # why LLM jobs cannot run at all, if so
        self.current_job: JobRow | None = None
        self.breaker = Breaker()
        self.llm_paused_until = 0
        self.llm_pause_reason: str | None = None
        self.conn: apsw.Connection = None  # type: ignore[assignment]  # opened in the worker thread
        self.store: EpisodeStore = None  # type: ignore[assignment]
        self.deduper: Deduper = None  # type: ignore[assignment]
        self._wake = threading.Event()
        self._captured: set[str] = set()
        self._captured_lock = threading.Lock()
        self._remember_flag = True
        self._next_sweep = 0.0
        self._thread: threading.Thread | None = None
        self._owns_worker_lock = False
        self._reconfigure_backend = False
        self._only: set[str] | None = None
        self.register(EXTRACT, Extractor(output_limits), PRIORITY_EXTRACT, uses_llm=True)
        self.register(REMEMBER, remember_job, PRIORITY_REMEMBER, uses_llm=False)

    # --- wiring API (any thread) ------------------------------------------------------------

    def register(self, job_type: str, handler: Handler, priority: int, *, uses_llm: bool = True) -> None:
        """Add a job type; LLM job types pause with the budget and the breaker."""
        self.types[job_type] = JobType(job_type, handler, priority, uses_llm)

    def on_messages_captured(self, session_id: str) -> None:
        """Capture stored messages of a session: evaluate its extraction triggers soon (cheap, non-blocking)."""
        with self._captured_lock:
            self._captured.add(session_id)
        self._wake.set()

    def on_remember_files(self) -> None:
        """The remember queue folder changed: queue a job per new request file."""
        self._remember_flag = True
        self._wake.set()

    def wake(self) -> None:
        self._next_sweep = 0.0
        self._remember_flag = True
        self._wake.set()

    def reconfigure(self, settings: Settings) -> None:
        """New settings (SIGHUP): budget and triggers apply at once; the backend is rebuilt before the next job."""
        old = self.settings
        self.settings = settings
        keys = ("extractor", "openai_base_url", "openai_model", "openai_api_key_env", "claude_model", "llama_model")
        if any(getattr(old, k) != getattr(settings, k) for k in keys):
            self._reconfigure_backend = True
        if self.llm_pause_reason and "budget" in self.llm_pause_reason:
            self.llm_paused_until = 0  # re-checked against the new budget on the next call
            self.llm_pause_reason = None
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
                    log.error("job worker cannot start (%s); retrying in 30 s — extraction and remember jobs "
                              "wait, capture continues", exc)
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
        ensure_home(self.settings)
        self.conn = open_store(self.settings.db_path)
        self.store = EpisodeStore(self.settings, self.conn, embedder=self._embedder)
        self.deduper = Deduper(self.store)
        self._load_state()
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

    def step(self) -> bool:
        """Queue what is due, then run the most urgent ready job; False when there was none."""
        if self._reconfigure_backend:
            self._build_backend()
        now = now_ms()
        with self._captured_lock:
            captured, self._captured = self._captured, set()
        if captured and self.backend is not None:
            self.enqueue_due(sorted(captured), now)
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + self.sweep_seconds
            self.sweep(now)
        elif self._remember_flag:
            self._remember_flag = False
            with write_transaction(self.conn):
                enqueue_remember_files(self.conn, self.settings, self.types[REMEMBER].priority, now)
        job = self._claim(now)
        if job is None:
            return False
        self.execute(job)
        return True

    def sweep(self, now: int) -> None:
        """Time-based extraction triggers for every session, remember files, and old finished jobs."""
        self._remember_flag = False
        with write_transaction(self.conn):
            enqueue_remember_files(self.conn, self.settings, self.types[REMEMBER].priority, now)
            sql.prune_done_jobs(self.conn, now - KEEP_DONE_DAYS * 86_400_000)
        if self.backend is not None:
            self.enqueue_due(None, now)

    def enqueue_due(self, session_ids: list[str] | None, now: int) -> list[int]:
        """Queue an extract job for each session whose triggers fire (one per session while pending)."""
        due = [d for d in evaluate_sessions(self.conn, self.settings, now, session_ids) if d.reason]
        queued = []
        if not due:
            return queued
        with write_transaction(self.conn):
            for d in due:
                job_id = sql.insert_job(self.conn, EXTRACT, dedupe_key(d.session_id), self.types[EXTRACT].priority,
                                        {"session_id": d.session_id}, now)
                if job_id is not None:
                    queued.append(job_id)
                    log.info("queued extract #%d for session %s: %s", job_id, d.session_id, d.reason)
        return queued

    def _llm_available(self, now: int) -> bool:
        return (self.backend is not None and not self.breaker.is_open(now) and self.llm_paused_until <= now)

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
        for resume in (self.breaker.open_until_ms, self.llm_paused_until):
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
            job_type.handler(JobContext(self, job), job)
        except RetryLater as pause:
            self._reschedule(job, now_ms() + int(pause.delay_seconds * 1000), pause.reason, pause.count_attempt)
        except costs.BudgetExhausted as exc:
            self._pause_llm(exc.resume_at_ms, str(exc))
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
        delay = min(float(self.settings.retry_base_seconds) * 2 ** (attempts - 1),
                    float(self.settings.retry_max_seconds))
        if retry_after:
            delay = max(delay, retry_after)
        message = f"{type(exc).__name__}: {exc}"
        log.warning("job %s #%d failed (attempt %d): %s; retrying in %.0f s", job.type, job.id, attempts, message,
                    delay)
        self._reschedule(job, now_ms() + int(delay * 1000), message, True)

    # --- the LLM call: budget, breaker, lock, ledger -------------------------------------------

    def call_llm(self, job: JobRow | None, request: LLMRequest, parse: Callable[[str], T]) -> T:
        backend = self.backend
        if backend is None:
            raise RetryLater(self.problem or "no LLM backend is configured", 3600)
        now = now_ms()
        if self.breaker.is_open(now):
            raise BreakerOpen(self.breaker.open_until_ms, self.breaker.last_error)
        price = costs.price_for(backend.model, self.settings.model_prices) if backend.billed \
            else costs.Price(0.0, 0.0, True)
        estimate = price.cost(costs.estimate_tokens(request.system + request.prompt), request.max_output_tokens)
        with LLM_CALL_LOCK:
            costs.ensure_budget(self.conn, self.settings, estimate, now)
            started, t0 = now_ms(), time.monotonic()
            try:
                response = backend.complete(request)
            except Exception as exc:
                error = exc if isinstance(exc, BackendError) else BackendError(
                    f"{backend.name} failed unexpectedly: {type(exc).__name__}: {exc}")
                spent = error.spent
                self._ledger(job, backend, spent.model if spent else backend.model, started, t0,
                             spent.tokens_in if spent else 0, spent.tokens_out if spent else 0,
                             costs.call_cost(price, spent.tokens_in, spent.tokens_out, spent.cost_usd) if spent else 0,
                             str(error))
                self._breaker_failure(str(error), error.retry_after)
                if error is exc:
                    raise
                raise error from exc
        cost = costs.call_cost(price, response.tokens_in, response.tokens_out, response.cost_usd)
        try:
            result = parse(response.text)
        except OutputError as exc:
            self._ledger(job, backend, response.model, started, t0, response.tokens_in, response.tokens_out, cost,
                         str(exc))
            self._breaker_failure(str(exc), None)
            raise
        self._ledger(job, backend, response.model, started, t0, response.tokens_in, response.tokens_out, cost, None)
        self._breaker_success()
        return result

    def _ledger(self, job: JobRow | None, backend: Backend, model: str, started: int, t0: float, tokens_in: int,
                tokens_out: int, cost: float, error: str | None) -> None:
        call = sql.LLMCall(job.id if job else None, job.type if job else None, backend.name, model, started,
                           int((time.monotonic() - t0) * 1000), tokens_in, tokens_out, cost, error is None,
                           error[:2000] if error else None)
        retry_when_busy(lambda: costs.record_call(self.conn, call), what="recording an LLM call's cost",
                        stop=self.stop_event)

    def _breaker_failure(self, error: str, retry_after: float | None) -> None:
        now = now_ms()
        b = self.breaker
        b.failures += 1
        b.last_error = error[:500]
        threshold = max(int(self.settings.breaker_failures), 1)
        if b.failures >= threshold:
            b.open_until_ms = now + int(float(self.settings.breaker_cooldown_seconds) * 1000)
            log.error("circuit breaker OPEN after %d consecutive backend failures (last: %s); LLM jobs pause until "
                      "%s", b.failures, b.last_error, _clock(b.open_until_ms))
        if retry_after:
            # The server asked everyone to wait, not just this job.
            self._pause_llm(now + int(retry_after * 1000), f"rate limited by the backend for {retry_after:g} s")
        self._save_state()

    def _breaker_success(self) -> None:
        b = self.breaker
        if b.failures or b.open_until_ms:
            if b.failures >= max(int(self.settings.breaker_failures), 1):
                log.info("circuit breaker closed: the backend answered again")
            self.breaker = Breaker()
            self._save_state()

    def _pause_llm(self, until_ms: int, reason: str) -> None:
        if self.llm_paused_until < until_ms or self.llm_pause_reason != reason:
            log.warning("LLM jobs paused until %s: %s", _clock(until_ms), reason)
        self.llm_paused_until = max(self.llm_paused_until, until_ms)
        self.llm_pause_reason = reason
        self._save_state()

    def _save_state(self) -> None:
        b = self.breaker
        payload = {BREAKER_META_KEY: json.dumps({"failures": b.failures, "open_until_ms": b.open_until_ms,
                                                 "last_error": b.last_error}),
                   PAUSE_META_KEY: json.dumps({"until_ms": self.llm_paused_until, "reason": self.llm_pause_reason})}

        def save() -> None:
            for key, value in payload.items():
                episodes_sql.set_meta(self.conn, key, value)
        self._write(save)

    def _load_state(self) -> None:
        """The breaker survives restarts: a crash loop must not hammer a failing backend."""
        raw = episodes_sql.get_meta(self.conn, BREAKER_META_KEY)
        if raw:
            with contextlib.suppress(ValueError, TypeError):
                data = json.loads(raw)
                self.breaker = Breaker(int(data.get("failures", 0)), int(data.get("open_until_ms", 0)),
                                       data.get("last_error"))

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


def jobs_status(conn: apsw.Connection, settings: Settings, now: int | None = None) -> dict[str, Any]:
    """Spend, budget, breaker and queue depth, from the database alone (works with the processor stopped)."""
    now = now if now is not None else now_ms()
    try:
        spent, calls, tokens_in, tokens_out = costs.today_spend(conn, now)
        depth = sql.queue_depth(conn)
        retrying = sql.retrying_jobs(conn)
    except apsw.SQLError:  # a database from before the job queue existed
        spent, calls, tokens_in, tokens_out, depth, retrying = 0.0, 0, 0, 0, {}, []
    budget = float(settings.daily_budget_usd)
    breaker = Breaker()
    pause: dict[str, Any] = {}
    with contextlib.suppress(apsw.SQLError, ValueError, TypeError):
        raw = episodes_sql.get_meta(conn, BREAKER_META_KEY)
        if raw:
            data = json.loads(raw)
            breaker = Breaker(int(data.get("failures", 0)), int(data.get("open_until_ms", 0)), data.get("last_error"))
        raw = episodes_sql.get_meta(conn, PAUSE_META_KEY)
        pause = json.loads(raw) if raw else {}
    try:
        name, reason = choose_backend(settings)
    except BackendUnavailable as exc:
        name, reason = "verbatim", str(exc)
    paused = pause.get("until_ms", 0) > now
    budget_reached = spent >= budget or (paused and "budget" in str(pause.get("reason")))
    return {
        "extractor": name,
        "extractor_reason": reason,
        "spend_today_usd": round(spent, 6),
        "llm_calls_today": calls,
        "tokens_today": {"in": tokens_in, "out": tokens_out},
        "daily_budget_usd": budget,
        "budget_state": (f"reached: LLM jobs paused until {_clock(costs.next_utc_day_ms(now))}"
                         if budget_reached else "ok"),
        "breaker": {"state": "open" if breaker.is_open(now) else "closed", "failures": breaker.failures,
                    "open_until": _clock(breaker.open_until_ms) if breaker.is_open(now) else None,
                    "last_error": breaker.last_error},
        "llm_paused_until": _clock(pause["until_ms"]) if paused else None,
        "llm_pause_reason": pause.get("reason") if paused else None,
        "queue": depth,
        "retrying": [{"id": j.id, "type": j.type, "attempts": j.attempts, "next_attempt": _clock(j.next_attempt_at),
                      "last_error": (j.last_error or "")[:200], "state": j.state} for j in retrying],
    }


def format_jobs_status(status: dict[str, Any]) -> list[str]:
    """Lines for `engram status`."""
    lines = [f"extractor: {status['extractor']} ({status['extractor_reason']})"]
    if status.get("extractor_problem"):
        lines.append(f"  problem: {status['extractor_problem']}")
    lines.append(f"LLM spend today: ${status['spend_today_usd']:.4f} of ${status['daily_budget_usd']:.2f} "
                 f"({status['llm_calls_today']} calls, {status['tokens_today']['in']} in / "
                 f"{status['tokens_today']['out']} out tokens); budget {status['budget_state']}")
    breaker = status["breaker"]
    if breaker["state"] == "open":
        lines.append(f"circuit breaker: OPEN until {breaker['open_until']} ({breaker['failures']} failures; last: "
                     f"{breaker['last_error']})")
    else:
        lines.append(f"circuit breaker: closed ({breaker['failures']} recent failures)")
    if status.get("llm_paused_until"):
        lines.append(f"LLM jobs paused until {status['llm_paused_until']}: {status['llm_pause_reason']}")
    if status.get("processing"):
        lines.append(f"processing: {status['processing']}")
    queue = status.get("queue") or {}
    if queue:
        lines.append("jobs: " + "; ".join(f"{t} " + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
                                          for t, states in sorted(queue.items())))
    else:
        lines.append("jobs: none waiting")
    for job in status.get("retrying") or []:
        lines.append(f"  {job['type']} #{job['id']} {job['state']}, {job['attempts']} attempt(s), next "
                     f"{job['next_attempt']}: {job['last_error']}")
    return lines
