"""What every fake model API of the tests shares: a real HTTP server on 127.0.0.1 (an ephemeral port, a daemon
thread), its lifecycle, the request body read as JSON, and (``ScriptedApi``) replies scripted in order.

Each fake (``fake_anthropic``, ``fake_openai_responses``, ``fake_chat_completions``, ``fake_gemini``,
``fake_openai_server``) supplies its request handler (``QuietHandler``'s, for the chat fake): the wire format of its
API.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Protocol, Self, TypeVar


class LoopbackServer:
    """A fake API served on 127.0.0.1 from `start()` to `stop()` (or as a context manager)."""

    url_path = ""  # what base_url ends with: the API's root on the server
    thread_name = "fake-api"

    def __init__(self) -> None:
        self._server: ThreadingHTTPServer | None = None

    def handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.url_path}"

    def start(self) -> Self:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name=self.thread_name, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Request(Protocol):
    @property
    def is_conversation(self) -> bool: ...


class _Reply(Protocol):
    def resolve(self, request: Any) -> Any: ...


R = TypeVar("R", bound=_Reply)


class ScriptedApi(LoopbackServer, Generic[R]):
    """Replies from `script` in order; once it is empty, `fallback` (the request recorded in `unscripted`). With a
    `side_reply`, a request that is not the agent's conversation (a title, a check the CLI makes on the side) gets
    it and leaves the script alone."""

    def __init__(self, fallback: R, side_reply: R | None = None) -> None:
        super().__init__()
        self.script: deque[R] = deque()
        self.fallback = fallback
        self.side_reply = side_reply
        self.requests: list[Any] = []
        self.unscripted: list[Any] = []
        self._lock = threading.Lock()

    @property
    def conversation(self) -> list[Any]:
        with self._lock:
            return [r for r in self.requests if r.is_conversation]

    def record(self, request: _Request) -> None:
        """A request answered outside the script (token counts, unknown paths): recorded all the same."""
        with self._lock:
            self.requests.append(request)

    def answer(self, request: _Request) -> R:
        with self._lock:
            self.requests.append(request)
            if self.side_reply is not None and not request.is_conversation:
                reply = self.side_reply
            elif self.script:
                reply = self.script.popleft()
            else:
                self.unscripted.append(request)
                reply = self.fallback
        # Outside the lock: a dynamic reply may wait (the model "thinking") or push replies onto the script.
        return reply.resolve(request)


def json_body(handler: BaseHTTPRequestHandler) -> dict[str, Any]:
    """The request's body as JSON; a body that is not JSON as ``{"_raw": its text}``."""
    length = int(handler.headers.get("Content-Length") or 0)
    raw = handler.rfile.read(length) if length else b""
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return {"_raw": raw.decode(errors="replace")}



class QuietHandler(BaseHTTPRequestHandler):
    """A fake API's request handler: HTTP/1.1 (a CLI keeps its connection), no access log on stderr, and whole
    answers (``send``)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def send(self, status: int, content_type: str, data: bytes) -> None:
        """A whole answer: its status, type and length, then its body."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
