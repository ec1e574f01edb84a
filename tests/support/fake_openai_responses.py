"""A real HTTP server on 127.0.0.1 that speaks enough of the OpenAI Responses API to drive the Codex CLI.

    server = FakeResponses().start()
    # $CODEX_HOME/config.toml: [model_providers.fake] base_url = server.base_url, wire_api = "responses"
    server.script.extend([
        Turn.call("exec_command", {"cmd": "ls"}, text="Let me look."),   # a message, then a function call
        Turn.text("Done."),                                              # the final answer
    ])
    ...run `codex exec`...
    server.requests                                  # every request, its body (the `input` items) and its reply

Codex needs only ``POST /v1/responses`` answered with server-sent events: ``response.created``, one
``response.output_item.added`` / ``.done`` pair per output item (an assistant ``message``, whose text also
comes as ``response.output_text.delta``, or a ``function_call``), then ``response.completed``. A request that
finds the script empty gets a plain "OK" (and is recorded in ``unscripted``). A turn can be computed when its
request arrives (``Turn.from_request``), and may wait there: the model "thinking" while the processor works.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from bench.testbed.fake_api import ScriptedApi, json_body

JsonObject = dict[str, Any]
_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):020d}"


@dataclass
class Turn:
    """One model response: output items in order (messages and function calls)."""

    items: list[JsonObject] = field(default_factory=list)
    dynamic: Callable[[Request], Turn] | None = None

    @classmethod
    def text(cls, text: str) -> Turn:
        return cls([_message(text)])

    @classmethod
    def call(cls, name: str, arguments: JsonObject, *, text: str | None = None, namespace: str | None = None
             ) -> Turn:
        item: JsonObject = {"type": "function_call", "id": _id("fc"), "call_id": _id("call"), "name": name,
                            "arguments": json.dumps(arguments), "status": "completed"}
        if namespace:
            item["namespace"] = namespace
        return cls(([_message(text)] if text else []) + [item])

    @classmethod
    def from_request(cls, fn: Callable[[Request], Turn]) -> Turn:
        return cls(dynamic=fn)

    def resolve(self, request: Request) -> Turn:
        return self.dynamic(request) if self.dynamic is not None else self

    @property
    def call_ids(self) -> list[str]:
        return [i["call_id"] for i in self.items if i["type"] == "function_call"]


def _message(text: str) -> JsonObject:
    return {"type": "message", "id": _id("msg"), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: JsonObject
    turn: Turn | None = None

    @property
    def items(self) -> list[JsonObject]:
        items = self.body.get("input")
        return items if isinstance(items, list) else []

    def messages(self, role: str | None = None) -> list[str]:
        """The text of each input message (of `role`), in order."""
        found = []
        for item in self.items:
            if item.get("type") == "message" and (role is None or item.get("role") == role):
                found.append("".join(c.get("text", "") for c in item.get("content", []) if isinstance(c, dict)))
        return found

    def outputs(self) -> dict[str, str]:
        """call_id → the function call output's text."""
        found = {}
        for item in self.items:
            if item.get("type") == "function_call_output":
                output = item.get("output")
                if isinstance(output, list):
                    output = "\n".join(o.get("text", "") for o in output if isinstance(o, dict))
                found[item.get("call_id", "")] = str(output)
        return found

    def all_text(self) -> str:
        return "\n".join(self.messages()) + "\n" + "\n".join(self.outputs().values())

    @property
    def tool_names(self) -> list[str]:
        """Every tool offered, MCP namespaces flattened as Codex calls them (``mcp__engram__memory_recall``)."""
        names = []
        for tool in self.body.get("tools", []):
            if tool.get("type") == "namespace":
                names += [f"{tool.get('name')}__{t.get('name')}" for t in tool.get("tools", [])]
            else:
                names.append(tool.get("name") or tool.get("type", ""))
        return names


def sse_events(turn: Turn, model: str) -> Iterator[tuple[str, JsonObject]]:
    response_id = _id("resp")
    yield "response.created", {"type": "response.created", "response": {"id": response_id, "model": model}}
    for index, item in enumerate(turn.items):
        started = {**item, "content": []} if item["type"] == "message" else item
        yield "response.output_item.added", {"type": "response.output_item.added", "output_index": index,
                                             "item": started}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            for part in (text[: len(text) // 2], text[len(text) // 2:]):
                yield "response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"],
                                                     "output_index": index, "content_index": 0, "delta": part}
        yield "response.output_item.done", {"type": "response.output_item.done", "output_index": index,
                                            "item": item}
    usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 10,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 110}
    yield "response.completed", {"type": "response.completed", "response": {"id": response_id, "usage": usage}}


class FakeResponses(ScriptedApi[Turn]):
    url_path = "/v1"

    def __init__(self) -> None:
        super().__init__(Turn.text("OK"))

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - /v1/models and the like: nothing here
                self._send(404, "application/json", b'{"error": {"message": "not found"}}')

            def do_POST(self) -> None:  # noqa: N802
                body = json_body(self)
                if not self.path.split("?")[0].endswith("/responses"):
                    self._send(404, "application/json", b'{"error": {"message": "not found"}}')
                    return
                request = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                request.turn = turn = fake.answer(request)
                data = b"".join(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
                                for name, payload in sse_events(turn, str(body.get("model", "fake"))))
                self._send(200, "text/event-stream", data)

            def _send(self, status: int, content_type: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
