"""The one door to an LLM: one call at a time, the daily budget, the circuit breaker, pauses and the cost ledger.

Every backend call of every job type goes through `LLMGate.call`. Its prompt passes the redaction door first
(``processor.redaction``): a memory, a transcript excerpt or a file quoted in it never reaches a backend with a
secret in it, whatever the job that built it. It holds the user's one call
slot (``call_lock.py``, shared by every Engram process), refuses to start a call while the breaker
is open or when the call's worst case would cross today's budget, records the call in ``llm_calls``
whatever happens, still under the slot, and counts failures: ``breaker_failures`` in a row open
the breaker for ``breaker_cooldown_seconds``; the next call after it is a trial. The breaker and
pauses are kept in ``meta`` so a crash loop cannot hammer a failing backend.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import apsw

from processor.clock import now_ms, utc_clock
from processor.config import SettingsSource
from processor.jobs import costs
from processor.jobs.backends import Backend, BackendError, LLMRequest, OutputError
from processor.jobs.call_lock import llm_call_lock
from processor.redaction import redact
from processor.store import episodes as meta_sql
from processor.store import jobs as sql
from processor.store import retry_when_busy, write_transaction
from processor.store.jobs import JobRow

log = logging.getLogger(__name__)

T = TypeVar("T")

BREAKER_META_KEY = "jobs.breaker"
PAUSE_META_KEY = "jobs.llm_pause"


@dataclass
class Breaker:
    failures: int = 0
    open_until_ms: int = 0
    last_error: str | None = None

    def is_open(self, now: int) -> bool:
        return self.open_until_ms > now


class BreakerOpen(Exception):  # noqa: N818
    def __init__(self, until_ms: int, last_error: str | None) -> None:
        super().__init__(f"circuit breaker open until {utc_clock(until_ms)} after repeated backend failures"
                         + (f" (last: {last_error})" if last_error else ""))
        self.until_ms = until_ms


def read_breaker(conn: apsw.Connection) -> Breaker:
    raw = meta_sql.get_meta(conn, BREAKER_META_KEY)
    if raw:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            data = json.loads(raw)
            return Breaker(int(data.get("failures", 0)), int(data.get("open_until_ms", 0)), data.get("last_error"))
    return Breaker()


def read_pause(conn: apsw.Connection) -> dict:
    raw = meta_sql.get_meta(conn, PAUSE_META_KEY)
    with contextlib.suppress(ValueError, TypeError):
        data = json.loads(raw) if raw else {}
        return data if isinstance(data, dict) else {}
    return {}


class LLMGate:
    """The budget, breaker and pause state of LLM calls, on the worker's connection."""

    def __init__(self, settings: SettingsSource, stop_event: threading.Event) -> None:
        self._settings = settings
        self.stop_event = stop_event
        self.breaker = Breaker()
        self.paused_until = 0
        self.pause_reason: str | None = None

    def load(self, conn: apsw.Connection) -> None:
        """The breaker survives restarts: a crash loop must not hammer a failing backend."""
        self.breaker = read_breaker(conn)

    def available(self, now: int) -> bool:
        return not self.breaker.is_open(now) and self.paused_until <= now

    def resume_times(self) -> tuple[int, int]:
        return self.breaker.open_until_ms, self.paused_until

    def settings_changed(self) -> None:
        """A new budget may allow calls again: re-check it on the next call instead of waiting for tomorrow."""
        if self.pause_reason and "budget" in self.pause_reason:
            self.paused_until = 0
            self.pause_reason = None

    def call(self, conn: apsw.Connection, backend: Backend, job: JobRow | None, request: LLMRequest,
             parse: Callable[[str], T]) -> T:
        settings = self._settings.current
        request = dataclasses.replace(request, system=redact(request.system), prompt=redact(request.prompt))
        now = now_ms()
        if self.breaker.is_open(now):
            raise BreakerOpen(self.breaker.open_until_ms, self.breaker.last_error)
        price = costs.price_for(backend.model, settings.model_prices) if backend.billed \
            else costs.Price(0.0, 0.0, True)
        # The worst case, not a guess: every input byte a token, plus the whole output allowance.
        estimate = price.cost(costs.worst_case_input_tokens(request.system + request.prompt), request.max_output_tokens)
        with llm_call_lock(settings.run_dir):
            costs.ensure_budget(conn, settings, estimate, now)
            started, t0 = now_ms(), time.monotonic()
            try:
                response = backend.complete(request)
            except Exception as exc:
                error = exc if isinstance(exc, BackendError) else BackendError(
                    f"{backend.name} failed unexpectedly: {type(exc).__name__}: {exc}")
                spent = error.spent
                self._ledger(conn, job, backend, spent.model if spent else backend.model, started, t0,
                             spent.tokens_in if spent else 0, spent.tokens_out if spent else 0,
                             costs.call_cost(price, spent.tokens_in, spent.tokens_out, spent.cost_usd) if spent else 0,
                             str(error))
                self._failure(conn, str(error), error.retry_after)
                if error is exc:
                    raise
                raise error from exc
            cost = costs.call_cost(price, response.tokens_in, response.tokens_out, response.cost_usd)
            try:
                result = parse(response.text)
            except OutputError as exc:
                self._ledger(conn, job, backend, response.model, started, t0, response.tokens_in,
                             response.tokens_out, cost, str(exc))
                self._failure(conn, str(exc), None)
                raise
            self._ledger(conn, job, backend, response.model, started, t0, response.tokens_in, response.tokens_out,
                         cost, None)
        self._success(conn)
        return result

    def pause(self, conn: apsw.Connection, until_ms: int, reason: str) -> None:
        if self.paused_until < until_ms or self.pause_reason != reason:
            log.warning("LLM jobs paused until %s: %s", utc_clock(until_ms), reason)
        self.paused_until = max(self.paused_until, until_ms)
        self.pause_reason = reason
        self._save(conn)

    def _ledger(self, conn: apsw.Connection, job: JobRow | None, backend: Backend, model: str, started: int,
                t0: float, tokens_in: int, tokens_out: int, cost: float, error: str | None) -> None:
        call = sql.LLMCall(job.id if job else None, job.type if job else None, backend.name, model, started,
                           int((time.monotonic() - t0) * 1000), tokens_in, tokens_out, cost, error is None,
                           error[:2000] if error else None)
        retry_when_busy(lambda: costs.record_call(conn, call), what="recording an LLM call's cost",
                        stop=self.stop_event)

    def _failure(self, conn: apsw.Connection, error: str, retry_after: float | None) -> None:
        settings = self._settings.current
        now = now_ms()
        b = self.breaker
        b.failures += 1
        b.last_error = redact(error[:500])  # a backend's error can quote the prompt
        threshold = max(settings.breaker_failures, 1)
        if b.failures >= threshold:
            b.open_until_ms = now + int(settings.breaker_cooldown_seconds * 1000)
            log.error("circuit breaker OPEN after %d consecutive backend failures (last: %s); LLM jobs pause until "
                      "%s", b.failures, b.last_error, utc_clock(b.open_until_ms))
        if retry_after:
            # The server asked everyone to wait, not just this job.
            self.pause(conn, now + int(retry_after * 1000), f"rate limited by the backend for {retry_after:g} s")
        self._save(conn)

    def _success(self, conn: apsw.Connection) -> None:
        b = self.breaker
        if b.failures or b.open_until_ms:
            if b.failures >= max(self._settings.current.breaker_failures, 1):
                log.info("circuit breaker closed: the backend answered again")
            self.breaker = Breaker()
            self._save(conn)

    def _save(self, conn: apsw.Connection) -> None:
        b = self.breaker
        payload = {BREAKER_META_KEY: json.dumps({"failures": b.failures, "open_until_ms": b.open_until_ms,
                                                 "last_error": b.last_error}),
                   PAUSE_META_KEY: json.dumps({"until_ms": self.paused_until, "reason": self.pause_reason})}

        def save() -> None:
            with write_transaction(conn):
                for key, value in payload.items():
                    meta_sql.set_meta(conn, key, value)
        retry_when_busy(save, what="saving the LLM breaker state", stop=self.stop_event)
