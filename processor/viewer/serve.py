"""Wiring the viewer: the processor's login route, and `engram open`'s own read-only server when none runs."""

from __future__ import annotations

import threading
import webbrowser
from collections.abc import Callable
from typing import Any

import apsw

from processor.config import Settings, SettingsHolder, SettingsSource
from processor.memory.embedder import Embedder
from processor.memory.episode_store import EpisodeStore
from processor.memory.search import VectorIndex
from processor.service.control_server import ControlServer
from processor.viewer.app import Viewer

LOGIN_PATH = "/viewer/login"


def login_route(viewer: Viewer, port: Callable[[], int | None]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """``POST /viewer/login`` (bearer token): a one-time login URL for the browser."""
    def route(_body: dict[str, Any]) -> dict[str, Any]:
        bound = port()
        if bound is None:
            raise RuntimeError("control plane not started")
        return {"url": viewer.login_url(bound)}
    return route


class SharedModel:
    """One embedder and vector index for every request thread of a viewer without a processor."""

    def __init__(self, settings: SettingsSource) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._embedder: Embedder | None = None
        self._index: VectorIndex | None = None

    def store(self, conn: apsw.Connection) -> EpisodeStore:
        with self._lock:
            if self._embedder is None:
                first = EpisodeStore(self._settings, conn)
                self._embedder, self._index = first.embedder, first.index
        return EpisodeStore(self._settings, conn, embedder=self._embedder, index=self._index)


def serve_read_only(settings: Settings, *, open_browser: bool = True, ready: Callable[[str], None] = print,
                    stop: threading.Event | None = None) -> int:
    """`engram open` with no processor: serve the viewer read-only in the foreground until Ctrl-C."""
    holder = SettingsHolder(settings)
    stop = stop or threading.Event()
    viewer = Viewer(holder, SharedModel(holder).store, read_only=True, stop=stop)
    server = ControlServer(settings.run_dir, port=0, routes={}, ui=viewer.handle)
    port = server.start()
    try:
        url = viewer.login_url(port)
        ready(url)
        if open_browser:
            webbrowser.open(url)
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.stop()
    return 0
