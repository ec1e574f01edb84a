"""The viewer in real headless Chromium, served by a real processor: log in, search, forget, see a live injection.

Needs Debian's ``chromium`` (``apt-get install -y chromium``); skipped, saying so, where it is absent.
Screenshots of every page are saved in ``$ENGRAM_TEST_ARTIFACTS`` (default ``test-artifacts/viewer/``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.testbed.transcripts import user_line
from processor.store import connect
from processor.store import episodes as episodes_sql
from processor.store import viewer as viewer_sql
from tests.conftest import REPO
from tests.support.cdp import Browser, Page, find_chromium
from tests.support.viewer_fixtures import SCRIPT_SID, World, build_world, iso, run_hook

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (apt-get update && apt-get install -y chromium)")
LOADED = "document.readyState === 'complete' && document.getElementById('main') !== null"
REAL_SESSION = "71c9afe9-d9cc-4583-86b3-e62ba682b83a"  # one of the captured fixture transcripts
ARTIFACTS = Path(os.environ.get("ENGRAM_TEST_ARTIFACTS", REPO / "test-artifacts")) / "viewer"


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


@pytest.fixture
def served(tmp_path: Path, engram_home: Path, projects_dir: Path) -> Iterator[tuple[World, str, dict[str, str]]]:
    """The fixture store, a real processor serving it, and the login URL `engram open` printed."""
    world = build_world(engram_home, projects_dir, tmp_path)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")},
           "ENGRAM_HOME": str(engram_home), "ENGRAM_PROJECTS_DIR": str(projects_dir), "ENGRAM_HTTP_PORT": "0",
           "ENGRAM_MODELS_DIR": os.environ["ENGRAM_MODELS_DIR"]}
    proc = subprocess.Popen([sys.executable, "-m", "processor.cli", "run"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (engram_home / "run" / "engram.port").exists() or proc.poll() is not None, 60,
                 "processor start")
        assert proc.poll() is None, proc.communicate()
        opened = subprocess.run([sys.executable, "-m", "processor.cli", "open", "--no-browser"], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=60)
        assert opened.returncode == 0, opened.stderr
        url = opened.stdout.strip().rsplit(" ", 1)[1]
        assert url.startswith("http://127.0.0.1:") and "/ui/login?token=" in url
        yield world, url, env
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    assert CHROMIUM is not None
    browser = Browser(CHROMIUM, tmp_path / "chromium-profile")
    try:
        yield browser.start()
    finally:
        browser.stop()


def shot(page: Page, name: str) -> None:
    page.screenshot(ARTIFACTS / f"{name}.png")


def press_enter(page: Page) -> None:
    page.press("Enter", "Enter", 13)


def test_log_in_search_open_forget_and_see_a_live_injection(served: tuple[World, str, dict[str, str]],
                                                           page: Page) -> None:
    world, url, _env = served
    origin = url.split("/ui/", 1)[0]

    # Log in through the one-time link: the token leaves the address bar, the cookie is invisible to scripts.
    page.navigate(url)
    assert page.evaluate("location.pathname + location.search") == "/ui/"
    assert page.evaluate("document.cookie") == ""
    assert page.evaluate("document.querySelector('h1').textContent") == "What Engram remembers"
    shot(page, "home")
    page.navigate(url)  # the link works once
    assert "used or expired" in page.evaluate("document.body.innerText")
    page.navigate(origin + "/ui/")

    # Search from the keyboard: "/" focuses the search box, Enter submits.
    page.wait_for("document.readyState === 'complete'")
    page.press("/", "Slash", 191)
    assert page.evaluate("document.activeElement.id") == "quick-q"
    page.type("staging database pgbouncer")
    press_enter(page)
    page.wait_for(f"location.pathname === '/ui/search' && {LOADED} && document.querySelectorAll('.hit').length > 0",
                  what="search results")
    first = page.evaluate("document.querySelector('.hit a').getAttribute('href')")
    assert first == f"/ui/memory/{world.new_version}"
    assert "recency + frequency" in page.evaluate("document.body.innerText")
    shot(page, "search")

    # Open the memory (keyboard again), then forget it; the confirmation dialog is accepted.
    page.evaluate("document.querySelector('.hit a').focus()")
    press_enter(page)
    page.wait_for(f"location.pathname === '/ui/memory/{world.new_version}' && {LOADED}", what="memory page")
    assert "moved behind pgbouncer" in page.evaluate("document.body.innerText")
    shot(page, "memory")
    page.evaluate("document.getElementById('forget').focus()")
    press_enter(page)
    page.wait_for(f"location.search === '?done=forget' && {LOADED}", what="forget done")
    assert page.evaluate("document.getElementById('status').textContent") == "forgotten"
    assert any(e["method"] == "Page.javascriptDialogOpening" and e["params"]["type"] == "confirm"
               for e in page.events)
    conn = connect(world.settings.db_path, readonly=True)
    forgotten = episodes_sql.get_episode(conn, world.new_version)
    conn.close()
    assert forgotten is not None and forgotten.status == "forgotten"

    conn = connect(world.settings.db_path, readonly=True)
    real = next(e for e in (episodes_sql.get_episode(conn, m.id)
                            for m in viewer_sql.session_episodes(conn, REAL_SESSION))
                if e is not None and e.source_uuids)
    conn.close()
    for name, path in (("project", f"/ui/project?p={world.script_project}"), ("spend", "/ui/spend"),
                       ("fixture-session", f"/ui/session/{REAL_SESSION}"), ("fixture-memory", f"/ui/memory/{real.id}"),
                       ("reviews", "/ui/reviews"), ("memory-versions", f"/ui/memory/{world.old_version}")):
        page.navigate(origin + path)
        shot(page, name)

    # The timeline, live: a new user message is captured by the processor, its bites are injected by the
    # real hook, the processor records the injection, and the page shows it without a reload.
    page.navigate(f"{origin}/ui/session/{SCRIPT_SID}")
    page.wait_for("document.body.dataset.live === 'on'", what="event stream open")
    scripts = page.evaluate("Array.from(document.scripts).map(s => s.getAttribute('src'))")
    assert scripts == ["/ui/static/viewer.js"]  # the <script> in the transcript stayed text
    assert "<script>alert('pwned')</script>" in page.evaluate("document.getElementById('timeline').innerText")
    injections = page.evaluate("document.querySelectorAll('#timeline .injection').length")
    page.evaluate("window.loadedOnce = true")  # gone if the page reloaded
    transcript = next(Path(world.settings.transcripts_root).rglob(f"{SCRIPT_SID}.jsonl"))
    uid = "b0000000-0000-4000-8000-00000000live"
    text = "why does checkout fail with a Stripe connection refused?"
    with transcript.open("a") as fh:
        fh.write(user_line(text, session_id=SCRIPT_SID, uid=uid, cwd=world.script_project,
                           timestamp=iso(int(time.time() * 1000))))
    recollection = world.settings.recollections_dir / f"{SCRIPT_SID}.json"
    wait_for(lambda: recollection.exists() and json.loads(recollection.read_text()).get("messageUuid") == uid,
             60, "the recollection for the new message")
    assert "engram-recollection" in run_hook(world.settings, SCRIPT_SID)
    page.wait_for(f"document.querySelectorAll('#timeline .injection').length === {injections + 1}", timeout=30,
                  what="the new injection on the page")
    assert page.evaluate("window.loadedOnce") is True
    newest = page.evaluate("Array.from(document.querySelectorAll('#timeline .injection')).pop().innerText")
    assert f"answering: {text}" in newest.replace("“", "").replace("”", "").replace('"', "")
    assert f"(id: {world.later_memory})" in newest
    assert text in page.evaluate("document.getElementById('timeline').innerText")  # the message, live too
    assert not any(e["method"] == "Page.javascriptDialogOpening" and e["params"]["type"] == "alert"
                   for e in page.events)
    page.evaluate("document.querySelectorAll('.fresh')[0].scrollIntoView()")
    shot(page, "timeline")

    # Narrow window, dark system setting.
    page.call("Emulation.setDeviceMetricsOverride", width=420, height=900, deviceScaleFactor=1, mobile=True)
    page.call("Emulation.setEmulatedMedia", features=[{"name": "prefers-color-scheme", "value": "dark"}])
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(23, 25, 28)"
    assert page.evaluate("document.documentElement.scrollWidth <= 420")
    shot(page, "timeline-narrow-dark")
