"""The control plane: real HTTP over 127.0.0.1, token and Host checks, and hostile clients."""

from __future__ import annotations

import http.client
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from processor.service.control_client import ControlRequestFailed, NotRunning, ping, request
from processor.service.control_files import ensure_token, read_port, read_token
from processor.service.control_server import BURST_FACTOR, ControlServer, RequestRejected
from processor.service.pidfile import PidFile

TIMEOUT = 1.0  # the server's whole-request deadline in these tests
FAST = {"request_timeout": TIMEOUT, "poll_interval": 0.02}


def _recall(body: dict[str, Any]) -> dict[str, Any]:
    if "query" not in body:
        raise RequestRejected(422, "query is required")
    return {"bites": [f"about {body['query']}"]}


def _explode(body: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("secret internals")


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    run_dir = tmp_path / "run"
    # The client only talks to a live instance, i.e. while the instance lock is held.
    with PidFile(run_dir):
        yield run_dir


@pytest.fixture
def server(run_dir: Path) -> Iterator[ControlServer]:
    woken: list[dict[str, Any]] = []
    control = ControlServer(
        run_dir,
        port=0,
        routes={
            ("GET", "/status"): lambda body: {"queue_depth": 3},
            ("POST", "/recall"): _recall,
            ("POST", "/wake"): lambda body: woken.append(body) or {"woken": True},
            ("POST", "/explode"): _explode,
        },
        ping=lambda: {"processing": None, "queue_depth": 2, "uptime_s": 5.0, "capture_lag_s": 0.1},
        **FAST,
    )
    control.start()
    yield control
    control.stop()


def call(port: int, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any], http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        raw = response.read()
        return response.status, (json.loads(raw) if raw else {}), response
    finally:
        conn.close()


def auth(server: ControlServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {read_token(server.run_dir)}"}


def raw_exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


# --- files ---


def test_start_publishes_port_file_and_token_privately(server: ControlServer) -> None:
    assert server._httpd is not None and server._httpd.server_address[0] == "127.0.0.1"
    port_file, token_file = server.run_dir / "engram.port", server.run_dir / "token"
    assert read_port(server.run_dir) == server.port
    assert port_file.stat().st_mode & 0o777 == 0o600
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert len(read_token(server.run_dir) or "") >= 32
    server.stop()
    assert not port_file.exists()
    assert token_file.exists()  # the token outlives a restart; the port does not


def test_missing_token_file_is_created_private(tmp_path: Path) -> None:
    token = ensure_token(tmp_path / "run")
    assert (tmp_path / "run" / "token").stat().st_mode & 0o777 == 0o600
    assert ensure_token(tmp_path / "run") == token  # kept across restarts


def test_world_readable_token_is_replaced_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    leaked = "L" * 43
    (run_dir / "token").write_text(leaked)
    (run_dir / "token").chmod(0o644)
    assert read_token(run_dir) is None  # a client will not use it either
    with caplog.at_level(logging.INFO):
        token = ensure_token(run_dir)
    assert token != leaked
    assert (run_dir / "token").stat().st_mode & 0o777 == 0o600
    assert read_token(run_dir) == token
    assert "readable by other users" in caplog.text
    assert token not in caplog.text and leaked not in caplog.text


def test_port_in_use_falls_back_to_a_free_port(run_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        control = ControlServer(run_dir, port=busy, **FAST)
        with caplog.at_level(logging.WARNING):
            port = control.start()
        try:
            assert port != busy and port == control.port
            assert read_port(run_dir) == port
            assert f"port {busy} is in use" in caplog.text
            assert ping(run_dir)["status"] == "ok"
        finally:
            control.stop()


def test_fixed_port_is_used_when_free(run_dir: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    with ControlServer(run_dir, port=free, **FAST) as control:
        assert control.port == free == read_port(run_dir)


# --- endpoints and auth ---


def test_ping_needs_no_token(server: ControlServer) -> None:
    status, body, _ = call(server.port, "GET", "/ping")
    assert status == 200
    assert body == {"status": "ok", "processing": None, "queue_depth": 2, "uptime_s": 5.0, "capture_lag_s": 0.1}
    assert ping(server.run_dir) == body


def test_endpoints_other_than_ping_need_the_token(server: ControlServer) -> None:
    status, body, response = call(server.port, "GET", "/status")
    assert status == 401 and response.getheader("WWW-Authenticate") == "Bearer"
    assert call(server.port, "GET", "/status", headers={"Authorization": "Bearer nope"})[0] == 401
    assert call(server.port, "GET", "/status", headers={"Authorization": "Basic abc"})[0] == 401
    assert call(server.port, "GET", "/status", headers={"Authorization": "Bearer \xe9t\xe9"})[0] == 401
    assert call(server.port, "POST", "/wake", b"{}")[0] == 401
    status, body, _ = call(server.port, "GET", "/status", headers=auth(server))
    assert (status, body) == (200, {"queue_depth": 3})


def test_client_request_round_trip(server: ControlServer) -> None:
    assert request(server.run_dir, "POST", "/recall", {"query": "sqlite"}) == {"bites": ["about sqlite"]}
    assert request(server.run_dir, "POST", "/wake") == {"woken": True}
    with pytest.raises(ControlRequestFailed) as info:
        request(server.run_dir, "POST", "/recall", {})
    assert (info.value.status, info.value.message) == (422, "query is required")


def test_non_loopback_host_is_refused(server: ControlServer) -> None:
    for host in ("evil.example", "evil.example:80", "127.0.0.1.evil.example", "localhost.evil", "0.0.0.0"):
        headers = {**auth(server), "Host": host}
        assert call(server.port, "GET", "/status", headers=headers)[0] == 403, host
        assert call(server.port, "GET", "/ping", headers={"Host": host})[0] == 403, host
    for host in ("localhost", f"localhost:{server.port}", "127.0.0.1", "LOCALHOST", "[::1]", f"[::1]:{server.port}"):
        assert call(server.port, "GET", "/status", headers={**auth(server), "Host": host})[0] == 200, host
    # No Host at all (HTTP/1.0 style) is refused too.
    assert raw_exchange(server.port, b"GET /ping HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 403")


def test_browser_requests_are_refused(server: ControlServer) -> None:
    headers = {**auth(server), "Origin": "http://localhost:3000"}
    assert call(server.port, "POST", "/wake", b"{}", headers)[0] == 403
    assert call(server.port, "GET", "/ping", headers={"Sec-Fetch-Site": "cross-site"})[0] == 403


def test_unknown_path_and_wrong_method(server: ControlServer) -> None:
    assert call(server.port, "GET", "/nope", headers=auth(server))[0] == 404
    status, _, response = call(server.port, "GET", "/recall", headers=auth(server))
    assert status == 405 and response.getheader("Allow") == "POST"
    assert call(server.port, "PUT", "/recall", b"{}", auth(server))[0] == 405
    assert call(server.port, "POST", "/ping", b"{}")[0] == 405
    assert call(server.port, "GET", "/status?verbose=1", headers=auth(server))[0] == 200


def test_bad_bodies_are_400(server: ControlServer) -> None:
    headers = {**auth(server), "Content-Type": "application/json"}
    assert call(server.port, "POST", "/recall", b"{not json", headers)[0] == 400
    assert call(server.port, "POST", "/recall", b"[1, 2]", headers)[0] == 400
    assert call(server.port, "POST", "/recall", b"\xff\xfe", headers)[0] == 400
    token = read_token(server.run_dir)
    reply = raw_exchange(server.port, (
        f"POST /recall HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n"
        "Content-Length: abc\r\n\r\n"
    ).encode())
    assert reply.startswith(b"HTTP/1.0 400")


def test_handler_failure_is_a_500_without_details(server: ControlServer, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        status, body, _ = call(server.port, "POST", "/explode", b"{}", auth(server))
    assert status == 500 and "secret internals" not in json.dumps(body)
    assert "secret internals" in caplog.text  # the traceback goes to the log


def test_token_is_never_logged(server: ControlServer, caplog: pytest.LogCaptureFixture) -> None:
    token = read_token(server.run_dir)
    with caplog.at_level(logging.DEBUG):
        call(server.port, "GET", "/status", headers=auth(server))
        call(server.port, "GET", "/nope", headers=auth(server))
        call(server.port, "GET", "/status", headers={"Authorization": "Bearer wrong"})
    assert "/status" in caplog.text
    assert token not in caplog.text


# --- hostile clients ---


def test_huge_body_is_413_without_being_read(server: ControlServer) -> None:
    token = read_token(server.run_dir)
    started = time.monotonic()
    # Only the headers are sent: an answer proves the server did not wait for 10 MB.
    reply = raw_exchange(server.port, (
        f"POST /recall HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 10000000\r\n\r\n"
    ).encode())
    assert reply.startswith(b"HTTP/1.0 413")
    assert time.monotonic() - started < TIMEOUT
    assert ping(server.run_dir)["status"] == "ok"


def test_chunked_bodies_are_refused(server: ControlServer) -> None:
    token = read_token(server.run_dir)
    reply = raw_exchange(server.port, (
        f"POST /recall HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n"
        "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    ).encode())
    assert reply.startswith(b"HTTP/1.0 411")


@pytest.mark.parametrize("garbage", [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n",  # a TLS ClientHello
    b"NOT HTTP AT ALL\r\n\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"GET /ping HTTP/1.1\r\n" + b"X-Filler: y\r\n" * 200 + b"\r\n",
    b"\r\n\r\n",
    b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n",
])
def test_malformed_requests_are_refused_and_the_server_lives_on(server: ControlServer, garbage: bytes) -> None:
    reply = raw_exchange(server.port, garbage)
    # Either dropped, or a proper status line with an error: 400, 414, 431, 505, ...
    assert reply == b"" or re.match(rb"HTTP/1\.0 (4\d\d|505) ", reply), reply[:100]
    assert ping(server.run_dir)["status"] == "ok"


def test_slow_request_is_cut_off_while_others_are_served(server: ControlServer) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    sock.sendall(b"GET /status HTTP/1.1\r\nHost: loc")
    closed_after: list[float] = []
    started = time.monotonic()

    def trickle() -> None:
        # One byte every 0.2 s: a per-read timeout would never fire; the request deadline must.
        try:
            for _ in range(40):
                sock.sendall(b"a")
                time.sleep(0.2)
        except OSError:
            pass

    def watch() -> None:
        try:
            while sock.recv(1024):
                pass
        except OSError:
            pass
        closed_after.append(time.monotonic() - started)

    threads = [threading.Thread(target=trickle, daemon=True), threading.Thread(target=watch, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.3)
        answered = time.monotonic()
        assert ping(server.run_dir, timeout=2)["status"] == "ok"  # not blocked by the slow client
        assert time.monotonic() - answered < 0.5
        threads[1].join(timeout=5)
        assert closed_after, "the slow connection was never closed"
        assert TIMEOUT * 0.8 <= closed_after[0] < TIMEOUT + 1.0
    finally:
        sock.close()


def test_idle_connections_are_evicted_for_a_new_request(run_dir: Path) -> None:
    control = ControlServer(run_dir, port=0, max_connections=2, **FAST)
    control.start()
    idle = [socket.create_connection(("127.0.0.1", control.port), timeout=5) for _ in range(2)]
    try:
        time.sleep(0.2)
        # Both waiting places are held by idle clients: a new request evicts the oldest and is served.
        assert ping(run_dir, timeout=2)["status"] == "ok"
        idle[0].settimeout(2)
        assert idle[0].recv(1024) == b""  # the oldest idle connection was closed
    finally:
        for sock in idle:
            sock.close()
        control.stop()


def test_slow_and_idle_clients_do_not_starve_an_authenticated_request(run_dir: Path) -> None:
    control = ControlServer(run_dir, port=0, routes={("POST", "/recall"): _recall}, request_timeout=5.0)
    control.start()
    stop = threading.Event()
    clients = hold_connections(control.port, stop, 40)
    try:
        time.sleep(1.0)
        answered = []
        for _ in range(20):
            started = time.monotonic()
            try:
                status, _, _ = call(control.port, "POST", "/recall", json.dumps({"query": "q"}).encode(),
                                    headers={"Authorization": f"Bearer {read_token(run_dir)}",
                                             "Content-Type": "application/json"})
            except (OSError, http.client.HTTPException) as exc:
                status = type(exc).__name__
            answered.append((status, round(time.monotonic() - started, 3)))
        assert all(status == 200 for status, _ in answered), answered
        assert max(seconds for _, seconds in answered) < 1.0, answered
    finally:
        stop.set()
        control.stop()
        for client in clients:
            client.join(timeout=10)


def hold_connections(port: int, stop: threading.Event, count: int) -> list[threading.Thread]:
    """`count` clients that never finish a request (half of them idle, half trickling a byte at a time),
    reconnecting whenever the server closes them, until `stop`."""
    def hostile(trickle: bool) -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=6) as sock:
                    sock.sendall(b"GET /status HTTP/1.1\r\nHost: localhost\r\n")
                    while not stop.is_set():
                        if trickle:
                            sock.sendall(b"X")
                        elif not sock.recv(1):
                            break
                        time.sleep(0.1)
            except OSError:
                time.sleep(0.01)

    clients = [threading.Thread(target=hostile, args=(i % 2 == 0,), daemon=True) for i in range(count)]
    for client in clients:
        client.start()
    return clients


def burst(port: int, token: str | None, count: int, path: str = "/recall",
          results: list[tuple[int | str, str | None]] | None = None) -> list[tuple[int | str, str | None]]:
    """`count` requests sent at the same moment, each on its own connection: (status, Retry-After) each,
    appended to `results` as they come."""
    ready = threading.Barrier(count)
    results = [] if results is None else results

    def one(i: int) -> None:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            ready.wait(timeout=30)
            if path == "/ping":
                conn.request("GET", path, headers=headers)
            else:
                conn.request("POST", path, body=json.dumps({"query": f"q{i}"}).encode(), headers=headers)
            response = conn.getresponse()
            response.read()
            results.append((response.status, response.getheader("Retry-After")))
        except (OSError, http.client.HTTPException) as exc:
            results.append((type(exc).__name__, None))
        finally:
            conn.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def _slow_recall(body: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.05)  # a real search's time: the burst outlasts the slots
    return _recall(body)


def test_a_burst_of_authenticated_requests_waits_its_turn_among_slow_clients(run_dir: Path) -> None:
    # 200 real clients at once, 32 slots, and 40 idle or trickling clients holding the waiting room.
    control = ControlServer(run_dir, port=0, routes={("POST", "/recall"): _slow_recall}, request_timeout=5.0)
    control.start()
    stop = threading.Event()
    clients = hold_connections(control.port, stop, 40)
    try:
        time.sleep(0.5)
        results = burst(control.port, read_token(run_dir), 200)
        assert len(results) == 200
        assert [status for status, _ in results].count(200) == 200, sorted(set(results), key=str)
    finally:
        stop.set()
        control.stop()
        for client in clients:
            client.join(timeout=10)


def test_a_request_that_waits_past_the_queue_gets_503_with_retry_after(run_dir: Path) -> None:
    release = threading.Event()

    def blocked(body: dict[str, Any]) -> dict[str, Any]:
        release.wait(timeout=30)
        return {"done": True}

    control = ControlServer(run_dir, port=0, routes={("POST", "/recall"): blocked}, max_connections=2,
                            queue_seconds=0.3, **FAST)
    control.start()
    try:
        holders = [threading.Thread(target=request, args=(run_dir, "POST", "/recall", {}), daemon=True)
                   for _ in range(2)]
        for holder in holders:
            holder.start()
        time.sleep(0.3)  # both slots taken
        status, answer, response = call(control.port, "POST", "/recall", b"{}", auth(control))
        assert status == 503 and answer == {"error": "busy; try again"}
        assert response.getheader("Retry-After") == "1"
        release.set()
        for holder in holders:
            holder.join(timeout=10)
        assert call(control.port, "POST", "/recall", b"{}", auth(control))[0] == 200  # served again at once
    finally:
        release.set()
        control.stop()


def test_requests_without_the_token_cannot_take_the_slots_of_those_with_it(run_dir: Path) -> None:
    release = threading.Event()

    def viewer(handler: Any) -> None:  # a live page: holds its slot until the browser goes away
        release.wait(timeout=30)
        handler.send_response(200)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    control = ControlServer(run_dir, port=0, routes={("POST", "/recall"): _recall}, ui=viewer, max_connections=4,
                            queue_seconds=0.3, **FAST)
    control.start()
    try:
        pages = [threading.Thread(target=call, args=(control.port, "GET", "/ui/live"), daemon=True)
                 for _ in range(control.open_slots)]
        for page in pages:
            page.start()
        time.sleep(0.3)  # every slot for requests without the token is held
        status, answer, _ = call(control.port, "POST", "/recall", json.dumps({"query": "q"}).encode(), auth(control))
        assert (status, answer) == (200, {"bites": ["about q"]})
        assert call(control.port, "GET", "/ping")[0] == 503  # waited its turn in its own pool, in vain
        release.set()
        for page in pages:
            page.join(timeout=10)
        assert call(control.port, "GET", "/ping")[0] == 200
    finally:
        release.set()
        control.stop()


def test_the_queue_for_a_slot_is_bounded_too(run_dir: Path) -> None:
    # One slot without the token (max_connections 2), held by a live page: complete /ping requests queue for it,
    # at most BURST_FACTOR times the pool; the rest are refused at once instead of holding a thread each.
    release = threading.Event()

    def viewer(handler: Any) -> None:
        release.wait(timeout=30)
        handler.send_response(200)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    control = ControlServer(run_dir, port=0, routes={}, ui=viewer, max_connections=2, queue_seconds=10.0, **FAST)
    control.start()
    try:
        page = threading.Thread(target=call, args=(control.port, "GET", "/ui/live"), daemon=True)
        page.start()
        time.sleep(0.3)  # the one slot is held
        room = control.open_slots * BURST_FACTOR
        done: list[tuple[int | str, str | None]] = []
        flood = threading.Thread(target=burst, args=(control.port, None, room + 20, "/ping", done))
        started = time.monotonic()
        flood.start()
        deadline = started + 5
        while len(done) < 20 and time.monotonic() < deadline:  # answers as they come
            time.sleep(0.05)
        refused_at_once = time.monotonic() - started
        release.set()
        flood.join(timeout=60)
        assert refused_at_once < 5, "requests past the queue's bound waited for a slot"
        # Answered at once: 503 past the bound, or closed unread from the waiting room (a room of 2 evicts a
        # connection whose request has not arrived yet); after the release, the queued ones are served.
        statuses = [status for status, _ in done]
        assert len(statuses) == room + 20 and statuses.count(503) >= 10, statuses
        assert all(status in (200, 503, "RemoteDisconnected", "ConnectionResetError") for status in statuses), statuses
        assert all(retry == "1" for status, retry in done if status == 503)
    finally:
        release.set()
        control.stop()


def test_a_flood_of_bad_connections_is_summarised_not_logged_one_by_one(
        run_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    control = ControlServer(run_dir, port=0, max_connections=4, **FAST)
    control.start()
    try:
        with caplog.at_level(logging.DEBUG, logger="processor.service.control_server"):
            for _ in range(300):
                raw_exchange(control.port, b"\x16\x03\x01 not http\r\n\r\n", timeout=2)
            control.stop()
        # The control plane's own lines (not the token file's): a summary per report interval, and a loaded
        # machine stretches the flood over a few more intervals — still a handful, never one line a connection.
        warnings = [r for r in caplog.records if r.levelno >= logging.INFO
                    and r.name == "processor.service.control_server" and "dropped" in r.getMessage()]
        assert not [r for r in caplog.records if r.levelno >= logging.INFO and "malformed" in r.getMessage()
                    and "dropped" not in r.getMessage()]  # never a connection's own line
        assert 1 <= len(warnings) <= 10, [r.getMessage() for r in warnings]
        assert control_total(warnings) == 300
    finally:
        control.stop()


def control_total(records: list[logging.LogRecord]) -> int:
    return sum(int(r.getMessage().split("dropped ")[1].split(" ")[0]) for r in records)


def test_a_token_in_the_url_is_never_logged(server: ControlServer, caplog: pytest.LogCaptureFixture) -> None:
    token = read_token(server.run_dir)
    with caplog.at_level(logging.DEBUG):
        call(server.port, "GET", f"/status?token={token}", headers=auth(server))
        call(server.port, "GET", f"/status?token={token}")
        raw_exchange(server.port, f"GET /status?t={token} HTTP/1.0\r\nBad header\r\n\r\n".encode())
    assert "/status" in caplog.text
    assert token not in caplog.text


# --- client without a live server ---


def test_client_without_a_running_processor(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert ping(run_dir) is None
    with pytest.raises(NotRunning):
        request(run_dir, "GET", "/status")


def test_client_never_sends_the_token_to_a_stale_port(tmp_path: Path) -> None:
    # After a crash the port file is left behind and another program may own that port now.
    run_dir = tmp_path / "run"
    ensure_token(run_dir)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        squatter.settimeout(0.3)
        (run_dir / "engram.port").write_text(str(squatter.getsockname()[1]))
        with pytest.raises(NotRunning):
            request(run_dir, "POST", "/recall", {"query": "x"})
        with pytest.raises(TimeoutError):
            squatter.accept()


# --- the MCP tools' endpoint ---


def test_mcp_requests_need_the_token_a_loopback_host_and_post(run_dir: Path) -> None:
    seen: list[tuple[str, bytes]] = []

    def mcp(request: Any, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        seen.append((request.headers.get("X-Engram-Cwd"), body))
        return 200, [("Content-Type", "application/json"), ("Content-Length", "999")], b'{"answer": 1}'

    with ControlServer(run_dir, port=0, mcp=mcp, **FAST) as control:
        port = control.port
        assert port is not None
        message = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
        assert call(port, "POST", "/mcp", message)[0] == 401
        assert call(port, "POST", "/mcp", message, {**auth(control), "Host": "evil.example"})[0] == 403
        assert call(port, "POST", "/mcp", message, {**auth(control), "Origin": "http://localhost:1"})[0] == 403
        assert call(port, "GET", "/mcp", None, auth(control))[0] == 405
        # Only the headers of a body over the 1 MB cap: refused before a byte of it is read.
        reply = raw_exchange(port, (f"POST /mcp HTTP/1.1\r\nHost: localhost\r\n"
                                    f"Authorization: Bearer {read_token(run_dir)}\r\n"
                                    f"Content-Length: {1024 * 1024 + 1}\r\n\r\n").encode())
        assert reply.startswith(b"HTTP/1.0 413")
        assert seen == []  # nothing reached the tools
        status, answer, response = call(port, "POST", "/mcp", message, {**auth(control), "X-Engram-Cwd": "/w"})
    assert (status, answer) == (200, {"answer": 1})
    assert response.getheader("Content-Length") == str(len(b'{"answer": 1}'))  # ours, not the handler's
    assert seen == [("/w", message)]


def test_without_an_mcp_handler_the_path_is_unknown(server: ControlServer) -> None:
    assert server.port is not None
    assert call(server.port, "POST", "/mcp", b"{}", auth(server))[0] == 404
