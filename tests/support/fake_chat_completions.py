"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat completions API with tool calls, streamed or not:
enough to drive the GitHub Copilot CLI (its bring-your-own-key provider), Qwen Code (its OpenAI auth), opencode
and pi (an OpenAI-compatible provider in their configuration).

    server = FakeChatCompletions().start()
    # COPILOT_PROVIDER_BASE_URL=server.base_url (Copilot), OPENAI_BASE_URL=server.base_url (Qwen Code), the
    # provider's base URL in opencode.json / pi's models.json
    server.script.extend([
        Turn.call("bash", {"command": "ls"}, text="Let me look."),   # a sentence, then a tool call
        Turn.text("Done."),                                          # the final answer
    ])
    ...run the CLI...
    server.conversation                               # every request with tools: its messages and its reply

``POST /v1/chat/completions`` is answered with ``chat.completion.chunk`` server-sent events when the request asks
to stream (the text in two deltas, a call's arguments in two), else with one ``chat.completion``; ``GET
/v1/models`` lists the one model. A request that offers no tools is a CLI's own side question (a title, a check)
and gets a short text without taking a turn from the script. A turn can be computed when its request arrives
(``Turn.from_request``), and may wait there: the model "thinking" while the processor works.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from bench.testbed.fake_api import QuietHandler, ScriptedApi, json_body

JsonObject = dict[str, Any]
MODEL = "fake-model"
_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):020d}"


@dataclass
class Turn:
    """One model response: an optional text, then the tool calls it asks for (none: the turn's answer)."""

    text: str | None = None
    calls: list[JsonObject] = field(default_factory=list)  # [{id, name, arguments (a JSON string)}]
    dynamic: Callable[[Request], Turn] | None = None

    @classmethod
    def text_only(cls, text: str) -> Turn:
        return cls(text=text)

    @classmethod
    def call(cls, name: str, arguments: JsonObject, *, text: str | None = None) -> Turn:
        return cls(text=text, calls=[{"id": _id("call"), "name": name, "arguments": json.dumps(arguments)}])

    @classmethod
    def from_request(cls, fn: Callable[[Request], Turn]) -> Turn:
        return cls(dynamic=fn)

    def resolve(self, request: Request) -> Turn:
        return self.dynamic(request) if self.dynamic is not None else self

    @property
    def call_ids(self) -> list[str]:
        return [call["id"] for call in self.calls]


def _content(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(part["text"] for part in value if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: JsonObject
    turn: Turn | None = None

    @property
    def is_conversation(self) -> bool:
        """The agent's own turn (it offers its tools), not a side question."""
        return bool(self.body.get("tools"))

    @property
    def message_list(self) -> list[JsonObject]:
        messages = self.body.get("messages")
        return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []

    def messages(self, role: str | None = None) -> list[str]:
        """The text of each message (of `role`), in order."""
        return [_content(m.get("content")) for m in self.message_list if role is None or m.get("role") == role]

    def outputs(self) -> dict[str, str]:
        """tool_call_id → the tool's result, as the model got it."""
        return {str(m.get("tool_call_id")): _content(m.get("content")) for m in self.message_list
                if m.get("role") == "tool"}

    def all_text(self) -> str:
        return "\n".join(self.messages())

    @property
    def tool_names(self) -> list[str]:
        return [t.get("function", {}).get("name", "") for t in self.body.get("tools", []) if isinstance(t, dict)]


def completion_chunks(turn: Turn, model: str) -> Iterator[JsonObject]:
    """The streamed answer: a role delta, the text in two halves, each call's name then its arguments in two
    halves, the finish reason, and the usage."""
    base = {"id": _id("chatcmpl"), "object": "chat.completion.chunk", "created": 1795845000, "model": model}

    def chunk(delta: JsonObject, finish: str | None = None) -> JsonObject:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    if turn.text:
        for part in (turn.text[: len(turn.text) // 2], turn.text[len(turn.text) // 2:]):
            yield chunk({"content": part})
    for index, call in enumerate(turn.calls):
        yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": call["name"], "arguments": ""}}]})
        arguments = call["arguments"]
        for part in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2:]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
    yield chunk({}, "tool_calls" if turn.calls else "stop")
    yield {**base, "choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}


def completion(turn: Turn, model: str) -> JsonObject:
    message: JsonObject = {"role": "assistant", "content": turn.text}
    if turn.calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}} for c in turn.calls]
    return {"id": _id("chatcmpl"), "object": "chat.completion", "created": 1795845000, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if turn.calls else "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}


class FakeChatCompletions(ScriptedApi[Turn]):
    url_path = "/v1"

    def __init__(self) -> None:
        super().__init__(Turn.text_only("OK"), side_reply=Turn.text_only("Fake title"))

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802
                if self.path.split("?")[0].rstrip("/").endswith("/models"):
                    models = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "fake"}]}
                    self.send(200, "application/json", json.dumps(models).encode())
                else:
                    self.send(404, "application/json", b'{"error": {"message": "not found"}}')

            def do_POST(self) -> None:  # noqa: N802
                body = json_body(self)
                if not self.path.split("?")[0].endswith("/chat/completions"):
                    fake.record(Request(self.path, dict(self.headers.items()), body))
                    self.send(404, "application/json", b'{"error": {"message": "not found"}}')
                    return
                request = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                request.turn = turn = fake.answer(request)
                model = str(body.get("model") or MODEL)
                if body.get("stream"):
                    data = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in completion_chunks(turn, model))
                    self.send(200, "text/event-stream", data + b"data: [DONE]\n\n")
                else:
                    self.send(200, "application/json", json.dumps(completion(turn, model)).encode())


        return Handler
