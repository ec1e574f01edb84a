"""Engram's MCP tools served by the running processor, at ``POST /mcp`` of its control plane.

Why the processor serves them: the official MCP SDK takes about 1.4 s to import (pydantic builds the
models of every protocol version), so a server process per Claude Code session answers ``initialize``
seconds after it starts, and its first recall then loads the embedding model again. The processor
imports the SDK once, in the background at start-up, and serves the same tools
(``mcp_tools/server.py``) with its warm model and vectors; Claude Code starts the small stdio bridge
(``mcp_tools/bridge.py``), which passes each message here unchanged.

The protocol is entirely the SDK's: its streamable-HTTP app in stateless mode with JSON answers (each
POST carries one message and gets its answer, no session to lose when the processor restarts), driven
on a private asyncio loop. This module only hands the control plane's already authenticated request
to that ASGI app and writes back what the app sends.

``engram run`` hands this class to ``processor/lifecycle.py`` (which sits below the tools in the
layering and so does not import them)::

    host = McpHost(settings, store=processor.memory.reader)
    host.start()                    # a thread: imports the SDK, builds the tools, runs the loop
    ControlServer(..., mcp=host.handle)
    host.stop()
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from mcp_tools import CALL_TIMEOUT_SECONDS
from processor.config import Settings
from processor.service.control_server import MAX_MCP_BODY_BYTES, MCP_PATH

if TYPE_CHECKING:
    from processor.memory.episode_store import EpisodeStore

log = logging.getLogger(__name__)

# How long a request waits for the SDK to finish loading at start-up before it is refused (the bridge then
# serves that session itself).
READY_TIMEOUT_SECONDS = 10.0


class McpHost:
    """The SDK's MCP app on a private event loop thread, answering requests handed over by the control plane."""

    def __init__(self, settings: Settings, store: Callable[[], EpisodeStore]) -> None:
        self._settings = settings
        self._store = store
        self._loop: asyncio.AbstractEventLoop | None = None
        self._app: Any = None
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="engram-mcp", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            loop.call_soon_threadsafe(stopping.set)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def state(self) -> str:
        """For /ping and `engram doctor`: "loading", "ready" or "unavailable: <why>"."""
        if self.error is not None:
            return f"unavailable: {self.error}"
        return "ready" if self._loop is not None and self._ready.is_set() else "loading"

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except Exception as exc:  # the tools are then served by each session's own server, as before
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("MCP tools cannot be served by the processor; sessions start their own server")
        finally:
            self._ready.set()  # never leave a request waiting for a host that is gone

    async def _serve(self) -> None:
        # Imported here, on this thread: the import takes over a second and must not delay start-up.
        from mcp_tools.server import build_server  # the slow import, off the start-up path

        # The SDK logs every stateless request ("Terminating session: None") at INFO.
        logging.getLogger("mcp").setLevel(logging.WARNING)

        server = build_server(self._settings, structured=False, store=self._store)
        # The control plane has already checked the Host header, refused browsers and checked the token.
        self._app = server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=True,
                                               json_response=True, max_request_body_size=MAX_MCP_BODY_BYTES)
        self._stopping = asyncio.Event()
        async with server.session_manager.run():
            self._loop = asyncio.get_running_loop()
            self._ready.set()
            log.info("MCP tools served at %s", MCP_PATH)
            await self._stopping.wait()

    def handle(self, request: BaseHTTPRequestHandler, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        """Answer one authenticated request to MCP_PATH: (status, headers, body)."""
        if not self._ready.wait(READY_TIMEOUT_SECONDS) or self._loop is None:
            reason = self.error or "still loading"
            return _plain(HTTPStatus.SERVICE_UNAVAILABLE, f"the processor's MCP tools are not available ({reason})")
        future = asyncio.run_coroutine_threadsafe(self._call(request, body), self._loop)
        try:
            return future.result(CALL_TIMEOUT_SECONDS)
        except FutureTimeout:
            future.cancel()
            log.warning("an MCP request took over %.0f s and was cancelled", CALL_TIMEOUT_SECONDS)
            return _plain(HTTPStatus.GATEWAY_TIMEOUT, "the MCP request took too long")

    async def _call(self, request: BaseHTTPRequestHandler, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request through the SDK's ASGI app, its answer collected whole (JSON answers are one body)."""
        host, port = request.server.server_address[:2]
        client = request.client_address[:2]
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.0", "method": request.command,
            "scheme": "http", "path": MCP_PATH, "raw_path": MCP_PATH.encode(), "query_string": b"",
            "root_path": "", "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                                         for k, v in request.headers.items()],
            "client": client, "server": (host, port), "state": {},
        }
        delivered = False
        finished = asyncio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await finished.wait()  # the client stays connected until the answer is written
            return {"type": "http.disconnect"}

        status = HTTPStatus.INTERNAL_SERVER_ERROR
        headers: list[tuple[str, str]] = []
        chunks: list[bytes] = []

        async def send(message: dict[str, Any]) -> None:
            nonlocal status, headers
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    finished.set()

        try:
            await self._app(scope, receive, send)
        finally:
            finished.set()
        return status, headers, b"".join(chunks)


def _plain(status: int, message: str) -> tuple[int, list[tuple[str, str]], bytes]:
    return status, [("Content-Type", "text/plain; charset=utf-8")], message.encode()
