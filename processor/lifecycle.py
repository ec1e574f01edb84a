"""`engram run`: one processor per user, with its pid lock, control plane, watchdog and signals.

The composition root: it wires the service's mechanisms (``processor/service/``) with what they serve, the
``/status`` route (``processor/status.py``), the viewer (``processor/viewer/``), recall and the MCP tools' host, so
it sits above all of them and the service folder imports none of them.

Exit codes: 0 after SIGTERM/SIGINT; EXIT_ALREADY_RUNNING when another processor holds the
lock (the service manager should not hammer it); EXIT_MEMORY_LIMIT (75) when the RSS watchdog
asked for a restart.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol

from processor.config import ConfigError, Settings, ensure_home, load_settings
from processor.service.control_client import RECALL_MAX_LIMIT, RECALL_QUERY_CHARS
from processor.service.control_server import ControlServer, RequestRejected
from processor.service.pidfile import EXIT_ALREADY_RUNNING, AlreadyRunning, PidFile
from processor.service.resources import (
    EXIT_MEMORY_LIMIT,
    ChildProcesses,
    MemoryWatchdog,
    fix_mmap_threshold,
    limit_malloc_arenas,
    release_free_memory,
)
from processor.service.run_loop import Processor
from processor.service.signals import SignalRelay
from processor.service.units import load_env_file
from processor.status import collect_status
from processor.store import open_store
from processor.store.connection import NotEngramDatabase
from processor.viewer.app import Viewer
from processor.viewer.serve import LOGIN_PATH, login_route

log = logging.getLogger(__name__)


def _recall_route(processor: Processor):
    def recall(body: dict[str, Any]) -> dict[str, Any]:
        query = body.get("query")
        if not isinstance(query, str) or not query.strip():
            raise RequestRejected(400, "body needs a non-empty 'query' string")
        limit = body.get("limit", 3)
        if not isinstance(limit, int) or not 1 <= limit <= RECALL_MAX_LIMIT:
            raise RequestRejected(400, f"'limit' must be an integer from 1 to {RECALL_MAX_LIMIT}")
        project = body.get("project") if isinstance(body.get("project"), str) else None
        query = query[:RECALL_QUERY_CHARS]
        # The MCP server's memory_recall passes the calling session: its messages not yet in a memory are
        # found too. Returning a hit is not using it (only memory_expand counts an access).
        if body.get("unasked") is True:
            # The UserPromptSubmit hook: what may be shown unasked for this prompt, by the bites' own bar.
            return {"bites": processor.offers_for_http(query, limit=limit, project=project)}
        session_id = body.get("session_id") if isinstance(body.get("session_id"), str) else None
        hits = processor.recall_for_http(query, limit=limit, project=project, session_id=session_id)
        return {"bites": [h.__dict__ for h in hits]}
    return recall


def _expand_route(processor: Processor):
    def expand(body: dict[str, Any]) -> dict[str, Any]:
        item_id = body.get("id")
        if not isinstance(item_id, str) or not item_id.strip():
            raise RequestRejected(400, "body needs a non-empty 'id' string")
        try:
            # An access, as `engram expand` and memory_expand count it.
            return processor.expand_for_http(item_id[:200]).__dict__
        except LookupError as exc:  # unknown or forgotten: the message says which
            raise RequestRejected(404, str(exc.args[0] if exc.args else exc)) from None
    return expand


def _status(processor: Processor) -> dict[str, Any]:
    """The database's counts, with the job worker's own view (its extractor, problem, current job) on top."""
    status = collect_status(processor.settings)
    status["jobs"] = processor.jobs.status()
    return status


EXIT_NOT_ENGRAM_DATABASE = 78  # sysexits EX_CONFIG, as the CLI's configuration errors


# The processor's threads hand the interpreter lock back and forth: capture parses and redacts in pure
# Python while a query (/recall, a recollection) mostly waits in C (SQLite, llama.cpp, numpy) and needs
# the lock back after each call. With the default 5 ms switch interval a query waited up to 5 ms at each
# of its few dozen hand-backs whenever capture was busy; a shorter interval bounds that wait.
SWITCH_INTERVAL_SECONDS = 0.0005


class ToolsHost(Protocol):
    """Engram's MCP tools served at /mcp (``mcp_tools/host.py``: the tools sit above this layer)."""

    @property
    def state(self) -> str: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def handle(self, request: BaseHTTPRequestHandler, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]: ...


