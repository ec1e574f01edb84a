"""The `--mock` backend: canned structured outputs, no network, no model, no cost.

Without scripted outputs it answers every extraction with ``mock_outputs.json``, filling
``{excerpt}`` with the head of the batch's first user message, so a mock run shows real
plumbing: jobs, prompts, ADD/UPDATE/NOOP and progress, all without an LLM. Tests script
exact outputs (strings, dicts, or exceptions to raise) and an optional delay per call.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Iterable
from importlib import resources
from typing import Any

from processor.jobs.backends.base import LLMRequest, LLMResponse
from processor.memory.verbatim import estimate_tokens

_FIRST_USER = re.compile(r"^\[user[^\]]*\]\s*(.+)$", re.MULTILINE)
_MEMORY_ID = re.compile(r"^Memory id: (\S+)$", re.MULTILINE)


def canned_outputs() -> dict[str, Any]:
    return json.loads(resources.files("processor.jobs.backends").joinpath("mock_outputs.json").read_text("utf-8"))


class MockBackend:
    name = "mock"
    model = "mock"
    billed = False
    prompt_token_limit: int | None = None  # max_prompt_tokens holds

    def __init__(self, outputs: Iterable[str | dict[str, Any] | BaseException] | None = None, *,
                 delay: float = 0.0, tokens_in: int | None = None, tokens_out: int | None = None,
                 model: str = "mock") -> None:
        self.script: deque[str | dict[str, Any] | BaseException] = deque(outputs or [])
        self.delay = delay
        self.fixed_tokens_in = tokens_in
        self.fixed_tokens_out = tokens_out
        self.model = model
        self.requests: list[LLMRequest] = []
        self._lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0

    def complete(self, request: LLMRequest) -> LLMResponse:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.requests.append(request)
            scripted = self.script.popleft() if self.script else None
        try:
            if self.delay:
                time.sleep(self.delay)
            if isinstance(scripted, BaseException):
                raise scripted
            if scripted is None:
                text = self._canned(request)
            else:
                text = scripted if isinstance(scripted, str) else json.dumps(scripted)
            return LLMResponse(
                text=text,
                tokens_in=self.fixed_tokens_in if self.fixed_tokens_in is not None
                else estimate_tokens(request.system + request.prompt),
                tokens_out=self.fixed_tokens_out if self.fixed_tokens_out is not None else estimate_tokens(text),
                model=self.model,
            )
        finally:
            with self._lock:
                self.in_flight -= 1

    @staticmethod
    def _canned(request: LLMRequest) -> str:
        if request.schema_name == "engram_inquiry":  # the inquisitor's check: never judges without a model
            found = _MEMORY_ID.search(request.prompt)
            return json.dumps({**canned_outputs()["inquiry"], "id": found.group(1) if found else ""})
        if request.schema_name in canned_outputs():
            return json.dumps(canned_outputs()[request.schema_name])
        match = _FIRST_USER.search(request.prompt)
        excerpt = " ".join((match.group(1) if match else "an assistant reply").split())[:80]
        template = json.dumps(canned_outputs()["extract"])
        return template.replace("{excerpt}", excerpt.replace("\\", "\\\\").replace('"', '\\"'))

    def close(self) -> None:
        pass
