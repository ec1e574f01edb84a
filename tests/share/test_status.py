"""What the user sees of shared memory: `engram status`, `engram doctor` and the viewer show the sync's lag and
its last error with the fix; memory_expand and the viewer say which machine or teammate a memory came from."""

from __future__ import annotations

import threading
import time

from bench.testbed.pg_cluster import free_port
from processor.doctor import run_checks
from processor.memory.episode_store import EpisodeStore
from processor.recall.format import format_expansion
from processor.share import commands
from processor.share.sync import ShareThread, Sharing
from processor.status import collect_status, format_status
from processor.store import open_store
from processor.store import share as share_sql
from tests.support.share_fixtures import Machine, SharedSetup, seed_memories, sync
from tests.support.viewer_fixtures import ViewerServer


def test_status_doctor_and_viewer_show_the_last_error_with_its_fix(shared: SharedSetup) -> None:
    alice = shared.person("alice", granted=False)
    home = shared.tmp / "home-down"
    home.mkdir()
    url = f"postgresql://{alice}@127.0.0.1:{free_port()}/{shared.database}"
    (home / "config.toml").write_text(f'shared_database_url = "{url}"\nshare_backoff_max_seconds = 1.0\n')
    machine = Machine("down", home, alice, url, shared.tmp)
    seed_memories(machine, 4)
    stop = threading.Event()
    thread = ShareThread(machine.settings, stop)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            conn = open_store(machine.settings.db_path)
            try:
                if share_sql.state(conn).last_error:
                    break
            finally:
                conn.close()
            time.sleep(0.05)
    finally:
        stop.set()
        thread.stop()
    status = collect_status(machine.settings)["share"]
    assert status["configured"] and status["pending"] == 4
    assert "nothing answers" in status["last_error"] and "host and port" in status["last_error_fix"]
    text = format_status(collect_status(machine.settings))
    assert "last error" in text and "fix: check the host and port" in text
    [check] = [c for c in run_checks({"ENGRAM_HOME": str(home), "HOME": str(shared.tmp)})
               if c.name == "shared memory"]
    assert not check.ok and "nothing answers" in check.detail and "host and port" in (check.fix or "")
    server = ViewerServer(machine.settings)
    try:
        cookie = server.login()
        status_code, _, body = server.request("GET", "/ui/", cookie=cookie)
        page = body.decode()
    finally:
        server.stop()
    assert status_code == 200
    assert 'id="share-error"' in page and "nothing answers" in page and "Fix: check the host and port" in page
    assert "4 changes" in page


def test_lag_is_what_waits_on_either_side(shared: SharedSetup) -> None:
    shared.init()
    alice = shared.person("alice")
    a, b = shared.machine("a", alice), shared.machine("b", alice)
    seed_memories(a, 7)
    seed_memories(b, 0)
    assert commands.status(a.settings).data["pending"] == 7
    sync(a)
    before = commands.status(b.settings)
    assert before.data["server_waiting"] == 7 and before.data["pending"] == 0
    assert any("7 changes on the server not pulled yet" in line for line in before.lines)
    sync(b)
    after = commands.status(b.settings).data
    assert after["server_waiting"] == 0 and after["seconds_since_sync"] is not None


def test_expand_and_the_viewer_say_where_a_memory_came_from(shared: SharedSetup) -> None:
    shared.init()
    alice = shared.person("alice")
    a, b = shared.machine("a", alice), shared.machine("b", alice)
    store_a = EpisodeStore(a.settings, open_store(a.settings.db_path))
    memory_id, _ = store_a.remember("The docs site deploys from the gh-pages branch.", kind="fact",
                                    project="/work/docs")
    sync(a)
    sync(b)
    machine_a = Sharing(a.settings).machine_id
    expansion = EpisodeStore(b.settings, open_store(b.settings.db_path)).expand(memory_id)
    assert expansion.origin is not None and expansion.origin.startswith("your machine") and machine_a in \
        expansion.origin
    assert f"**Made on:** {expansion.origin}" in format_expansion(expansion)
    assert store_a.expand(memory_id).origin is None  # made here
    server = ViewerServer(b.settings)
    try:
        cookie = server.login()
        status_code, _, body = server.request("GET", f"/ui/memory/{memory_id}", cookie=cookie)
    finally:
        server.stop()
    assert status_code == 200 and 'id="origin"' in body.decode() and machine_a in body.decode()
