"""The processor's signals are acted on by the relay's thread: a SIGHUP that lands while the main thread is writing
the log loses no line (logging from inside a Python signal handler raised "reentrant call" and dropped it)."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

from processor.service.signals import SignalRelay
from tests.e2e.test_processor_live import wait_for


def test_every_sighup_is_acted_on_off_the_main_thread_while_it_writes_the_log(tmp_path: Path) -> None:
    logger = logging.getLogger("test-signal-relay")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(tmp_path / "engram.log", encoding="utf-8")
    logger.addHandler(handler)
    acted_in: list[str] = []

    def on_reload(sig: signal.Signals) -> None:
        acted_in.append(threading.current_thread().name)
        logger.info("%s acted on, %d", sig.name, len(acted_in))

    relay = SignalRelay({signal.SIGHUP: on_reload})
    relay.start()
    try:
        def send() -> None:
            for _ in range(40):
                os.kill(os.getpid(), signal.SIGHUP)
                time.sleep(0.003)

        sender = threading.Thread(target=send)
        sender.start()
        while sender.is_alive():  # the main thread is inside a log write most of the time a signal lands
            logger.info("the main thread at work %s", "x" * 400)
        sender.join()
        os.kill(os.getpid(), signal.SIGHUP)  # delivered alone: the kernel may merge the burst's signals, not this one
        wait_for(lambda: len(acted_in) >= 2, timeout=10)
        time.sleep(0.2)
    finally:
        relay.stop()
        logger.removeHandler(handler)
        handler.close()
    lines = (tmp_path / "engram.log").read_text().splitlines()
    assert set(acted_in) == {"engram-signals"}
    assert sum("SIGHUP acted on" in line for line in lines) == len(acted_in)


def test_stop_gives_back_the_previous_handler_and_wakeup_socket() -> None:
    before = signal.getsignal(signal.SIGHUP)
    relay = SignalRelay({signal.SIGHUP: lambda _sig: None})
    relay.start()
    assert signal.getsignal(signal.SIGHUP) is not before
    relay.stop()
    assert signal.getsignal(signal.SIGHUP) is before
    assert signal.set_wakeup_fd(-1) == -1  # none left installed


def test_a_failing_action_is_logged_and_the_next_signal_still_acted_on(caplog) -> None:
    acted: list[int] = []

    def flaky(_sig: signal.Signals) -> None:
        acted.append(1)
        if len(acted) == 1:
            raise RuntimeError("the first reload failed")

    relay = SignalRelay({signal.SIGHUP: flaky})
    relay.start()
    try:
        with caplog.at_level(logging.ERROR, logger="processor.service.signals"):
            os.kill(os.getpid(), signal.SIGHUP)
            wait_for(lambda: len(acted) == 1, timeout=10)
            os.kill(os.getpid(), signal.SIGHUP)
            wait_for(lambda: len(acted) == 2, timeout=10)
    finally:
        relay.stop()
    assert "acting on SIGHUP failed" in caplog.text