ToolsHostFactory = Callable[[Settings, Callable[[], Any]], ToolsHost]


def run_service(overrides: dict[str, Any] | None = None, *, mock: bool = False,
                tools: ToolsHostFactory | None = None) -> int:
    """tools: builds the host of the MCP tools (given the settings and the per-thread store factory);
    without it the processor serves no /mcp and each session's bridge runs its own server."""
    settings = load_settings(overrides=overrides)
    ensure_home(settings)
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    limit_malloc_arenas()
    fix_mmap_threshold()
    from processor.service.logs import setup_logging

    setup_logging(settings)
    lock = PidFile(settings.run_dir)
    try:
        lock.acquire()
    except AlreadyRunning as exc:
        print(f"engram: {exc}", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    try:
        try:
            # Another program's database at our path: refuse before any thread starts (nothing written).
            open_store(settings.db_path).close()
        except NotEngramDatabase as exc:
            log.error("%s", exc)
            print(f"engram: {exc}", file=sys.stderr)
            return EXIT_NOT_ENGRAM_DATABASE
        # launchd has no EnvironmentFile: read API keys from $ENGRAM_HOME/env ourselves (names only are logged).
        names = load_env_file(settings.home / "env")
        if names:
            log.info("environment from %s: %s", settings.home / "env", ", ".join(names))
        return _serve(settings, overrides, mock, tools)
    finally:
        lock.release()


def _serve(settings: Settings, overrides: dict[str, Any] | None, mock: bool, tools: ToolsHostFactory | None) -> int:
    processor = Processor(settings, mock=mock)
    # The claude backend's CLI and anything it starts: found by walking our process tree at shutdown.
    children = ChildProcesses()
    watchdog = MemoryWatchdog(
        warn_mb=settings.memory_warn_mb, limit_mb=settings.memory_limit_mb,
        on_limit=lambda rss: processor.stop(), interval=settings.memory_check_seconds, release=release_free_memory,
    )
    viewer = Viewer(processor.holder, processor.viewer_store, stop=processor.stop_event)
    # The MCP tools every Claude Code session calls, with this process's warm model (their bridges connect here).
    mcp = tools(settings, processor.memory.reader) if tools is not None else None
    control = ControlServer(
        settings.run_dir, port=settings.http_port,
        ping=lambda: {**processor.ping_info(), "mcp_tools": mcp.state if mcp is not None else "not served"},
        routes={
            ("GET", "/status"): lambda _body: _status(processor),
            ("POST", "/recall"): _recall_route(processor),
            ("POST", "/expand"): _expand_route(processor),
            ("POST", "/wake"): lambda _body: {"woken": processor.wake()},
            ("POST", LOGIN_PATH): login_route(viewer, lambda: control.port),
        },
        ui=viewer.handle,
        mcp=mcp.handle if mcp is not None else None,
    )

    def on_stop(sig: signal.Signals) -> None:
        log.info("received %s; stopping", sig.name)
        processor.stop()

    def on_reload(_sig: signal.Signals) -> None:
        try:
            new = load_settings(overrides=overrides)
        except ConfigError as exc:
            log.error("SIGHUP: configuration not reloaded, the old one stays in force: %s", exc)
            return
        processor.reload(new)
        log.info("SIGHUP: configuration reloaded")

    signals = SignalRelay({signal.SIGTERM: on_stop, signal.SIGINT: on_stop, signal.SIGHUP: on_reload})
    signals.start()
    started = time.monotonic()
    try:
        if mcp is not None:
            mcp.start()
        control.start()
        watchdog.start()
        processor.run()
    finally:
        watchdog.stop()
        control.stop()
        if mcp is not None:
            mcp.stop()
        outcome = children.shutdown(grace=settings.child_grace_seconds)
        if outcome.killed or outcome.survivors:
            log.warning("child processes at shutdown: killed %s, survivors %s", outcome.killed, outcome.survivors)
        log.info("processor exited after %.1f s", time.monotonic() - started)
        signals.stop()  # last: a second SIGTERM while shutting down still finds the relay, not the default action
    if watchdog.limit_exceeded:
        log.error("memory limit exceeded; exiting with status %d so the service manager restarts Engram",
                  EXIT_MEMORY_LIMIT)
        return EXIT_MEMORY_LIMIT
    return 0
