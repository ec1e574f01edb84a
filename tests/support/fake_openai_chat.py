"""A real HTTP server on 127.0.0.1 that speaks enough of OpenAI's chat completions to drive opencode and pi.

    server = FakeChat().start()
    # the CLI's provider: base URL server.base_url (…/v1), any API key, model "fake-model"
    server.script.extend([
        Turn.call("bash", {"command": "ls"}, text="Let me look."),   # a sentence, then a tool call
        Turn.text("Done."),                                           # the final answer
    ])
    ...run the CLI...
    server.conversation                  # every request that offered tools: its messages, tools and reply

``POST /v1/chat/completions`` is answered streamed (server-sent ``chat.completion.chunk`` events: the text in two
deltas, a tool call's arguments in two, a finish reason, the usage, ``[DONE]``) or as one JSON completion, as the
request asks; ``GET /v1/models`` lists the model. A request that offers no tools (opencode's title request) is not
the conversation: it gets a short title and leaves the script alone. A request that finds the script empty gets
"OK" (recorded in ``unscripted``). A turn can be computed when its request arrives (``Turn.from_request``), and
may wait there: the model "thinking" while the processor works.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from bench.testbed.fake_api import QuietHandler, ScriptedApi, json_body

JsonObject = dict[str, Any]
MODEL = "fake-model"
_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):012d}"


@dataclass
class Turn:
    """One model response: its text (may be empty) and its tool calls, in order."""

    text: str = ""
    calls: list[JsonObject] = field(default_factory=list)
    dynamic: Callable[[Request], Turn] | None = None

    @classmethod
    def call(cls, name: str, arguments: JsonObject, *, text: str = "") -> Turn:
        return cls(text, [{"id": _id("call"), "name": name, "arguments": json.dumps(arguments)}])

    @classmethod
    def from_request(cls, fn: Callable[[Request], Turn]) -> Turn:
        return cls(dynamic=fn)

    def resolve(self, request: Request) -> Turn:
        return self.dynamic(request) if self.dynamic is not None else self

    @property
    def call_ids(self) -> list[str]:
        return [c["id"] for c in self.calls]


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


@dataclass
class Request:
    path: str
    body: JsonObject
    turn: Turn | None = None

    @property
    def is_conversation(self) -> bool:
        return bool(self.body.get("tools"))

    @property
    def items(self) -> list[JsonObject]:
        messages = self.body.get("messages")
        return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []

    def messages(self, role: str | None = None) -> list[str]:
        """The text of each message (of `role`: system, user, assistant, tool), in order."""
        return [_text(m.get("content")) for m in self.items if role is None or m.get("role") == role]

    def outputs(self) -> dict[str, str]:
        """tool_call_id → the tool result's text."""
        return {str(m.get("tool_call_id")): _text(m.get("content")) for m in self.items if m.get("role") == "tool"}

    def all_text(self) -> str:
        return "\n".join(self.messages())

    @property
    def tool_names(self) -> list[str]:
        return [t.get("function", {}).get("name", "") for t in self.body.get("tools") or [] if isinstance(t, dict)]


def chunks(turn: Turn, model: str) -> list[JsonObject]:
    base = {"id": _id("chatcmpl"), "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: JsonObject, finish: str | None = None) -> JsonObject:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    found = [chunk({"role": "assistant", "content": ""})]
    if turn.text:
        half = len(turn.text) // 2
        found += [chunk({"content": turn.text[:half]}), chunk({"content": turn.text[half:]})]
    for index, call in enumerate(turn.calls):
        found.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                            "function": {"name": call["name"], "arguments": ""}}]}))
        half = len(call["arguments"]) // 2
        for part in (call["arguments"][:half], call["arguments"][half:]):
            found.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]}))
    found.append(chunk({}, "tool_calls" if turn.calls else "stop"))
    found.append({**base, "choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 10,
                                                   "total_tokens": 110}})
    return found


def completion(turn: Turn, model: str) -> JsonObject:
    message: JsonObject = {"role": "assistant", "content": turn.text or None}
    if turn.calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}} for c in turn.calls]
    return {"id": _id("chatcmpl"), "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if turn.calls else "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}


class FakeChat(ScriptedApi[Turn]):
    url_path = "/v1"
    thread_name = "fake-openai-chat"

    def __init__(self) -> None:
        super().__init__(Turn("OK"), side_reply=Turn("Shop API session"))

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802
                if self.path.split("?")[0].rstrip("/").endswith("/models"):
                    data = {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0,
                                                        "owned_by": "fake"}]}
                    self.send(200, "application/json", json.dumps(data).encode())
                else:
                    self.send(404, "application/json", b'{"error": {"message": "not found"}}')

            def do_POST(self) -> None:  # noqa: N802
                body = json_body(self)
                if not self.path.split("?")[0].endswith("/chat/completions"):
                    self.send(404, "application/json", b'{"error": {"message": "not found"}}')
                    return
                request = Request(self.path, body)
                request.turn = turn = fake.answer(request)
                model = str(body.get("model") or MODEL)
                if body.get("stream"):
                    data = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks(turn, model))
                    self.send(200, "text/event-stream", data + b"data: [DONE]\n\n")
                else:
                    self.send(200, "application/json", json.dumps(completion(turn, model)).encode())

        return Handler
