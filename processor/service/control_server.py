"""The processor's control plane server: a small authenticated JSON API on 127.0.0.1.

Used by ``processor/lifecycle.py`` (and ``engram open``'s read-only viewer, ``viewer/serve.py``)::

    server = ControlServer(settings.run_dir, port=settings.http_port, ping=processor.ping_info,
                           routes={("GET", "/status"): status_route,
                                   ("POST", "/recall"): recall_route,
                                   ("POST", "/wake"): wake_route})
    server.start()   # binds, writes run/engram.port, serves from a background thread
    ...
    server.stop()    # stops serving, removes run/engram.port

Client side: ``processor/service/control_client.py``; the token and port files: ``control_files.py``.

Security model, in the order a request meets it:
- the socket is bound to 127.0.0.1 only, never 0.0.0.0;
- paths under ``/ui/`` go to the ``ui`` handler when one is given (the browser viewer, with its own
  cookie login and Origin checks: ``processor/viewer/``); everything below concerns the JSON API;
- requests that come from a browser (an ``Origin`` or ``Sec-Fetch-*`` header) and requests whose
  ``Host`` is not a loopback name are refused with 403: the latter defeats DNS rebinding, where a web
  page's own host name is made to resolve to 127.0.0.1;
- every endpoint except ``GET /ping`` needs ``Authorization: Bearer <token>``, the token being the
  contents of ``run/token`` (0600, in the 0700 run directory, so only the owner can read it);
- bodies over ``max_body_bytes`` are refused with 413 before being read, and a request that is not
  fully received within ``request_timeout`` seconds is cut off, so a slow client holds one thread for
  at most that long;
- a flood of slow or idle connections cannot starve the hooks and the MCP server: at most
  ``max_connections`` connections may wait for their request at once, and a new one evicts the
  oldest waiting one that has nothing unread (a real client sends its whole request at once, so until
  it is read it is never evicted; an idle or trickling client, whose bytes are read as they come, is);
- requests that carry the token then take one of ``max_connections`` slots of their own, which no
  unauthenticated request can take; when all are busy (a burst of real clients) they wait their turn,
  up to ``queue_seconds``, and only then get 503 with ``Retry-After``. Requests that need no token
  (``/ping``, the viewer's pages) have a small pool of their own and wait the same way, so they cannot
  delay the authenticated ones either.
Drops and malformed requests are counted and summarised in the log at most once a minute, and the
token is never logged, at any level (request lines are logged without their query string).
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import io
import json
import logging
import re
import select
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from processor.config import Settings
from processor.files import write_atomic
from processor.service.control_files import PORT_FILE, ensure_token, read_port

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
REQUEST_TIMEOUT_SECONDS = 5.0
MAX_CONNECTIONS = 32
# How long an arrived request waits for a slot before it is answered 503 with Retry-After. A burst of
# 200 /status requests is worked through in under a second, one of 200 searches in about two on a busy
# 2-core machine (each embeds its query); a processor stuck for longer says so.
QUEUE_SECONDS = 2.0
RETRY_AFTER_SECONDS = 1
# Connections in the waiting room beyond max_connections that may all still hold an unread request (a
# burst): past this many, the oldest is evicted whatever it holds, so a flood stays bounded.
BURST_FACTOR = 8

JSONDict = dict[str, Any]
Route = Callable[[JSONDict], JSONDict]
# The browser viewer's handler: given the request handler itself (method, path, headers, rfile, wfile) for
# every path under UI_PREFIX, after the loopback Host check; it answers the request in full.
UiHandler = Callable[[BaseHTTPRequestHandler], None]
UI_PREFIX = "/ui/"
# Engram's MCP tools (mcp_tools/host.py): given the authenticated request and its body, the status,
# headers and body to answer with.
McpHandler = Callable[[BaseHTTPRequestHandler, bytes], tuple[int, list[tuple[str, str]], bytes]]
MCP_PATH = "/mcp"
MAX_MCP_BODY_BYTES = 1024 * 1024  # memory_remember takes a paragraph, not a file

# Loopback names only, optionally with a port. Anything else is a name some other party controls.
_LOOPBACK_HOST = re.compile(r"(?:localhost|127\.0\.0\.1|\[::1\])(?::\d{1,5})?", re.IGNORECASE)
_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")


class RequestRejected(Exception):
    """Raise from a route handler to answer with a 4xx status and a message, e.g. a missing field."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# --- server ------------------------------------------------------------------------------------


