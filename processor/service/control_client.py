"""Calling the running processor's control plane: ``request()`` and ``ping()`` for the CLI and the MCP server."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

from processor.hook_kit import control
from processor.service.control_files import PORT_FILE, TOKEN_FILE, read_port, read_token
from processor.service.pidfile import is_running

JSONDict = dict[str, Any]
MAX_ANSWER_BYTES = 1024 * 1024
# What POST /recall takes (processor/lifecycle.py): a longer query is cut, a limit outside 1..50 refused.
# `engram recall` (processor/lookup.py) searches itself what the processor would cut, so both answer alike.
RECALL_QUERY_CHARS = control.RECALL_QUERY_CHARS
RECALL_MAX_LIMIT = 50


class ControlError(Exception):
    """A control request could not be answered."""


class NotRunning(ControlError):
    """No processor is running for this run directory (or it has not published its port yet)."""


class ControlRequestFailed(ControlError):
    """The processor answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


def request(
    run_dir: Path, method: str, path: str, body: JSONDict | None = None, *, timeout: float = 5.0
) -> JSONDict:
    """Call the running processor; raises NotRunning, ControlRequestFailed or ControlError.

    The token is only sent to a port published by a live instance (the pid lock is held): after a
    crash, another local program could have taken over the stale port and would receive the token.
    """
    port = live_port(run_dir)
    headers = {"Accept": "application/json"}
    if path != "/ping":
        token = read_token(run_dir)
        if token is None:
            raise ControlError(f"no usable token in {run_dir / TOKEN_FILE}; restart the processor")
        headers["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method.upper(), path, body=data, headers=headers)
        response = conn.getresponse()
        raw = response.read(MAX_ANSWER_BYTES)
    except ConnectionRefusedError:
        raise NotRunning(f"nothing listens on 127.0.0.1:{port}; the processor may be restarting") from None
    except (OSError, http.client.HTTPException) as exc:
        raise ControlError(f"control request {method} {path} failed: {exc}") from None
    finally:
        conn.close()
    try:
        payload = json.loads(raw) if raw else {}
    except ValueError:
        payload = {"error": raw[:200].decode("utf-8", "replace")}
    if response.status != 200:
        message = payload.get("error", "") if isinstance(payload, dict) else ""
        raise ControlRequestFailed(response.status, message or response.reason)
    if not isinstance(payload, dict):
        raise ControlError(f"control request {method} {path}: expected a JSON object")
    return payload


def ping(run_dir: Path, *, timeout: float = 1.0) -> JSONDict | None:
    """``GET /ping`` for status lines and hooks: the answer, or None if no processor answers."""
    try:
        return request(run_dir, "GET", "/ping", timeout=timeout)
    except ControlError:
        return None


def live_port(run_dir: Path) -> int:
    if not is_running(run_dir):
        raise NotRunning(f"the Engram processor is not running (no lock held in {run_dir})")
    port = read_port(run_dir)
    if port is None:
        raise NotRunning(f"the processor has not published a port in {run_dir / PORT_FILE}")
    return port
