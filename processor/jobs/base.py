"""What a job type is: its handler, priority, whether it needs the LLM, and when it is due; plus a job's signals.

This module imports nothing from the rest of ``processor.jobs``: job types (extraction, remember,
later the curator and the inquisitor) build on it, the queue runs them, and neither needs the other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import apsw

from processor.config import Settings

if TYPE_CHECKING:  # annotations only: the backends know nothing of jobs
    from processor.jobs.backends.base import Backend, LLMRequest
    from processor.memory.episode_store import EpisodeStore
    from processor.store.jobs import JobRow

T = TypeVar("T")


class RetryLater(Exception):  # noqa: N818 - it is a signal, not an error
    """Put the job back for later without counting a failure (a pause, a shutdown)."""

    def __init__(self, reason: str, delay_seconds: float, *, count_attempt: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay_seconds = delay_seconds
        self.count_attempt = count_attempt


class JobRejected(Exception):  # noqa: N818 - the job, not the code, is wrong
    """The job can never run (a malformed payload): it is marked failed, kept and shown, not retried."""


@dataclass(frozen=True)
class DueJob:
    """A job a type wants queued: its dedupe key (one live job per key), payload, and why."""

    dedupe_key: str
    payload: dict[str, Any]
    reason: str


@dataclass(frozen=True)
class DueCheck:
    """What a job type's `due` function is asked: which sessions captured new messages since the last
    check (None: a periodic sweep over everything), and whether an LLM backend is usable."""

    conn: apsw.Connection
    settings: Settings
    now_ms: int
    sessions: frozenset[str] | None
    llm_available: bool


def _no_hot_path() -> None:
    return None


class JobContext:
    """What a handler gets: the worker's connection and store, the backend, and the one way to call it."""

    def __init__(self, job: JobRow, settings: Settings, conn: apsw.Connection, store: EpisodeStore,
                 backend: Backend | None, stop_event: threading.Event,
                 call_llm: Callable[[JobRow | None, LLMRequest, Callable[[str], Any]], Any],
                 make_way: Callable[[], None] = _no_hot_path) -> None:
        self.job = job
        self.settings = settings
        self.conn = conn
        self.store = store
        self.backend = backend
        self._stop_event = stop_event
        self._call_llm = call_llm
        self._make_way = make_way

    def stop_requested(self) -> bool:
        return self._stop_event.is_set()

    def make_way(self) -> None:
        """Between two slices of a long job: wait while the processor serves a user message.

        The worker shares the processor's interpreter with the hot path (a new user message's
        recollection); a job that kept the CPU, the interpreter lock or the write lock meanwhile would
        make that recollection late. Call it where no transaction is open."""
        self._make_way()

    def call_llm(self, request: LLMRequest, parse: Callable[[str], T]) -> T:
        """Call the backend under the LLM gate (one call at a time, budget, breaker, ledger)."""
        return self._call_llm(self.job, request, parse)


Handler = Callable[[JobContext, "JobRow"], None]
DueFinder = Callable[[DueCheck], list[DueJob]]


def _nothing_due(check: DueCheck) -> list[DueJob]:
    return []


@dataclass(frozen=True)
class JobType:
    """A kind of job the one worker runs. `due` only reads; it is asked on periodic sweeps and pokes, and,
    when `asked_on_capture`, each time sessions capture new messages (then `check.sessions` names them).

    Only a type whose due-ness depends on the captured sessions should be asked on capture: a capture
    comes with every user message, just when the recollection for it is being computed, and a check
    that scans the whole store there (pressure, memories citing code) would slow that hot path down.
    """

    name: str
    handler: Handler
    priority: int  # lower runs first (seed 000: extract/remember 0, curator 1, context check 2, inquisitor 3)
    uses_llm: bool
    due: DueFinder = field(default=_nothing_due)
    asked_on_capture: bool = False
