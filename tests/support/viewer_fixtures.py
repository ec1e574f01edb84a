"""A real store for the viewer's tests: fixture transcripts captured by the processor, plus every kind of row.

Two real Claude Code transcripts from ``../shared/fixtures`` and one written here (with a ``<script>`` in a
user message) are captured and turned into episodes by ``Processor.run_once``; then a remembered memory,
a version chain, LLM calls, a failed job, and injections recorded the real way (the recollection writer's
offer, the real PreToolUse hook's state file, the SessionStart digest marker, ``ingest``).
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.testbed.transcripts import assistant_line, user_line
from processor.clock import now_ms
from processor.config import Settings, SettingsHolder, load_settings
from processor.jobs.reviews import open_review, review_options
from processor.memory.episode_store import EpisodeStore
from processor.recall.digest import write_digest_ids
from processor.recall.injections import ingest
from processor.recall.recollections import RecollectionWriter
from processor.service.control_server import ControlServer
from processor.service.run_loop import Processor
from processor.store import jobs as jobs_sql
from processor.store import open_store, write_transaction
from processor.store import sessions as sessions_sql
from processor.viewer.app import Viewer
from processor.viewer.serve import LOGIN_PATH, SharedModel, login_route
from tests.conftest import FIXTURE_PROJECTS, REPO

SCRIPT_SID = "5c219700-0000-4000-8000-00000000beef"
SCRIPT_TEXT = "<script>alert('pwned')</script> why does the checkout test time out on staging?"
REAL_TRANSCRIPTS = [
    "-Users-dain-workspace-claude-code-log-sample/71c9afe9-d9cc-4583-86b3-e62ba682b83a.jsonl",
    "-Users-dain-workspace-claude-code-log-sample/326189cf-5676-4237-8cde-1ce80aae4a9f.jsonl",
]


@dataclass
class World:
    settings: Settings
    script_project: str
    prompt_uuid: str
    memory_id: str  # an active remembered memory
    old_version: str  # superseded by new_version
    new_version: str
    review_id: int  # an open inquisitor review of review_memory
    review_memory: str
    later_memory: str  # learned after the first injection: not yet told in the script session


def iso(ms: int) -> str:
    from time import gmtime, strftime

    return strftime("%Y-%m-%dT%H:%M:%S", gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def write_script_session(projects: Path, cwd: Path, start_ms: int) -> tuple[Path, str]:
    folder = projects / "-tmp-shop-api"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{SCRIPT_SID}.jsonl"
    prompt = "b0000000-0000-4000-8000-000000000001"
    lines = [
        user_line("How do we run the shop-api checkout tests without flakiness?", session_id=SCRIPT_SID,
                  cwd=str(cwd), timestamp=iso(start_ms)),
        assistant_line("Freeze time with freezegun; the checkout tests compare timestamps.", session_id=SCRIPT_SID,
                       cwd=str(cwd), message_id="msg_a", timestamp=iso(start_ms + 5000)),
        user_line(SCRIPT_TEXT, session_id=SCRIPT_SID, cwd=str(cwd), uid=prompt, timestamp=iso(start_ms + 60_000)),
        assistant_line("The staging database sits behind pgbouncer on port 6543 </pre><b>bold?</b>",
                       session_id=SCRIPT_SID, cwd=str(cwd), message_id="msg_b", timestamp=iso(start_ms + 65_000)),
    ]
    path.write_text("".join(lines))
    return path, prompt


def run_hook(settings: Settings, session_id: str) -> str:
    """The real PreToolUse hook, as Claude Code runs it; returns its stdout."""
    event = {"session_id": session_id, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {}}
    proc = subprocess.run([sys.executable, "-I", "-S", str(REPO / "recall_hook" / "pretooluse.py")],
                          input=json.dumps(event), capture_output=True, text=True, timeout=30,
                          env={"ENGRAM_HOME": str(settings.home), "HOME": str(settings.home)})
    return proc.stdout


def build_world(home: Path, projects: Path, tmp: Path) -> World:
    """Capture, build memories and record one of everything; returns what the tests look for."""
    for rel in REAL_TRANSCRIPTS:
        target = projects / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURE_PROJECTS / rel, target)
    cwd = tmp / "shop-api"
    (cwd / ".git").mkdir(parents=True, exist_ok=True)
    start = now_ms() - 120_000
    _, prompt_uuid = write_script_session(projects, cwd, start)
    settings = load_settings(overrides={"projects_dir": str(projects)})
    Processor(settings).run_once(None)

    holder = SettingsHolder(settings)
    conn = open_store(settings.db_path)
    store = EpisodeStore(holder, conn)
    project = str(cwd)
    memory_id, _ = store.remember("shop-api checkout tests are flaky unless time is frozen with freezegun",
                                  kind="gotcha", scope="project", project=project)
    old_id, _ = store.remember("The staging database listens on port 5432", kind="fact", scope="project",
                               project=project)
    new_id, _ = store.remember("The staging database moved behind pgbouncer on port 6543", kind="fact",
                               scope="project", project=project)
    from processor.store import episodes as episodes_sql

    with write_transaction(conn):
        episodes_sql.supersede(conn, old_id, new_id, now_ms())
        day = 86_400_000
        for offset, ok, cost in ((3 * day, True, 0.004), (day, True, 0.002), (day, False, 0.0), (0, True, 0.001)):
            jobs_sql.insert_llm_call(conn, jobs_sql.LLMCall(
                None, "extraction", "openai", "gpt-4.1-nano", now_ms() - offset, 900, 1200, 80, cost, ok,
                None if ok else "HTTP 503 <upstream> overloaded"))
        job = jobs_sql.insert_job(conn, "extraction", "extract:demo", 5, {"session_id": SCRIPT_SID}, now_ms())
        assert job is not None
        jobs_sql.finish_job(conn, job, now_ms(), state="failed", note="model answered <not json>")
    # A review as the inquisitor opens one when the code no longer clearly supports a memory.
    review_memory, _ = store.remember("Sessions are kept by `SessionStore.load` in app/<sessions>.py", kind="fact",
                                      scope="project", project=project)
    with write_transaction(conn):
        review_id = open_review(
            conn, episode_id=review_memory, project=project, kind="inquisitor",
            question="Is this memory still true? “Sessions are kept by `SessionStore.load` in app/<sessions>.py”",
            options=review_options((("SessionStore.load", "SessionStore.fetch"),)),
            context="`SessionStore.load` no longer occurs at HEAD; `SessionStore.fetch` appeared in 3f2a1c9",
            commit="3f2a1c9", job_type="inquisitor")

    # An injection, the real way: the writer offers bites for the <script> prompt, the real hook injects them.
    writer = RecollectionWriter(holder)
    written = writer.write(store, SCRIPT_SID, prompt_uuid, SCRIPT_TEXT, project=project)
    assert written is not None, "the recollection writer wrote no file"
    assert "engram-recollection" in run_hook(settings, SCRIPT_SID), "the hook injected nothing"
    write_digest_ids(str(settings.recollections_dir), SCRIPT_SID, [],
                     "Engram digest: <b>checkout</b> tests need freezegun")
    assert ingest(conn, settings.recollections_dir) == 2
    assert sessions_sql.session_activity(conn, SCRIPT_SID) is not None
    # Learned after that injection (each memory is told once a session): what a later message may bring.
    later_id, _ = store.remember("The shop-api checkout tests call the Stripe stub: start it with `make stripe-mock`",
                                 kind="gotcha", scope="project", project=project)
    conn.close()
    return World(settings, project, prompt_uuid, memory_id, old_id, new_id, review_id, review_memory, later_id)


class ViewerServer:
    """The viewer on a real ControlServer on 127.0.0.1, as the processor serves it."""

    def __init__(self, settings: Settings, *, read_only: bool = False) -> None:
        holder = SettingsHolder(settings)
        self.viewer = Viewer(holder, SharedModel(holder).store, read_only=read_only)
        self.server = ControlServer(settings.run_dir, port=0, ui=self.viewer.handle,
                                    routes={("POST", LOGIN_PATH): login_route(self.viewer, lambda: self.server.port)})
        self.port = self.server.start()
        self.origin = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.viewer.stop_event.set()
        self.server.stop()

    def request(self, method: str, path: str, *, cookie: str | None = None, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            all_headers = dict(headers or {})
            if cookie:
                all_headers["Cookie"] = cookie
            conn.request(method, path, body=body, headers=all_headers)
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            conn.close()

    def login(self) -> str:
        """Log in through a one-time URL; returns the Cookie header to send."""
        url = self.viewer.login_url(self.port)
        status, headers, _ = self.request("GET", url.removeprefix(self.origin))
        assert status == 303, status
        return headers["set-cookie"].split(";")[0]

    def post(self, path: str, cookie: str, form: str = "", origin: str | None = "same") -> tuple[int, dict, bytes]:
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if origin is not None:
            headers["Origin"] = self.origin if origin == "same" else origin
        return self.request("POST", path, cookie=cookie, body=form.encode(), headers=headers)
