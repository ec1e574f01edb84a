"""What LLM calls cost: token estimates, the per-model price table, and the hard daily budget.

Every backend call is recorded in ``llm_calls`` (tokens in/out, estimated USD) in its own
transaction, before its output is even parsed, so a call that produced garbage still counts.
The budget is per UTC day. A call is refused before it starts when today's spend plus the
call's worst-case cost (prompt estimate + the output cap) would pass the budget.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import apsw

from processor.clock import now_ms as clock_now_ms
from processor.config import Settings
from processor.memory.verbatim import estimate_tokens
from processor.store import jobs as sql
from processor.store import write_transaction

log = logging.getLogger(__name__)

__all__ = ["BudgetExhausted", "Price", "estimate_tokens", "price_for", "record_call", "today_spend",
           "ensure_budget", "utc_day_start_ms", "next_utc_day_ms", "call_cost", "worst_case_input_tokens"]

_warned_unpriced: set[str] = set()


class BudgetExhausted(Exception):
    """Today's LLM budget is (or would be) used up; LLM jobs wait until resume_at_ms."""

    def __init__(self, spent: float, budget: float, estimate: float, resume_at_ms: int) -> None:
        when = datetime.fromtimestamp(resume_at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")
        super().__init__(
            f"daily LLM budget reached: ${spent:.4f} of ${budget:.2f} spent today (UTC)"
            + (f", and the next call could cost up to ${estimate:.4f}" if estimate else "")
            + f"; LLM jobs wait until {when} — capture and verbatim episodes continue. "
            "Raise daily_budget_usd in config.toml to resume sooner."
        )
        self.spent = spent
        self.budget = budget
        self.estimate = estimate
        self.resume_at_ms = resume_at_ms


@dataclass(frozen=True)
class Price:
    input_per_m: float
    output_per_m: float
    known: bool

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.input_per_m + tokens_out * self.output_per_m) / 1_000_000


def price_for(model: str, prices: Mapping[str, Any]) -> Price:
    """The price of a model: an exact entry, else the longest entry the name starts with.

    Dated snapshots ("gpt-4.1-nano-2025-04-14") share their family's price. An unknown model costs 0
    (local servers are free) and is logged once, so a paid model missing from the table is noticed.
    """
    entry = prices.get(model)
    if entry is None:
        prefixes = [k for k in prices if model.startswith(k)]
        entry = prices[max(prefixes, key=len)] if prefixes else None
    if entry is None:
        if model not in _warned_unpriced:
            _warned_unpriced.add(model)
            log.warning("no price for model %r in model_prices; its calls count as $0 against the daily budget "
                        "(add \"%s\" = [usd_per_m_input, usd_per_m_output] to model_prices if it is paid)",
                        model, model)
        return Price(0.0, 0.0, False)
    try:
        pin, pout = (float(v) for v in entry)
    except (TypeError, ValueError):
        raise ValueError(f"model_prices[{model!r}] = {entry!r} must be [usd_per_m_input, usd_per_m_output]") from None
    return Price(pin, pout, True)


def worst_case_input_tokens(text: str) -> int:
    """An upper bound on the tokens of `text` for any byte-level tokenizer: one per UTF-8 byte.

    Four characters a token holds for English, not for CJK (about one a character) or emoji (several
    each): a budget checked against that guess was overshot by half on a Chinese prompt. No
    byte-level BPE (OpenAI's, Anthropic's) makes more tokens than bytes, so a call checked against
    this bound cannot cross the cap on its input; the ledger then records what the server reports.
    """
    return len(text.encode("utf-8", "surrogatepass"))


def utc_day_start_ms(now_ms: int) -> int:
    day = datetime.fromtimestamp(now_ms / 1000, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return int(day.timestamp() * 1000)


def next_utc_day_ms(now_ms: int) -> int:
    day = datetime.fromtimestamp(utc_day_start_ms(now_ms) / 1000, UTC) + timedelta(days=1)
    return int(day.timestamp() * 1000)


def today_spend(conn: apsw.Connection, now_ms: int | None = None) -> tuple[float, int, int, int]:
    """(usd, calls, tokens in, tokens out) spent today (UTC)."""
    now_ms = now_ms if now_ms is not None else clock_now_ms()
    return sql.spend_since(conn, utc_day_start_ms(now_ms))


def ensure_budget(conn: apsw.Connection, settings: Settings, estimate_usd: float, now_ms: int) -> float:
    """Raise BudgetExhausted unless a call that may cost estimate_usd still fits today; returns today's spend."""
    budget = settings.daily_budget_usd
    spent = today_spend(conn, now_ms)[0]
    if spent + estimate_usd > budget + 1e-12 or (estimate_usd > 0 and spent >= budget):
        raise BudgetExhausted(spent, budget, estimate_usd, next_utc_day_ms(now_ms))
    return spent


def call_cost(price: Price, tokens_in: int, tokens_out: int, reported_usd: float | None) -> float:
    """A backend that reports its own cost (the Claude CLI) is believed; otherwise the price table."""
    if reported_usd is not None and reported_usd >= 0:
        return float(reported_usd)
    return price.cost(tokens_in, tokens_out)


def record_call(conn: apsw.Connection, call: sql.LLMCall) -> None:
    """Write the ledger row in its own transaction: spend survives whatever happens to the job."""
    with write_transaction(conn):
        sql.insert_llm_call(conn, call)
