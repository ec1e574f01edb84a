"""The one interface every LLM backend implements, its errors, and the process-wide call lock.

A backend turns an ``LLMRequest`` (system prompt, user prompt, JSON schema of the answer) into
an ``LLMResponse`` (the answer's text and the tokens it cost). It never parses or judges the
content: the caller records the cost first, then parses, so garbage still counts against the
budget. Transport and server problems are raised as ``BackendError`` with a message that names
the thing and the fix.

Backends are called only through the LLM gate (``processor/jobs/llm_gate.py``), which holds the
user's one call slot (``processor/jobs/call_lock.py``) around every call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class LLMRequest:
    system: str  # both redacted by the LLM gate before any backend sees them
    prompt: str
    schema: dict[str, Any]          # JSON schema of the answer (portable subset: no length keywords)
    schema_name: str
    max_output_tokens: int
    timeout: float                  # seconds for the whole call
    bounded_schema: dict[str, Any] | None = None  # the same with maxItems/maxLength, for grammar decoders
    # A folder the agent may read with read-only tools (the inquisitor's check); backends without tools
    # get the evidence in the prompt instead and ignore it.
    read_only_root: str | None = None


@dataclass(frozen=True)
class LLMResponse:
    text: str                       # the answer as the model wrote it (JSON text, maybe invalid)
    tokens_in: int
    tokens_out: int
    model: str                      # the model that answered, as the server names it
    cost_usd: float | None = None   # when the backend reports its own cost (Claude CLI)


class BackendError(Exception):
    """A backend call failed: transport, server, rate limit, unknown model, timeout.

    retry_after: seconds the server asked us to wait (HTTP 429 / 503 Retry-After), if any.
    spent: what the failed call still cost, when the backend knows (it is recorded all the same).
    """

    def __init__(self, message: str, *, retry_after: float | None = None, status: int | None = None,
                 spent: LLMResponse | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status
        self.spent = spent


class OutputError(BackendError):
    """The call worked but its answer is unusable: empty, not JSON, against the schema, or enormous."""


class BackendUnavailable(Exception):
    """A configured backend cannot be used at all (missing key, model file, package); the message says why."""


@runtime_checkable
class Backend(Protocol):
    name: str      # "openai" | "claude" | "llama" | "mock"
    model: str     # the configured model name (for prices and logs)
    billed: bool   # False for local models: their calls cost nothing
    # The most prompt tokens the model takes, when that is less than max_prompt_tokens (a local model's trained
    # context); None: max_prompt_tokens holds.
    prompt_token_limit: int | None

    def complete(self, request: LLMRequest) -> LLMResponse:
        """One call. Raises BackendError; never returns a partial answer silently."""
        ...

    def close(self) -> None:
        ...
