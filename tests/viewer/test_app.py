"""The web viewer's endpoints over real HTTP on 127.0.0.1: login, every page, escaping, CSRF, Host, CSP, actions, SSE.

One store is built for the module (fixture transcripts captured by the processor, see viewer_fixtures);
tests that change memories work on memories of their own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from processor.clock import now_ms
from processor.config import SettingsHolder
from processor.hook_kit.hook_io import bite_line
from processor.jobs.queue import JobRunner
from processor.jobs.reviews import REVIEW
from processor.memory.episode_store import EpisodeStore
from processor.recall.digest import write_digest_ids
from processor.recall.injections import ingest
from processor.store import connect, open_store, write_transaction
from processor.store import episodes as episodes_sql
from processor.store import viewer as viewer_sql
from processor.viewer.auth import Sessions, same_origin
from tests.support.viewer_fixtures import SCRIPT_SID, ViewerServer, World, build_world

PAGES = ["/ui/", "/ui/search?q=checkout", "/ui/project?p=x", f"/ui/session/{SCRIPT_SID}",
         f"/ui/session/{SCRIPT_SID}/items?m=0&e=0&i=0", "/ui/memory/ep_x", "/ui/spend", "/ui/reviews",
         "/ui/events", "/ui/static/viewer.css", "/ui/static/viewer.js", "/ui/nope"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("viewer")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENGRAM_HOME", str(tmp / "home"))
        for name in list(os.environ):
            if name.startswith("ENGRAM_") and name not in ("ENGRAM_HOME", "ENGRAM_MODELS_DIR"):
                mp.delenv(name)
        (tmp / "projects").mkdir()
        mp.setenv("ENGRAM_PROJECTS_DIR", str(tmp / "projects"))
        yield build_world(tmp / "home", tmp / "projects", tmp)


@pytest.fixture(scope="module")
def server(world: World) -> Iterator[ViewerServer]:
    srv = ViewerServer(world.settings)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def cookie(server: ViewerServer) -> str:
    return server.login()


def html(body: bytes) -> str:
    return body.decode("utf-8")


def new_memory(world: World, text: str) -> str:
    conn = open_store(world.settings.db_path)
    try:
        episode_id, _ = EpisodeStore(SettingsHolder(world.settings), conn).remember(
            text, kind="fact", scope="project", project=world.script_project)
        return episode_id
    finally:
        conn.close()


def status_of(world: World, episode_id: str) -> tuple[str, str]:
    conn = connect(world.settings.db_path)
    try:
        ep = episodes_sql.get_episode(conn, episode_id)
        assert ep is not None
        return ep.status, ep.importance
    finally:
        conn.close()


# --- authentication -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES)
def test_every_path_needs_the_session_cookie(server: ViewerServer, path: str) -> None:
    for cookie in (None, "engram_viewer=forged-session-id", "other=1"):
        status, headers, body = server.request("GET", path, cookie=cookie)
        assert status == 401, (path, cookie)
        assert "engram open" in html(body)
        assert "set-cookie" not in headers


def test_login_link_works_once_and_sets_an_httponly_strict_cookie(server: ViewerServer) -> None:
    url = server.viewer.login_url(server.port)
    assert url.startswith(f"http://127.0.0.1:{server.port}/ui/login?token=")
    path = url.removeprefix(server.origin)
    status, headers, _ = server.request("GET", path)
    assert status == 303 and headers["location"] == "/ui/"
    attributes = [part.strip() for part in headers["set-cookie"].split(";")]
    assert {"HttpOnly", "SameSite=Strict", "Path=/ui/"} <= set(attributes)
    cookie = attributes[0]
    assert server.request("GET", "/ui/", cookie=cookie)[0] == 200
    again = server.request("GET", path)
    assert again[0] == 401 and "set-cookie" not in again[1]
    assert server.request("GET", "/ui/login?token=made-up")[0] == 401
    assert server.request("POST", path)[0] == 405


def test_login_tokens_and_sessions_expire() -> None:
    now = [1000.0]
    sessions = Sessions(login_ttl=60, session_ttl=3600, clock=lambda: now[0])
    late = sessions.mint_login()
    now[0] += 61
    assert sessions.redeem(late) is None
    session_id = sessions.redeem(sessions.mint_login())
    assert session_id and sessions.valid(f"engram_viewer={session_id}")
    now[0] += 3601
    assert not sessions.valid(f"engram_viewer={session_id}")


def test_login_url_comes_from_the_bearer_authenticated_json_api(server: ViewerServer) -> None:
    status, _, body = server.request("POST", "/viewer/login")
    assert status == 401  # no bearer token
    token = (server.server.run_dir / "token").read_text().strip()
    status, _, body = server.request("POST", "/viewer/login", headers={"Authorization": f"Bearer {token}"})
    assert status == 200
    url = json.loads(body)["url"]
    assert server.request("GET", url.removeprefix(server.origin))[0] == 303
    # A web page cannot fetch a login link for itself: the JSON API refuses browser requests.
    status, _, _ = server.request("POST", "/viewer/login", headers={
        "Authorization": f"Bearer {token}", "Origin": "http://evil.example"})
    assert status == 403


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "127.0.0.1.evil.example", ""])
def test_a_foreign_host_header_is_refused(server: ViewerServer, cookie: str, host: str) -> None:
    # DNS rebinding: a page on evil.example resolved to 127.0.0.1 still sends its own name as Host.
    for path in ("/ui/", f"/ui/login?token={server.viewer.sessions.mint_login()}"):
        status, _, _ = server.request("GET", path, cookie=cookie, headers={"Host": host})
        assert status == 403


# --- pages ----------------------------------------------------------------------------------------


def test_every_answer_has_a_strict_csp_and_no_external_or_inline_code(server: ViewerServer, cookie: str,
                                                                      world: World) -> None:
    pages = ["/ui/", "/ui/search?q=checkout+tests", f"/ui/project?p={world.script_project}",
             f"/ui/session/{SCRIPT_SID}", f"/ui/memory/{world.memory_id}", "/ui/spend", "/ui/reviews", "/ui/nope"]
    for path in pages + ["/ui/static/viewer.css", "/ui/static/viewer.js"]:
        status, headers, body = server.request("GET", path, cookie=cookie)
        assert status == (404 if path == "/ui/nope" else 200), path
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe" not in csp
        assert "frame-ancestors 'none'" in csp and "form-action 'self'" in csp
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["cache-control"] == "no-store"
        if path in pages:
            text = html(body)
            assert headers["content-type"] == "text/html; charset=utf-8"
            assert re.findall(r"<script(?![^>]*\bsrc=\"/ui/static/viewer\.js\")", text) == [], path
            assert " style=" not in text and "<style" not in text
            assert not re.search(r"(?:src|href|action)=\"(?:https?:)?//", text), path


def test_a_transcript_with_a_script_tag_renders_as_text(server: ViewerServer, cookie: str, world: World) -> None:
    escaped = "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;"
    _, _, timeline = server.request("GET", f"/ui/session/{SCRIPT_SID}", cookie=cookie)
    _, _, items = server.request("GET", f"/ui/session/{SCRIPT_SID}/items?m=0&e=0&i=0", cookie=cookie)
    _, _, search = server.request("GET", "/ui/search?q=" + "alert+pwned+checkout+staging", cookie=cookie)
    conn = connect(world.settings.db_path)
    source_episode = next(e for e in viewer_sql.session_episodes(conn, SCRIPT_SID) if "pwned" in e.summary)
    conn.close()
    _, _, memory = server.request("GET", f"/ui/memory/{source_episode.id}", cookie=cookie)
    for page in (html(timeline), json.loads(items)["html"], html(search), html(memory)):
        assert escaped in page
        assert "<script>alert" not in page and "<b>bold?</b>" not in page
        assert "&lt;/pre&gt;&lt;b&gt;bold?&lt;/b&gt;" in page


def test_home_and_project_pages_list_what_was_captured(server: ViewerServer, cookie: str, world: World) -> None:
    _, _, body = server.request("GET", "/ui/", cookie=cookie)
    home = html(body)
    assert world.script_project in home and ">/Users/dain/workspace/claude-code-log<" in home
    _, _, body = server.request("GET", f"/ui/project?p={world.script_project}", cookie=cookie)
    project = html(body)
    assert f"/ui/session/{SCRIPT_SID}" in project
    assert "<th scope=\"col\">Agent</th>" in project and "<td>Claude Code</td>" in project  # each session's agent
    assert "shop-api checkout tests are flaky unless time is frozen" in project
    injections = project[project.index("Newest injections"):project.index("History: newest memories")]
    assert "answering: <q>&lt;script&gt;" in injections and f"(id: {world.memory_id})" in injections
    # What Engram tells unasked leads the page, grouped, each with where it came from and how often it was told.
    told = project[project.index("What Engram tells"):project.index("<h2>Sessions")]
    assert "<h3>Remembered</h3>" in told and "shop-api checkout tests are flaky unless time is frozen" in told
    assert "told 1 time in 1 session" in told and "(part " not in told  # never a verbatim round


def test_a_memory_marked_wrong_from_the_project_page_is_never_told_again(server: ViewerServer, cookie: str,
                                                                         world: World) -> None:
    store = EpisodeStore(world.settings, connect(world.settings.db_path))
    memory_id, _ = store.remember("The staging deploy needs the VPN: run `vpn up` before `make deploy`.",
                                  kind="gotcha", project=world.script_project)
    store.conn.close()
    back = f"/ui/project?p={quote(world.script_project, safe='')}"
    page = html(server.request("GET", back, cookie=cookie)[2])
    assert memory_id in page[page.index("What Engram tells"):page.index("<h2>Sessions")]
    status, headers, _ = server.post(f"/ui/memory/{memory_id}/wrong", cookie,
                                     f"back={quote(back, safe='')}&reason=marked+wrong")
    assert status == 303 and headers["location"] == f"{back}&done=wrong"
    assert status_of(world, memory_id)[0] == "forgotten"
    page = html(server.request("GET", headers["location"], cookie=cookie)[2])
    assert memory_id not in page[page.index("What Engram tells"):page.index("<h2>Sessions")]
    assert "Done: wrong." in page


def test_timeline_shows_messages_memories_and_recorded_injections(server: ViewerServer, cookie: str,
                                                                   world: World) -> None:
    status, _, body = server.request("GET", f"/ui/session/{SCRIPT_SID}", cookie=cookie)
    assert status == 200
    page = html(body)
    assert "How do we run the shop-api checkout tests without flakiness?" in page
    assert '<p class="meta">Claude Code · Project:' in page
    assert "memory built (verbatim" in page
    # The bites the real hook injected, as the agent read them, with the message they answered.
    injection = page[page.index("injected bites"):]
    assert "answering: <q>&lt;script&gt;" in injection
    assert f"(id: {world.memory_id})" in injection
    assert "SessionStart digest" in page and "Engram digest: &lt;b&gt;checkout&lt;/b&gt;" in page
    order = [page.index(s) for s in ("msg-25", "inj-1")] if "msg-25" in page else []
    assert order == sorted(order)
    assert server.request("GET", "/ui/session/no-such-session", cookie=cookie)[0] == 404


def test_search_is_the_memory_recall_ranking_with_its_parts(server: ViewerServer, cookie: str,
                                                            world: World) -> None:
    query = "checkout tests flaky freezegun"
    conn = connect(world.settings.db_path)
    try:
        hits = EpisodeStore(SettingsHolder(world.settings), conn).recall(query, limit=20)
    finally:
        conn.close()
    status, _, body = server.request("GET", "/ui/search?q=checkout+tests+flaky+freezegun", cookie=cookie)
    page = html(body)
    assert status == 200 and hits
    shown = re.findall(r'<a href="/ui/memory/(ep_[0-9a-f]+)">', page)
    assert shown == [h.id for h in hits]
    scores = re.findall(r"<dt>score</dt><dd>([0-9.]+)</dd>", page)
    assert [round(float(s), 4) for s in scores] == [round(h.score, 4) for h in hits]
    for part in ("relevance", "cosine", "BM25", "recency + frequency"):
        assert f"<dt>{part}</dt>" in page
    first = hits[0]
    line = bite_line({"id": first.id, "bite": first.bite, "date": first.date, "importance": first.importance})
    assert line is not None and line.replace("'", "&#39;") in page
    assert "&lt;engram-recollection&gt;" in page  # the context the hook would inject, as text
    project_only = html(server.request("GET", "/ui/search?q=checkout&project=/nowhere", cookie=cookie)[2])
    assert "No memory matches." in project_only


def test_memory_page_shows_sources_versions_and_entities(server: ViewerServer, cookie: str, world: World) -> None:
    _, _, body = server.request("GET", f"/ui/memory/{world.new_version}", cookie=cookie)
    page = html(body)
    assert "moved behind pgbouncer on port 6543" in page
    assert f'href="/ui/memory/{world.old_version}"' in page  # the version it replaced
    _, _, body = server.request("GET", f"/ui/memory/{world.old_version}", cookie=cookie)
    old = html(body)
    assert "Superseded by" in old and world.new_version in old and 'id="restore"' not in old
    conn = connect(world.settings.db_path)
    verbatim = viewer_sql.session_episodes(conn, SCRIPT_SID)[0]
    conn.close()
    _, _, body = server.request("GET", f"/ui/memory/{verbatim.id}", cookie=cookie)
    page = html(body)
    assert f"{SCRIPT_SID}.jsonl</code> at byte 0" in page  # the transcript line it came from
    assert "Freeze time with freezegun" in page
    assert server.request("GET", "/ui/memory/ep_missing", cookie=cookie)[0] == 404


def test_spend_page_shows_calls_per_day_budget_breaker_queue_and_failures(server: ViewerServer,
                                                                          cookie: str) -> None:
    _, _, body = server.request("GET", "/ui/spend", cookie=cookie)
    page = html(body)
    assert page.count("<rect ") == 3  # three days with calls
    assert "of $0.50" in page and "breaker" in page
    assert "HTTP 503 &lt;upstream&gt; overloaded" in page
    assert "model answered &lt;not json&gt;" in page
    assert "extraction" in page


def test_reviews_are_listed_escaped_and_answered_through_the_review_job(server: ViewerServer, cookie: str,
                                                                         world: World) -> None:
    _, _, body = server.request("GET", "/ui/reviews", cookie=cookie)
    page = html(body)
    assert "Is this memory still true?" in page and "app/&lt;sessions&gt;.py" in page and "<sessions>" not in page
    assert "Rewrite it (SessionStore.load → SessionStore.fetch)" in page and "3f2a1c9" in page
    assert f'action="/ui/reviews/{world.review_id}/choose"' in page
    assert server.post(f"/ui/reviews/{world.review_id}/choose", cookie, "option=9")[0] == 400
    assert server.post("/ui/reviews/99999/choose", cookie, "option=1")[0] == 404
    assert server.post(f"/ui/reviews/{world.review_id}/choose", cookie, "option=2", origin=None)[0] == 403
    status, headers, _ = server.post(f"/ui/reviews/{world.review_id}/choose", cookie, "option=2")  # mark stale
    assert status == 303 and headers["location"] == f"/ui/reviews?done={world.review_id}"
    # The choice and its review job were stored together; the processor's worker applies it.
    JobRunner(world.settings, backend=None).run_until_idle(sweep=False, only={REVIEW})
    assert status_of(world, world.review_memory)[0] == "stale"
    _, _, body = server.request("GET", "/ui/reviews", cookie=cookie)
    assert f"review-{world.review_id}" not in html(body) and "No open reviews" in html(body)
    assert server.post(f"/ui/reviews/{world.review_id}/choose", cookie, "option=3")[0] == 409


# --- actions --------------------------------------------------------------------------------------


@pytest.mark.parametrize("origin", [None, "http://evil.example", "null", "http://localhost:1"])
def test_state_changes_without_a_same_origin_post_are_refused(server: ViewerServer, cookie: str, world: World,
                                                              origin: str | None) -> None:
    episode_id = new_memory(world, f"refused change {origin} keeps this memory active")
    status, _, _ = server.post(f"/ui/memory/{episode_id}/forget", cookie, origin=origin)
    assert status == 403
    assert server.request("GET", f"/ui/memory/{episode_id}/forget", cookie=cookie)[0] == 404
    status, _, _ = server.request("POST", f"/ui/memory/{episode_id}/forget", body=b"", headers={
        "Origin": server.origin, "Sec-Fetch-Site": "cross-site", "Cookie": cookie})
    assert status == 403
    # Without the cookie a same-origin POST is refused too.
    assert server.post(f"/ui/memory/{episode_id}/forget", "", origin="same")[0] == 401
    assert status_of(world, episode_id) == ("active", "normal")


def test_same_origin_rules() -> None:
    assert same_origin("http://127.0.0.1:9", "127.0.0.1:9", None)
    assert same_origin("http://localhost:9", "localhost:9", "same-origin")
    assert not same_origin("http://localhost:9", "127.0.0.1:9", None)
    assert not same_origin("http://127.0.0.1:9", "127.0.0.1:9", "same-site")
    assert not same_origin(None, "127.0.0.1:9", None)


def test_mark_stale_restore_edit_importance_and_forget(server: ViewerServer, cookie: str, world: World) -> None:
    episode_id = new_memory(world, "the viewer can change this memory's status and importance")
    status, headers, _ = server.post(f"/ui/memory/{episode_id}/stale", cookie)
    assert status == 303 and headers["location"] == f"/ui/memory/{episode_id}?done=stale"
    assert status_of(world, episode_id) == ("stale", "normal")
    assert server.post(f"/ui/memory/{episode_id}/stale", cookie)[0] == 409
    assert server.post(f"/ui/memory/{episode_id}/restore", cookie)[0] == 303
    assert status_of(world, episode_id) == ("active", "normal")
    assert server.post(f"/ui/memory/{episode_id}/importance", cookie, "importance=high")[0] == 303
    assert status_of(world, episode_id) == ("active", "high")
    assert server.post(f"/ui/memory/{episode_id}/importance", cookie, "importance=%3Cb%3E")[0] == 400
    assert server.post(f"/ui/memory/{episode_id}/explode", cookie)[0] == 404
    assert server.post(f"/ui/memory/{episode_id}/forget", cookie)[0] == 303
    assert status_of(world, episode_id)[0] == "forgotten"
    page = html(server.request("GET", f"/ui/memory/{episode_id}", cookie=cookie)[2])
    assert "its content is gone" in page and "status and importance" not in page
    assert server.post("/ui/memory/ep_missing/forget", cookie)[0] == 404
    assert server.post(f"/ui/memory/{episode_id}/stale", cookie, "x" * 5000)[0] == 413


def test_read_only_viewer_shows_pages_but_refuses_changes(world: World) -> None:
    srv = ViewerServer(world.settings, read_only=True)
    try:
        cookie = srv.login()
        page = html(srv.request("GET", f"/ui/memory/{world.memory_id}", cookie=cookie)[2])
        assert "read-only" in page
        assert srv.post(f"/ui/memory/{world.memory_id}/forget", cookie)[0] == 403
        assert status_of(world, world.memory_id)[0] == "active"
    finally:
        srv.stop()


# --- injections and live updates ------------------------------------------------------------------


def test_injections_are_recorded_once_from_the_hooks_files(world: World, tmp_path: Path) -> None:
    conn = open_store(world.settings.db_path)
    folder = tmp_path / "recollections"
    folder.mkdir()
    try:
        with write_transaction(conn):
            viewer_sql.record_offer(conn, "s-offer", "u-1", [{"id": "ep_1", "bite": "b", "date": "d",
                                                              "importance": "normal"}], now_ms())
        assert ingest(conn, folder) == 0  # offered, not injected: nothing reached the agent
        (folder / "s-offer.state").write_text('{"lastInjectedMessageUuid":"u-1"}')
        (folder / "s-other.state").write_text('{"lastInjectedMessageUuid":"never-offered"}')
        (folder / "broken.state").write_text("{not json")
        assert ingest(conn, folder) == 1
        assert ingest(conn, folder) == 0  # the state file stays; it is not recorded twice
        write_digest_ids(str(folder), "s-offer", ["ep_1"], "digest <text>")
        assert ingest(conn, folder) == 1
        assert ingest(conn, folder) == 0  # the digest file stays (its ids keep bites apart); recorded once
        rows = viewer_sql.session_injections(conn, "s-offer")
        assert [(r.kind, r.message_uuid) for r in rows] == [("bites", "u-1"), ("digest", None)]
        assert rows[1].content == "digest <text>"
    finally:
        conn.close()


def read_events(port: int, cookie: str, stop_after: float, found: list[str], ready: threading.Event) -> None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=stop_after)
    try:
        sock.sendall(f"GET /ui/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n\r\n".encode())
        data = b""
        deadline = time.monotonic() + stop_after
        while time.monotonic() < deadline and b"event: change" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
            if b"retry:" in data:
                ready.set()
        found.append(data.decode("utf-8", "replace"))
    finally:
        sock.close()


def test_a_new_injection_is_pushed_by_server_sent_events(server: ViewerServer, cookie: str, world: World) -> None:
    found: list[str] = []
    ready = threading.Event()
    reader = threading.Thread(target=read_events, args=(server.port, cookie, 20.0, found, ready))
    reader.start()
    assert ready.wait(10)
    conn = open_store(world.settings.db_path)
    try:
        before = viewer_sql.cursor(conn)
        write_digest_ids(str(world.settings.recollections_dir), SCRIPT_SID, [], "a live digest")
        assert ingest(conn, world.settings.recollections_dir) == 1
    finally:
        conn.close()
    reader.join(25)
    stream = found[0]
    assert stream.startswith("HTTP/1.0 200") and "text/event-stream" in stream
    event = json.loads(stream.split("event: change\ndata: ", 1)[1].split("\n", 1)[0])
    assert event["sessions"] == [SCRIPT_SID] and event["new"]["injections"] == 1
    _, _, body = server.request("GET", f"/ui/session/{SCRIPT_SID}/items?m={before.message_id}"
                                       f"&e={before.episode_rowid}&i={before.injection_id}", cookie=cookie)
    items = json.loads(body)
    assert items["count"] == 1 and "a live digest" in items["html"] and items["i"] == event["i"]


def test_a_long_timeline_is_paged_newest_first(server: ViewerServer, cookie: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from processor.viewer import app

    monkeypatch.setattr(app, "TIMELINE_PAGE_MESSAGES", 2)
    page = html(server.request("GET", f"/ui/session/{SCRIPT_SID}", cookie=cookie)[2])
    shown = re.findall(r'<li id="msg-(\d+)"', page)
    assert len(shown) == 2 and 'data-live="on"' in page
    assert "The staging database sits behind pgbouncer" in page and "without flakiness?</div>" not in page
    earlier = re.search(r'href="(/ui/session/[^"]+\?before=(\d+))" id="earlier"', page)
    assert earlier is not None and earlier.group(2) == shown[0]
    older = html(server.request("GET", earlier.group(1), cookie=cookie)[2])
    assert re.findall(r'<li id="msg-(\d+)"', older) == [str(int(shown[0]) - 2), str(int(shown[0]) - 1)]
    assert "without flakiness?</div>" in older and 'data-live="on"' not in older
    assert "Newest messages (live)" in older and 'id="earlier"' not in older
    assert server.request("GET", f"/ui/session/{SCRIPT_SID}?before=x", cookie=cookie)[0] == 400


def test_engram_open_without_a_processor_serves_the_viewer_read_only(world: World) -> None:
    import subprocess
    import sys

    from tests.conftest import REPO

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")},
           "ENGRAM_HOME": str(world.settings.home), "ENGRAM_MODELS_DIR": os.environ["ENGRAM_MODELS_DIR"],
           "ENGRAM_PROJECTS_DIR": str(world.settings.transcripts_root)}
    # Ctrl-C as a terminal gives it: a suite started in the background (nohup, `&`) ignores SIGINT, and the
    # child would inherit that and never see the test's Ctrl-C.
    proc = subprocess.Popen([sys.executable, "-m", "processor.cli", "open", "--no-browser"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.strip().rsplit(" ", 1)[1]
        assert url.startswith("http://127.0.0.1:") and "/ui/login?token=" in url
        import http.client
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        conn = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=30)
        conn.request("GET", f"{parts.path}?{parts.query}")
        answer = conn.getresponse()
        answer.read()
        conn.close()
        assert answer.status == 303
        cookie = answer.getheader("Set-Cookie").split(";")[0]
        conn = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=30)
        conn.request("POST", f"/ui/memory/{world.memory_id}/forget", body=b"",
                     headers={"Cookie": cookie, "Origin": f"http://127.0.0.1:{parts.port}"})
        refused = conn.getresponse()
        assert refused.status == 403 and b"read-only" in refused.read()
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=30)
        conn.request("GET", f"/ui/session/{SCRIPT_SID}", headers={"Cookie": cookie})
        timeline = conn.getresponse()
        assert timeline.status == 200 and b"injected bites" in timeline.read()
        conn.close()
    finally:
        proc.send_signal(2)  # Ctrl-C
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "not running; serving the viewer read-only" in err and "Traceback" not in err
