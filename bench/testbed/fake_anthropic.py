"""A real HTTP server on 127.0.0.1 that speaks enough of the Anthropic Messages API to drive the Claude Code CLI.

    server = FakeAnthropic().start()
    env["ANTHROPIC_BASE_URL"] = server.base_url        # http://127.0.0.1:PORT
    server.script.extend([
        Reply.tool("Bash", {"command": "ls"}),        # the model's first turn: one tool call
        Reply.text("Done."),                          # after the tool result: the final answer
    ])
    ...run `claude -p`...
    server.conversation                                # the requests the scripted replies answered
    server.requests                                    # every request received, side requests included

Which requests are scripted: the agent loop's (``is_conversation``: the request offers tools).
Everything else the CLI asks on the side (a session title, a topic check, a token count) gets a
short canned answer and never consumes the script, so a test's script lists exactly the model
turns it cares about. A conversation request that finds the script empty gets ``fallback`` (a
plain "OK" text) and is recorded in ``unscripted`` so a test can assert there were none.

Replies are answered as SSE when the request says ``"stream": true`` (what the CLI sends) and as
one JSON message otherwise. A reply can also be computed when its request arrives,
``Reply.from_request(fn)``: fn receives the ``Request`` and returns the reply. It may block (a
model thinking while the processor works) and may put replies back at the front of ``script``;
it runs outside the server's lock.
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


def _new_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids):024d}"


@dataclass
class Reply:
    """One model turn: content blocks (text and tool_use), in order, and the stop reason."""

    blocks: list[JsonObject] = field(default_factory=list)
    stop_reason: str = "end_turn"
    dynamic: Callable[[Request], Reply] | None = None

    @classmethod
    def text(cls, text: str) -> Reply:
        return cls([{"type": "text", "text": text}], "end_turn")

    @classmethod
    def tool(cls, name: str, tool_input: JsonObject, *, text: str | None = None) -> Reply:
        """One tool call (optionally after a sentence of text)."""
        return cls.tools((name, tool_input), text=text)

    @classmethod
    def tools(cls, *calls: tuple[str, JsonObject], text: str | None = None) -> Reply:
        """Parallel tool calls: several tool_use blocks in one assistant message."""
        blocks: list[JsonObject] = [{"type": "text", "text": text}] if text else []
        blocks += [{"type": "tool_use", "id": _new_id("toolu"), "name": name, "input": tool_input}
                   for name, tool_input in calls]
        return cls(blocks, "tool_use")

    @classmethod
    def from_request(cls, fn: Callable[[Request], Reply]) -> Reply:
        """A reply computed from the request when it arrives."""
        return cls(dynamic=fn)

    def resolve(self, request: Request) -> Reply:
        return self.dynamic(request) if self.dynamic is not None else self

    @property
    def tool_use_ids(self) -> list[str]:
        return [b["id"] for b in self.blocks if b["type"] == "tool_use"]


@dataclass
class Request:
    """One request the CLI sent: its path, headers and parsed body, and the reply it got."""

    path: str
    headers: dict[str, str]
    body: JsonObject
    reply: Reply | None = None

    @property
    def is_conversation(self) -> bool:
        """An agent-loop request (it offers the model tools), as opposed to a side request."""
        return self.path.split("?")[0].endswith("/messages") and bool(self.body.get("tools"))

    @property
    def session_id(self) -> str | None:
        """The CLI's session, from the header it sends with every request."""
        return self.headers.get("x-claude-code-session-id")

    @property
    def tool_names(self) -> list[str]:
        return [t.get("name", "") for t in self.body.get("tools", [])]

    @property
    def messages(self) -> list[JsonObject]:
        return self.body.get("messages", [])

    def system_text(self) -> str:
        system = self.body.get("system", "")
        if isinstance(system, str):
            return system
        return "\n".join(b.get("text", "") for b in system if isinstance(b, dict))

    def texts(self) -> Iterator[tuple[int, str]]:
        """(message index, text) for every text in the messages: text blocks and tool_result contents."""
        for i, message in enumerate(self.messages):
            yield from ((i, t) for t in _content_texts(message.get("content")))

    def all_text(self) -> str:
        return self.system_text() + "\n" + "\n".join(t for _, t in self.texts())

    def result_index(self, tool_use_id: str) -> int:
        """Index of the message that carries the result of `tool_use_id`."""
        for i, message in enumerate(self.messages):
            content = message.get("content")
            if isinstance(content, list) and any(
                    isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") == tool_use_id
                    for b in content):
                return i
        raise KeyError(tool_use_id)

    def tool_results(self) -> dict[str, str]:
        """tool_use_id → the result's text, over all messages."""
        results = {}
        for message in self.messages:
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    results[block.get("tool_use_id", "")] = "\n".join(_content_texts(block.get("content")))
        return results


def _content_texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                yield block.get("text", "")
            elif block.get("type") == "tool_result":
                yield from _content_texts(block.get("content"))


def _usage(input_tokens: int = 100, output_tokens: int = 10) -> JsonObject:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0}


def message_json(reply: Reply, model: str) -> JsonObject:
    return {"id": _new_id("msg"), "type": "message", "role": "assistant", "model": model,
            "content": reply.blocks, "stop_reason": reply.stop_reason, "stop_sequence": None, "usage": _usage()}


def sse_events(reply: Reply, model: str) -> Iterator[tuple[str, JsonObject]]:
    """The event stream the Messages API sends for this reply (text in two deltas, tool input in two)."""
    start = message_json(Reply([], reply.stop_reason), model)
    start.update(stop_reason=None, usage=_usage(output_tokens=1))
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(reply.blocks):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}}
            text = block["text"]
            for part in (text[: len(text) // 2], text[len(text) // 2:]):
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "text_delta", "text": part}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**block, "input": {}}}
            raw = json.dumps(block["input"])
            for part in (raw[: len(raw) // 2], raw[len(raw) // 2:]):
                yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                              "delta": {"type": "input_json_delta", "partial_json": part}}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": reply.stop_reason,
                                                                "stop_sequence": None},
                            "usage": {"output_tokens": 10}}
    yield "message_stop", {"type": "message_stop"}


class FakeAnthropic(ScriptedApi[Reply]):
    def __init__(self) -> None:
        super().__init__(Reply.text("OK"), side_reply=Reply.text("Side answer"))

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "fake"}})

            def do_HEAD(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:  # noqa: N802
                body = json_body(self)
                path = self.path.split("?")[0]
                request = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                if path.endswith("/messages/count_tokens"):
                    fake.record(request)
                    self._json(200, {"input_tokens": 100})
                    return
                if not path.endswith("/messages"):
                    fake.record(request)
                    self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": path}})
                    return
                request.reply = reply = fake.answer(request)
                model = str(body.get("model", "claude-fake"))
                if body.get("stream"):
                    self._sse(reply, model)
                else:
                    self._json(200, message_json(reply, model))

            def _json(self, status: int, payload: JsonObject) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("request-id", _new_id("req"))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, reply: Reply, model: str) -> None:
                data = b"".join(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
                                for name, payload in sse_events(reply, model))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("request-id", _new_id("req"))
                self.end_headers()
                self.wfile.write(data)

        return Handler
