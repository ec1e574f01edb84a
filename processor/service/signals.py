"""The processor's signals (SIGTERM, SIGINT, SIGHUP) acted on by a thread of their own, not by the signal handler.

A Python signal handler runs in the main thread between any two of its bytecodes: in the middle of a log write
(logging again from the handler raises "reentrant call inside BufferedWriter" and the line is lost, which is how a
SIGHUP's "configuration not reloaded" once went missing) or while the main thread holds a queue's lock (a put from
the handler would deadlock). So the handler does nothing; Python's C-level handler writes the signal's number to a
wakeup socket (`signal.set_wakeup_fd`, async-signal-safe), and this relay's thread reads it and runs the action
as ordinary code, at once.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


def _noop(_signum: int, _frame: object) -> None:
    """A Python-level handler must exist for the C-level one (which writes to the wakeup socket) to be installed."""


class SignalRelay:
    """Install with start() and remove with stop(), both from the main thread (Python allows no other)."""

    def __init__(self, actions: Mapping[signal.Signals, Callable[[signal.Signals], None]]) -> None:
        self.actions = dict(actions)
        self._reader: socket.socket | None = None
        self._writer: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._previous_fd = -1
        self._previous_handlers: dict[signal.Signals, object] = {}

    def start(self) -> None:
        self._reader, self._writer = socket.socketpair()
        self._writer.setblocking(False)  # set_wakeup_fd requires it: a full buffer must not block a handler
        self._thread = threading.Thread(target=self._run, args=(self._reader,), name="engram-signals", daemon=True)
        self._thread.start()
        self._previous_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        for sig in self.actions:
            self._previous_handlers[sig] = signal.signal(sig, _noop)

    def stop(self) -> None:
        for sig, previous in self._previous_handlers.items():
            signal.signal(sig, previous)  # type: ignore[arg-type]
        self._previous_handlers.clear()
        if self._writer is not None:
            signal.set_wakeup_fd(self._previous_fd)
            self._writer.close()  # the reader sees the end of the stream and its thread returns
            self._writer = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _run(self, reader: socket.socket) -> None:
        while True:
            try:
                received = reader.recv(64)
            except OSError:
                return
            if not received:
                return
            for number in received:
                try:
                    sig = signal.Signals(number)
                except ValueError:
                    continue
                action = self.actions.get(sig)
                if action is None:
                    continue
                try:
                    action(sig)
                except Exception:  # a failed action must not end the relay: the next SIGTERM still has to stop
                    log.exception("acting on %s failed", sig.name)
