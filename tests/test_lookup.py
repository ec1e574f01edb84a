"""`engram recall`, `engram expand` and `engram status` ask the running processor, and print the same thing
when they have to do the work themselves.

Done when: with `engram run` up, the commands are answered over the control plane without loading numpy,
apsw or the model; their output is byte for byte what the command prints with the processor stopped; and a
processor that stops between the check and the request, a stale port file, a stale token or a busy
processor all end in the command's own search, with the same output.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from processor.config import Settings, load_settings
from processor.lookup import expand_output, recall_output
from processor.memory.episode_store import EpisodeStore
from processor.service.control_client import ping
from processor.service.control_files import ensure_token
from processor.service.control_server import ControlServer
from processor.service.pidfile import PidFile
from processor.store import open_store

REPO = Path(__file__).resolve().parents[1]
MEMORIES = (
    ("db", "The staging database is PostgreSQL 16 behind pgbouncer on port 6543"),
    ("deploy", "Deploys go through the release branch; never push to main directly"),
    ("flaky", "Checkout tests are flaky unless time is frozen with freezegun"),
)
QUERY = "which port does the staging database use"
# Run the command in a process of its own, and report which heavy modules it loaded.
CLI = ("import sys; from processor.cli import main; code = main(sys.argv[1:]); "
       "print('loaded:', sorted(m for m in ('numpy', 'apsw', 'llama_cpp') if m in sys.modules), file=sys.stderr); "
       "sys.exit(code)")


@pytest.fixture
def home(tmp_path: Path, shared_models_dir: Path) -> tuple[Settings, dict[str, str], dict[str, str]]:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (tmp_path / "projects").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(ENGRAM_HOME=str(home), ENGRAM_MODELS_DIR=str(shared_models_dir),
               ENGRAM_PROJECTS_DIR=str(tmp_path / "projects"), ENGRAM_HTTP_PORT="0")
    settings = load_settings(env=env)
    store = EpisodeStore(settings, open_store(settings.db_path))
    ids = {key: store.remember(text, kind="fact", scope="global")[0] for key, text in MEMORIES}
    store.conn.close()
    return settings, ids, env


def engram(env: dict[str, str], *args: str) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-c", CLI, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


@pytest.fixture
def start_processor(home) -> Iterator:
    settings, _, env = home
    started: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-m", "processor.cli", "run"], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        started.append(proc)
        deadline = time.monotonic() + 120
        while (ping(settings.run_dir, timeout=1) or {}).get("memory_backlog", 1) != 0:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_served_by_the_running_processor_with_the_output_of_the_commands_own_search(home, start_processor) -> None:
    settings, ids, env = home
    # The command's own search first: no access has been counted yet, so the ranking is the one served next.
    local_text, local_loaded = engram(env, "recall", QUERY)
    local_json, _ = engram(env, "recall", QUERY, "--json", "--limit", "2")
    assert "pgbouncer" in local_text and "'numpy'" in local_loaded

    proc = start_processor()
    served_text, served_loaded = engram(env, "recall", QUERY)
    served_json, _ = engram(env, "recall", QUERY, "--json", "--limit", "2")
    status_text, status_loaded = engram(env, "status")
    status_json, _ = engram(env, "status", "--json")
    assert (served_text, served_json) == (local_text, local_json)
    assert "loaded: []" in served_loaded and "loaded: []" in status_loaded  # answered over the control plane
    assert json.loads(status_json)["jobs"]["extractor"] == "verbatim" and "episodes: 3" in status_text

    expanded_text, expanded_loaded = engram(env, "expand", ids["db"])
    expanded_json, _ = engram(env, "expand", ids["db"], "--json")
    assert "loaded: []" in expanded_loaded and "**Full context:**" in expanded_text
    stop(proc)
    assert engram(env, "expand", ids["db"])[0] == expanded_text
    assert engram(env, "expand", ids["db"], "--json")[0] == expanded_json


def test_an_unknown_id_reads_the_same_whether_the_processor_runs_or_not(home, start_processor) -> None:
    settings, _, env = home
    command = [sys.executable, "-m", "processor.cli", "expand", "ep_nosuchmemory"]
    alone = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    start_processor()
    served = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert (served.returncode, served.stdout, served.stderr) == (alone.returncode, alone.stdout, alone.stderr)
    assert alone.returncode == 1 and "no memory with id 'ep_nosuchmemory'" in alone.stderr


# --- what can go wrong between the command and the processor, in-process ---------------------------


def same_as_alone(settings: Settings, item_id: str, scenario) -> None:
    """The commands print, within `scenario`, what they print with no processor at all. Recall is compared
    before any expansion (an expansion counts an access, which ranking weighs)."""
    def recalls() -> tuple[str, str]:
        return (recall_output(settings, QUERY, limit=3, project=None, as_json=False),
                recall_output(settings, QUERY, limit=3, project=None, as_json=True))

    def expansions() -> tuple[str, str]:
        return expand_output(settings, item_id, as_json=False), expand_output(settings, item_id, as_json=True)

    alone = recalls()
    assert "pgbouncer" in alone[0]
    with scenario():
        assert recalls() == alone
    alone = expansions()
    with scenario():
        assert expansions() == alone


@contextlib.contextmanager
def port_of_a_stopped_processor(settings: Settings) -> Iterator[None]:
    """The instance lock is held and the port published, but the listener is gone when the request comes."""
    with PidFile(settings.run_dir):
        ensure_token(settings.run_dir)
        gone = socket.socket()
        gone.bind(("127.0.0.1", 0))
        (settings.run_dir / "engram.port").write_text(f"{gone.getsockname()[1]}\n")
        gone.close()
        yield


@contextlib.contextmanager
def a_processor_dying_mid_request(settings: Settings) -> Iterator[None]:
    """It accepts the connection, reads the request and is gone before it answers."""
    with PidFile(settings.run_dir), socket.socket() as dying:
        ensure_token(settings.run_dir)
        dying.bind(("127.0.0.1", 0))
        dying.listen(16)
        dying.settimeout(0.1)
        (settings.run_dir / "engram.port").write_text(f"{dying.getsockname()[1]}\n")
        done = threading.Event()

        def accept_and_drop() -> None:
            while not done.is_set():
                try:
                    conn, _ = dying.accept()
                except TimeoutError:
                    continue
                conn.recv(65536)
                conn.close()

        thread = threading.Thread(target=accept_and_drop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(timeout=5)


def test_a_processor_that_stops_between_the_check_and_the_request(home) -> None:
    settings, ids, _ = home
    same_as_alone(settings, ids["db"], lambda: port_of_a_stopped_processor(settings))
    same_as_alone(settings, ids["db"], lambda: a_processor_dying_mid_request(settings))


def test_a_stale_port_or_token_file_and_a_failing_processor(home) -> None:
    settings, ids, _ = home
    served: list[str] = []

    def failing(body: dict) -> dict:
        served.append(body.get("query") or body.get("id"))
        raise RuntimeError("the processor failed")

    @contextlib.contextmanager
    def stale_port() -> Iterator[None]:
        # A port file left by a processor that crashed (no lock held): nobody is asked, no token is sent.
        settings.run_dir.mkdir(parents=True, exist_ok=True)
        (settings.run_dir / "engram.port").write_text("1\n")
        yield

    @contextlib.contextmanager
    def processor(stale_token: bool) -> Iterator[None]:
        routes = {("POST", "/recall"): failing, ("POST", "/expand"): failing}
        with PidFile(settings.run_dir), ControlServer(settings.run_dir, port=0, routes=routes) as control:
            if stale_token:  # the file was replaced since the processor read it
                (settings.run_dir / "token").write_text(("y" if control.token[0] != "y" else "z") * 43 + "\n")
            yield

    same_as_alone(settings, ids["db"], stale_port)
    same_as_alone(settings, ids["db"], lambda: processor(stale_token=True))
    assert served == []  # a wrong token: refused before any route runs
    same_as_alone(settings, ids["db"], lambda: processor(stale_token=False))
    assert served == [QUERY, QUERY, ids["db"], ids["db"]]  # asked, it failed: the command searched itself
