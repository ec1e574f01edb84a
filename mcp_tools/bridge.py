"""The command Claude Code starts for Engram's MCP tools: a pipe to the running processor.

Start it the way Claude Code does, from the project directory::

    python -I -m mcp_tools.bridge

Why a pipe: the official MCP SDK takes about 1.4 s to import, so a server of its own per session
answered ``initialize`` seconds after Claude Code started it. The running processor has the SDK loaded
and serves the same tools at ``POST /mcp`` of its authenticated control plane
(``mcp_tools/host.py``); this process imports nothing heavy, passes each newline-delimited
message from stdin there unchanged and writes the answer to stdout. The protocol is the SDK's on both
ends: the bridge reads only the ``method`` of each message it forwards (to keep the handshake) and the
negotiated protocol version (sent as the header streamable HTTP asks for).

Fallback: with no processor running, the bridge runs the full server in-process (as before: a slow
start, but every tool answers from the database). If the processor stops answering mid-session, the
bridge starts that server as a child, replays the handshake to it (its answer to the replayed
``initialize`` is not passed on) and pipes the rest of the session through it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path
from typing import IO

from mcp_tools import CALL_TIMEOUT_SECONDS, PROJECT_HEADER, SESSION_HEADER
from processor.config import ConfigError, load_settings
from processor.service.control_client import NotRunning, live_port
from processor.service.control_files import read_token
from processor.service.control_server import MCP_PATH

VERSION_HEADER = "MCP-Protocol-Version"
HANDSHAKE = ("initialize", "notifications/initialized")
SERVER_MODULE = "mcp_tools.server"
SESSION_ENV = "CLAUDE_CODE_SESSION_ID"  # what Claude Code sets for the MCP servers it starts


class LinkDown(Exception):
    """The processor did not answer a message; the session moves to a server of its own."""


class ProcessorLink:
    """POSTs messages to the processor's /mcp, re-reading its port and token once when they changed."""

    def __init__(self, run_dir: os.PathLike[str] | str, cwd: str) -> None:
        self.run_dir = Path(run_dir)
        self.cwd = urllib.parse.quote(cwd, safe="/")
        session = os.environ.get(SESSION_ENV, "")
        self.session = session if session.isprintable() and session.isascii() and len(session) <= 128 else ""
        self.protocol_version: str | None = None
        self._address: tuple[int, str] | None = None

    def available(self) -> bool:
        try:
            self._refresh()
        except LinkDown:
            return False
        return True

    def _refresh(self) -> tuple[int, str]:
        try:
            port = live_port(self.run_dir)
        except NotRunning as exc:
            raise LinkDown(str(exc)) from None
        token = read_token(self.run_dir)
        if token is None:
            raise LinkDown(f"no token in {self.run_dir}")
        self._address = (port, token)
        return self._address

    def post(self, message: bytes) -> bytes:
        """The processor's answer to one message (b"" for a notification); LinkDown when there is none.

        A refused connection or a refused token (the processor restarted: new port, new token) is tried
        once more with the files re-read; nothing was carried out then. Any other failure is LinkDown,
        and the message goes to the bridge's own server: after a timeout it may then run twice.
        """
        retried = False
        while True:
            port, token = self._address or self._refresh()
            try:
                status, body = self._post_once(port, token, message)
            except ConnectionRefusedError as exc:
                status, body = 0, str(exc).encode()
            except OSError as exc:
                raise LinkDown(str(exc)) from None
            if status in (200, 202):
                return body.strip()
            if retried or status not in (0, 401):
                raise LinkDown(f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}")
            retried, self._address = True, None

    def _post_once(self, port: int, token: str, message: bytes) -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream", PROJECT_HEADER: self.cwd}
        if self.session:
            headers[SESSION_HEADER] = self.session
        if self.protocol_version:
            headers[VERSION_HEADER] = self.protocol_version
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=CALL_TIMEOUT_SECONDS)
        try:
            conn.request("POST", MCP_PATH, body=message, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        except http.client.HTTPException as exc:
            raise OSError(str(exc)) from None
        finally:
            conn.close()


def _field(line: bytes, *path: str) -> object:
    try:
        value: object = json.loads(line)
    except ValueError:
        return None
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def bridge(link: ProcessorLink, stdin: IO[bytes], stdout: IO[bytes]) -> int:
    handshake: list[bytes] = []
    for line in stdin:
        if not line.strip():
            continue
        method = _field(line, "method")
        try:
            answer = link.post(line.strip())
        except LinkDown as exc:
            print(f"engram: the processor stopped answering ({exc}); serving this session here", file=sys.stderr)
            return fall_back(handshake, line, stdin, stdout)
        if method in HANDSHAKE:
            handshake.append(line)
        if method == "initialize":
            version = _field(answer, "result", "protocolVersion")
            link.protocol_version = version if isinstance(version, str) and version.isprintable() else None
        if answer:
            stdout.write(answer + b"\n")
            stdout.flush()
    return 0


def fall_back(handshake: list[bytes], pending: bytes, stdin: IO[bytes], stdout: IO[bytes]) -> int:
    """The rest of the session through a server of its own, which first gets the handshake replayed."""
    child = subprocess.Popen([sys.executable, "-I", "-m", SERVER_MODULE], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    replayed_id = _field(handshake[0], "id") if handshake else None
    out = threading.Thread(target=_copy_answers, args=(child.stdout, stdout, replayed_id),
                           name="engram-mcp-answers", daemon=True)
    out.start()
    try:
        for line in (*handshake, pending):
            child.stdin.write(line if line.endswith(b"\n") else line + b"\n")
        child.stdin.flush()
        for line in stdin:
            child.stdin.write(line)
            child.stdin.flush()
    except BrokenPipeError:
        pass
    finally:
        with contextlib.suppress(BrokenPipeError):
            child.stdin.close()
    code = child.wait()
    out.join()
    return code


def _copy_answers(source: IO[bytes], sink: IO[bytes], replayed_id: object) -> None:
    drop = replayed_id is not None
    for line in source:
        if drop and _field(line, "id") == replayed_id and _field(line, "method") is None:
            drop = False  # the answer to the replayed initialize: the client already has the first one
            continue
        sink.write(line)
        sink.flush()


def main() -> int:
    try:
        link = ProcessorLink(load_settings().run_dir, os.getcwd())
    except ConfigError:
        link = None  # the full server reports the broken configuration as a tool error
    if link is None or not link.available():
        from mcp_tools.server import main as serve

        serve()
        return 0
    return bridge(link, sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    sys.exit(main())
