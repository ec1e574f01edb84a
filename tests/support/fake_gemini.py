"""A real HTTP server on 127.0.0.1 that speaks enough of the Gemini API to drive the Gemini CLI.

    server = FakeGemini().start()
    env["GOOGLE_GEMINI_BASE_URL"] = server.base_url                 # http://127.0.0.1:PORT
    server.script.extend([
        Turn.call("run_shell_command", {"command": "ls"}, text="Let me look."),
        Turn.text("Done."),
    ])
    ...run `gemini -p …`...
    server.conversation                              # the agent loop's requests (they offer tools)

The CLI streams: ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse``, answered with one
server-sent ``data:`` event (a candidate whose parts are text and function calls) after which the connection
is closed (a kept-alive connection leaves the CLI waiting). Requests that offer no tools (side questions)
get a short canned answer and never consume the script.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from bench.testbed.fake_api import ScriptedApi, json_body

JsonObject = dict[str, Any]


@dataclass
class Turn:
    """One model response: its parts (text, then function calls, in order)."""

    parts: list[JsonObject] = field(default_factory=list)
    dynamic: Callable[[Request], Turn] | None = None

    @classmethod
    def text(cls, text: str) -> Turn:
        return cls([{"text": text}])

    @classmethod
    def call(cls, name: str, args: JsonObject, *, text: str | None = None) -> Turn:
        return cls.calls((name, args), text=text)

    @classmethod
    def calls(cls, *calls: tuple[str, JsonObject], text: str | None = None) -> Turn:
        parts: list[JsonObject] = [{"text": text}] if text else []
        return cls(parts + [{"functionCall": {"name": name, "args": args}} for name, args in calls])

    @classmethod
    def from_request(cls, fn: Callable[[Request], Turn]) -> Turn:
        return cls(dynamic=fn)

    def resolve(self, request: Request) -> Turn:
        return self.dynamic(request) if self.dynamic is not None else self


@dataclass
class Request:
    path: str
    body: JsonObject
    turn: Turn | None = None

    @property
    def is_conversation(self) -> bool:
        return ":streamGenerateContent" in self.path and bool(self.body.get("tools"))

    @property
    def tool_names(self) -> list[str]:
        return [f.get("name", "") for t in self.body.get("tools", []) for f in t.get("functionDeclarations", [])]

    def parts(self) -> list[tuple[str, JsonObject]]:
        return [(c.get("role", ""), p) for c in self.body.get("contents", []) for p in c.get("parts", [])]

    def texts(self) -> list[str]:
        """Every text part, and every function response's output, in order."""
        found = []
        for _, part in self.parts():
            if isinstance(part.get("text"), str):
                found.append(part["text"])
            response = part.get("functionResponse", {}).get("response")
            if isinstance(response, dict):
                found += [str(v) for v in response.values()]
        return found

    def responses(self) -> dict[str, str]:
        """Function name → the text of its latest response."""
        found = {}
        for _, part in self.parts():
            function = part.get("functionResponse")
            if isinstance(function, dict):
                found[function.get("name", "")] = json.dumps(function.get("response"), ensure_ascii=False)
        return found

    def all_text(self) -> str:
        return "\n".join(self.texts())


class FakeGemini(ScriptedApi[Turn]):
    def __init__(self) -> None:
        super().__init__(Turn.text("OK"), side_reply=Turn.text('{"reasoning": "done", "next_speaker": "user"}'))

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                self._send(404, "application/json", b'{"error": {"code": 404, "message": "not found"}}')

            def do_POST(self) -> None:  # noqa: N802
                body = json_body(self)
                if ":countTokens" in self.path:
                    self._send(200, "application/json", b'{"totalTokens": 100}')
                    return
                request = Request(self.path, body)
                request.turn = turn = fake.answer(request)
                chunk = {"candidates": [{"content": {"role": "model", "parts": turn.parts}, "finishReason": "STOP",
                                         "index": 0}],
                         "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10,
                                           "totalTokenCount": 110},
                         "modelVersion": "gemini-2.5-flash"}
                if ":streamGenerateContent" in self.path:
                    self._send(200, "text/event-stream", f"data: {json.dumps(chunk)}\r\n\r\n".encode())
                else:
                    self._send(200, "application/json", json.dumps(chunk).encode())

            def _send(self, status: int, content_type: str, data: bytes) -> None:
                # The CLI waits on a kept-alive connection: each answer closes it.
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
                self.close_connection = True

        return Handler
