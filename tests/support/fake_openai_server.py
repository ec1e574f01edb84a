"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat completions API and fails on request.

    server = FakeOpenAI(models={"gpt-4.1-nano"}).start()
    server.base_url                       # http://127.0.0.1:PORT/v1
    server.script.append({"mode": "429", "retry_after": "2"})   # the next call is rate limited
    server.calls                          # every request body received, in order

Modes (one per call, from `script`, else `default`): ok, 500, 503, 429 (retry_after), timeout
(sleep `seconds`, then answer), hang (wait for `release`), invalid_json, schema_violation, empty,
enormous, unknown_model (404), bad_body (200 with a body that is not JSON). A request for a model
not in `models` gets the 404 OpenAI sends for an unknown model. Connection refused is a closed
port: see `closed_port()`.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from bench.testbed.fake_api import LoopbackServer

_FIRST_USER = re.compile(r"^\[user[^\]]*\]\n(.+)$", re.MULTILINE)


def default_content(body: dict[str, Any]) -> str:
    """A valid extraction answer: one memory per call, about the batch's first user message."""
    prompt = body["messages"][-1]["content"]
    match = _FIRST_USER.search(prompt)
    said = match.group(1).strip()[:100] if match else "an assistant reply"
    return json.dumps({
        "memories": [{"summary": f"The user said: {said}", "full_content": f"In this batch the user said: {said}",
                      "entities": ["fake-openai"], "importance": "normal", "kind": "fact", "scope": "project"}],
        "rolling_summary": f"So far the user said: {said}",
    })


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed): connecting to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeOpenAI(LoopbackServer):
    url_path = "/v1"
    thread_name = "fake-openai"

    def __init__(self, models: set[str] | None = None, usage: tuple[int, int] = (1000, 100)) -> None:
        super().__init__()
        self.models = set(models or {"gpt-4.1-nano"})
        self.usage = usage
        self.script: deque[dict[str, Any]] = deque()
        self.default: dict[str, Any] = {"mode": "ok"}
        self.content_for: Callable[[dict[str, Any]], str] = default_content
        self.calls: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.received = threading.Event()
        self.release = threading.Event()
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in fake.models]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake._lock:
                    fake.calls.append(body)
                    fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                    behaviour = fake.script.popleft() if fake.script else dict(fake.default)
                self.counted = True  # this request is one of fake.in_flight
                fake.received.set()
                try:
                    self._answer(body, behaviour)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): nothing to answer
                finally:
                    self._done()

            def _done(self) -> None:
                """The call is over for the client once its answer is on the way: counted out before the answer
                is written, not after (the client can have its answer, release its lock, and have another
                process's call arrive before this thread runs again: two calls in flight that never were)."""
                if getattr(self, "counted", False):
                    self.counted = False
                    with fake._lock:
                        fake.in_flight -= 1

            def _answer(self, body: dict[str, Any], b: dict[str, Any]) -> None:
                mode = b.get("mode", "ok")
                model = body.get("model", "")
                if mode == "unknown_model" or model not in fake.models:
                    self._json(404, {"error": {"message": f"The model `{model}` does not exist or you do not have "
                                                          "access to it.", "type": "invalid_request_error",
                                               "param": None, "code": "model_not_found"}})
                    return
                if mode in ("500", "503"):
                    self._json(int(mode), {"error": {"message": "the server had an error", "type": "server_error"}})
                    return
                if mode == "429":
                    self._json(429, {"error": {"message": "Rate limit reached", "type": "requests",
                                               "code": "rate_limit_exceeded"}},
                               {"retry-after": str(b.get("retry_after", "1"))})
                    return
                if mode == "timeout":
                    time.sleep(float(b.get("seconds", 3)))
                if mode == "hang":
                    fake.release.wait(60)
                if mode == "bad_body":
                    self._raw(200, b"<html>this is not the API</html>", "text/html")
                    return
                content = {
                    "invalid_json": '{"memories": [ {"summary": "unterminated',
                    "schema_violation": json.dumps({"memories": "none today", "summary": 3}),
                    "empty": "",
                    "enormous": json.dumps({"memories": [{"summary": "x" * 1000, "full_content": "y" * 100_000,
                                                          "entities": [], "importance": "normal", "kind": "fact",
                                                          "scope": "project"}] * 30,
                                            "rolling_summary": "z"}),
                }.get(mode)
                if content is None:
                    content = fake.content_for(body)
                prompt_tokens, completion_tokens = b.get("usage", fake.usage)
                self._json(200, {
                    "id": f"chatcmpl-{len(fake.calls)}", "object": "chat.completion", "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": None},
                                 "finish_reason": "stop", "logprobs": None}],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                              "total_tokens": prompt_tokens + completion_tokens},
                })

            def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                self._raw(status, json.dumps(payload).encode(), "application/json", headers)

            def _raw(self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
                self._done()
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def stop(self) -> None:
        self.release.set()  # a call held by the test answers before the server goes
        super().stop()