class DropSummary:
    """Counts refused and dropped connections by reason; logs one summary line a minute at most.

    A flood of bad connections must not flood the log (59,725 lines in 12 s rotated every earlier log
    away): the first drop after a quiet minute is logged at once, the rest are summed up.
    """

    def __init__(self, interval: float = 60.0) -> None:
        self.interval = interval
        self.total = 0
        self._counts: dict[str, int] = {}
        self._last_log = -interval
        self._lock = threading.Lock()

    def note(self, reason: str) -> None:
        with self._lock:
            self.total += 1
            self._counts[reason] = self._counts.get(reason, 0) + 1
            if time.monotonic() - self._last_log >= self.interval:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._counts:
            summary = "; ".join(f"{n} {reason}" for reason, n in sorted(self._counts.items()))
            log.warning("control plane: dropped %d connection(s) since the last report (%s)",
                        sum(self._counts.values()), summary)
            self._counts.clear()
        self._last_log = time.monotonic()


class _DeadlineReader(io.RawIOBase):
    """Socket reads that share one deadline for the whole request.

    A plain socket timeout restarts at every byte, so a client trickling one byte every few seconds
    (slowloris) would never time out; here each read may only wait for what is left of the deadline.
    """

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("request not received within the deadline")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # one request per connection: no idle keep-alive threads
    # The base class assumes HTTP/0.9 for an unparsable request line and then replies without a status
    # line or headers; every answer here, errors included, is a full HTTP/1.0 response.
    default_request_version = "HTTP/1.0"
    server_version = "engram"
    sys_version = ""

    def setup(self) -> None:
        self.timeout = self.server.control.request_timeout
        super().setup()
        self.rfile.close()  # release the socket's reference to the default reader before replacing it
        deadline = time.monotonic() + self.server.control.request_timeout
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, deadline))

    # One entry point for every method, so that a known path with a wrong method is 405, not 501.
    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET

    def _dispatch(self) -> None:
        control = self.server.control
        path = urlsplit(self.path).path
        hosts = self.headers.get_all("Host") or []
        if len(hosts) != 1 or not _LOOPBACK_HOST.fullmatch(hosts[0].strip()):
            return self._error(HTTPStatus.FORBIDDEN, "the Host header must be localhost or 127.0.0.1")
        if control.ui is not None and (path == UI_PREFIX.rstrip("/") or path.startswith(UI_PREFIX)):
            # The browser viewer owns its paths: it checks its own cookie and Origin and answers in HTML.
            # Its request has arrived, so like /ping it leaves the waiting room for a slot.
            if not self.server.admit(self.connection, authenticated=False):
                return self._busy()
            self.close_connection = True
            return control.ui(self)
        if self.headers.get("Origin") is not None or any(
            name.lower().startswith("sec-fetch-") for name in self.headers
        ):
            return self._error(HTTPStatus.FORBIDDEN, "browser requests are not accepted")
        if path == "/ping":
            if self.command != "GET":
                return self._error(HTTPStatus.METHOD_NOT_ALLOWED, "use GET", allow="GET")
            if not self.server.admit(self.connection, authenticated=False):
                return self._busy()
            return self._answer(lambda _body: {"status": "ok", **control.ping()}, {})
        if not self._authorized(control.token):
            return self._error(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token",
                               extra={"WWW-Authenticate": "Bearer"})
        # Authenticated: from here on the request has a slot no unauthenticated connection can take.
        if not self.server.admit(self.connection, authenticated=True):
            return self._busy()
        if path == MCP_PATH and control.mcp is not None:
            return self._answer_mcp(control.mcp)
        allowed = control.methods_for(path)
        if not allowed:
            return self._error(HTTPStatus.NOT_FOUND, f"no endpoint {path}")
        if self.command not in allowed:
            return self._error(HTTPStatus.METHOD_NOT_ALLOWED, f"use {', '.join(allowed)}",
                               allow=", ".join(allowed))
        try:
            body = self._read_json_body(control.max_body_bytes)
        except RequestRejected as exc:
            return self._error(exc.status, exc.message)
        except TimeoutError:
            return self._error(HTTPStatus.REQUEST_TIMEOUT, "request body not received in time")
        if body is None:  # the client went away mid-body
            self.close_connection = True
            return None
        return self._answer(control.routes[(self.command, path)], body)

    def _busy(self) -> None:
        return self._error(HTTPStatus.SERVICE_UNAVAILABLE, "busy; try again",
                           extra={"Retry-After": str(RETRY_AFTER_SECONDS)})

    def _authorized(self, token: str) -> bool:
        scheme, _, presented = (self.headers.get("Authorization") or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not presented:
            return False
        # Headers arrive as latin-1 text; compare bytes in constant time.
        return hmac.compare_digest(presented.strip().encode("latin-1", "replace"), token.encode("ascii"))

    def _answer_mcp(self, handler: McpHandler) -> None:
        # Stateless JSON mode: a client only ever POSTs one message and reads its answer.
        if self.command != "POST":
            return self._error(HTTPStatus.METHOD_NOT_ALLOWED, "use POST", allow="POST")
        try:
            body = self._read_body(MAX_MCP_BODY_BYTES)
        except RequestRejected as exc:
            return self._error(exc.status, exc.message)
        except TimeoutError:
            return self._error(HTTPStatus.REQUEST_TIMEOUT, "request body not received in time")
        if body is None:
            self.close_connection = True
            return None
        try:
            status, headers, payload = handler(self, body)
        except Exception:
            log.exception("control endpoint POST %s failed", MCP_PATH)
            return self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error; see the engram log")
        content_type = next((value for name, value in headers if name.lower() == "content-type"), None)
        self._send(status, payload, {name: value for name, value in headers
                                     if name.lower() not in ("content-type", "content-length", "connection")},
                   content_type=content_type)
        return None

    def _read_json_body(self, limit: int) -> JSONDict | None:
        data = self._read_body(limit)
        if data is None:
            return None
        if not data:
            return {}
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise RequestRejected(HTTPStatus.BAD_REQUEST, "body is not valid JSON") from None
        if not isinstance(body, dict):
            raise RequestRejected(HTTPStatus.BAD_REQUEST, "body must be a JSON object")
        return body

    def _read_body(self, limit: int) -> bytes | None:
        """The request's body (b"" without one); None when the client went away mid-body."""
        if self.headers.get("Transfer-Encoding") is not None:
            raise RequestRejected(HTTPStatus.LENGTH_REQUIRED,
                                  "send a Content-Length; chunked bodies are refused")
        lengths = self.headers.get_all("Content-Length") or []
        if len(lengths) > 1 or (lengths and not lengths[0].strip().isdigit()):
            raise RequestRejected(HTTPStatus.BAD_REQUEST, "invalid Content-Length")
        length = int(lengths[0]) if lengths else 0
        if length > limit:
            # Refused unread: the connection is closed, the body is never buffered.
            raise RequestRejected(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {limit} bytes")
        if length == 0:
            return b""
        data = self.rfile.read(length)
        return data if len(data) == length else None

    def _answer(self, route: Route, body: JSONDict) -> None:
        try:
            result = route(body)
            if not isinstance(result, dict):
                raise TypeError(f"handler returned {type(result).__name__}, not a dict")
            payload = json.dumps(result).encode()
        except RequestRejected as exc:
            return self._error(exc.status, exc.message)
        except Exception:
            log.exception("control endpoint %s %s failed", self.command, urlsplit(self.path).path)
            return self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error; see the engram log")
        self._send(HTTPStatus.OK, payload)
        return None

    def _error(self, status: int, message: str, allow: str | None = None,
               extra: Mapping[str, str] | None = None) -> None:
        headers = dict(extra or {})
        if allow:
            headers["Allow"] = allow
        self.close_connection = True
        self._send(status, json.dumps({"error": message}).encode(), headers)

    def _send(self, status: int, payload: bytes, headers: Mapping[str, str] | None = None, *,
              content_type: str | None = "application/json") -> None:
        # Reads were bounded by the deadline; a write gets the plain per-operation timeout.
        self.connection.settimeout(self.server.control.request_timeout)
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # Malformed requests (bad request line, too many headers, ...) get JSON like everything else.
        self.log_error("code %d, message %s", code, message)
        self.close_connection = True
        reason = message or self.responses.get(code, ("error",))[0]
        self._send(code, json.dumps({"error": reason}).encode())

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # The method, the path without its query string, and the status: never headers (the token), never
        # a query string (a client that put the token in the URL must not get it logged either).
        path = urlsplit(getattr(self, "path", "") or "").path
        log.debug("control %s %s -> %s", getattr(self, "command", None) or "-", path or "-", code)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("control: %s", format.split("%", 1)[0].strip() or "request")

    def log_error(self, format: str, *args: Any) -> None:
        self.server.drops.note("malformed or timed-out request")


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a stuck handler never keeps the processor from exiting
    block_on_close = False
    # On Linux SO_REUSEADDR only allows rebinding over TIME_WAIT; on BSD/macOS it would also let us
    # bind 127.0.0.1:port under another program's wildcard listener, so it is off there.
    allow_reuse_address = sys.platform.startswith("linux")
    # socketserver's default listen backlog is 5: a burst of reconnecting clients fills it, the kernel
    # drops the next SYN and an honest client waits a full 1 s retransmit before it is even accepted.
    request_queue_size = socket.SOMAXCONN

    def __init__(self, address: tuple[str, int], control: ControlServer) -> None:
        self.control = control
        self.drops = DropSummary()
        self._lock = threading.Lock()
        self._waiting: dict[int, Any] = {}   # connections that have not been admitted yet, oldest first
        self._admitted: dict[int, threading.BoundedSemaphore] = {}  # connection → the pool of its slot
        self._slots = threading.BoundedSemaphore(control.max_connections)  # requests with the token
        self._open_slots = threading.BoundedSemaphore(control.open_slots)  # /ping and the viewer
        self._queued = {True: 0, False: 0}  # requests in admit (waiting for a slot or just given one), per pool
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup that can stall startup.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "localhost"
        self.server_port = self.server_address[1]

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            if len(self._waiting) >= self.control.max_connections:
                self._evict_one()
            self._waiting[id(request)] = request
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._done(request)
            raise

    def _evict_one(self) -> None:
        """Make room in the waiting room: close the connection that has waited longest with nothing unread.

        Under a flood of idle or trickling clients that is one of them (what they send is read as it
        comes), never a real client whose request is in, unread, because its thread has not run yet:
        a burst of real clients all wait. Past BURST_FACTOR times the room, the oldest goes regardless.
        """
        victim = next((key for key, sock in self._waiting.items() if not _has_unread_bytes(sock)), None)
        if victim is None:
            if len(self._waiting) < self.control.max_connections * BURST_FACTOR:
                return
            victim = next(iter(self._waiting))
        with contextlib.suppress(OSError):
            self._waiting.pop(victim).shutdown(socket.SHUT_RDWR)
        self.drops.note("idle or slow connection evicted for a new one")

    def admit(self, request: Any, *, authenticated: bool) -> bool:
        """A request arrived (proving the token, or for a path that needs none): it leaves the waiting room
        for a slot of its pool, waiting up to queue_seconds for one; False when none came free."""
        pool = self._slots if authenticated else self._open_slots
        who = "with" if authenticated else "without"
        # The queue is bounded too: a flood of complete requests is refused at once past BURST_FACTOR times
        # the pool, rather than keeping a thread each for queue_seconds.
        room = (self.control.max_connections if authenticated else self.control.open_slots) * BURST_FACTOR
        with self._lock:
            self._waiting.pop(id(request), None)
            queue_full = self._queued[authenticated] >= room
            if not queue_full:
                self._queued[authenticated] += 1
        if queue_full:
            self.drops.note(f"{room} requests {who} the token already queued")
            return False
        try:
            got = pool.acquire(timeout=self.control.queue_seconds)
        finally:
            with self._lock:
                self._queued[authenticated] -= 1
        if not got:
            self.drops.note(f"every slot for requests {who} the token busy for {self.control.queue_seconds:g} s")
            return False
        with self._lock:
            self._admitted[id(request)] = pool
        return True

    def _done(self, request: Any) -> None:
        with self._lock:
            self._waiting.pop(id(request), None)
            pool = self._admitted.pop(id(request), None)
        if pool is not None:
            pool.release()

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("control plane: connection from %s failed", client_address, exc_info=True)


class ControlServer:
    """The HTTP control plane, served from a background thread on 127.0.0.1.

    ``port`` is tried first; if it is taken, the OS picks a free one (``port=0`` asks for that
    directly). The port actually bound is written to ``run/engram.port``. ``routes`` maps
    ``(METHOD, path)`` to a callable taking the JSON body (``{}`` for GET) and returning a JSON object;
    it may raise RequestRejected for a 4xx answer. ``ping`` returns the fields of ``GET /ping``.
    ``ui``, if given, answers every request under ``/ui/`` (the browser viewer, ``processor/viewer/``):
    those requests pass the Host check here, and their authentication is the viewer's own. ``mcp``, if
    given, answers authenticated ``POST /mcp`` requests (Engram's MCP tools, ``mcp_tools/host.py``).
    """

    def __init__(
        self,
        run_dir: Path,
        port: int = Settings.http_port.default,
        routes: Mapping[tuple[str, str], Route] | None = None,
        ping: Callable[[], JSONDict] | None = None,
        *,
        ui: UiHandler | None = None,
        mcp: McpHandler | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        request_timeout: float = REQUEST_TIMEOUT_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
        queue_seconds: float = QUEUE_SECONDS,
        poll_interval: float = 0.5,
    ) -> None:
        self.run_dir = run_dir
        self.requested_port = port
        self.routes: dict[tuple[str, str], Route] = {}
        for (method, path), fn in (routes or {}).items():
            method = method.upper()
            if method not in _METHODS or not path.startswith("/") or path == "/ping":
                raise ValueError(f"cannot register {method} {path}")
            self.routes[(method, path)] = fn
        self.ping: Callable[[], JSONDict] = ping or dict
        self.ui = ui
        self.mcp = mcp
        self.max_body_bytes = max_body_bytes
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        # Requests without the token: /ping is quick; the viewer's live pages hold a slot each (at most 8).
        self.open_slots = max(1, max_connections // 2)
        self.queue_seconds = queue_seconds
        self.poll_interval = poll_interval  # how often the serving thread notices stop(); the stop latency
        self.token = ""
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int | None:
        return self._httpd.server_address[1] if self._httpd else None

    @property
    def port_file(self) -> Path:
        return self.run_dir / PORT_FILE

    def methods_for(self, path: str) -> list[str]:
        return sorted(method for method, route_path in self.routes if route_path == path)

    def start(self) -> int:
        """Bind, publish the port file and serve in a daemon thread; returns the port bound."""
        if self._httpd is not None:
            raise RuntimeError("control server already started")
        self.token = ensure_token(self.run_dir)
        httpd = self._bind()
        port = httpd.server_address[1]
        try:
            write_atomic(self.port_file, f"{port}\n", durable=True)
        except BaseException:
            httpd.server_close()
            raise
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": self.poll_interval}, name="engram-control", daemon=True
        )
        self._thread.start()
        log.info("control plane listening on http://127.0.0.1:%d", port)
        return port

    def _bind(self) -> _Server:
        try:
            return _Server(("127.0.0.1", self.requested_port), self)
        except OSError as exc:
            if self.requested_port == 0 or not _address_in_use(exc):
                raise
        httpd = _Server(("127.0.0.1", 0), self)
        log.warning("port %d is in use; control plane fell back to port %d",
                    self.requested_port, httpd.server_address[1])
        return httpd

    def stop(self) -> None:
        """Stop serving and remove the port file (only if it still names our port)."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        port = httpd.server_address[1]
        httpd.shutdown()
        httpd.server_close()
        httpd.drops.flush()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if read_port(self.run_dir) == port:
            with contextlib.suppress(FileNotFoundError):
                self.port_file.unlink()

    def __enter__(self) -> ControlServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _has_unread_bytes(sock: socket.socket) -> bool:
    """Whether the client has sent bytes its handler has not read yet (a request waiting to be parsed).

    A zero-timeout poll: the socket's own recv would first wait for data up to its timeout (its
    handler's deadline), holding up the thread that accepts connections.
    """
    poller = select.poll()
    try:
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):  # closed meanwhile: nothing worth keeping
        return False


def _address_in_use(exc: OSError) -> bool:
    return exc.errno == errno.EADDRINUSE
