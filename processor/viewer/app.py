"""The viewer's pages and endpoints under /ui/: routing, rendering, actions and live updates (SSE).

``Viewer.handle`` is the control server's ``ui`` handler (``processor/service/control_server.py``): it
receives the request handler for every path under ``/ui/`` once the loopback Host check has passed.

- Authentication (``auth.py``): every path but ``/ui/login`` needs the session cookie.
- State changes are POSTs with the cookie and a same-origin ``Origin``; anything else is refused.
- Every template is rendered by Jinja2 with autoescaping on, so captured text is always text.
- Every answer carries a strict Content-Security-Policy: scripts, styles and images from this
  viewer only, no inline script or style, no framing, forms posting here only.
- Live updates: ``/ui/events`` is a server-sent event stream that polls the store's cursor (newest
  message, memory, injection) once a second and names the sessions that changed; the page fetches
  the new timeline rows, rendered by the server like the rest.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import apsw
import jinja2

from processor.clock import now_ms, utc_clock, utc_date
from processor.config import AGENT_NAMES, Settings, SettingsSource
from processor.hook_kit.hook_io import bite_line, format_context
from processor.jobs.review_cli import record_choice
from processor.jobs.status import jobs_status
from processor.memory.bites import bites_for
from processor.memory.episode_store import RECALL_ALSO, EpisodeStore
from processor.memory.errors import EmbedderError, UnknownEpisode
from processor.memory.unasked import CATEGORIES, category
from processor.share.commands import status_of as share_status
from processor.share.connection import configured as share_configured
from processor.store import cold as cold_sql
from processor.store import connect, write_transaction
from processor.store import episodes as episodes_sql
from processor.store import origins as origins_sql
from processor.store import projects as projects_sql
from processor.store import sessions as session_sql
from processor.store import share as share_sql
from processor.store import viewer as sql
from processor.viewer.auth import Sessions, same_origin

log = logging.getLogger(__name__)

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
MAX_FORM_BYTES = 4096
MAX_STREAMS = 8  # live pages at once; each holds one control-plane connection
STREAM_POLL_SECONDS = 1.0
STREAM_MAX_SECONDS = 600.0  # then the browser reconnects by itself: no connection is held forever
SEARCH_LIMIT = 20
TIMELINE_TEXT_CHARS = 4000
TIMELINE_PAGE_MESSAGES = 500  # a page of the timeline; earlier messages are one link away

# (search ranking, one store per request) -> EpisodeStore with the model and vectors already loaded.
StoreFactory = Callable[[apsw.Connection], EpisodeStore]


class _Answer(Exception):
    """Stop handling and answer with this status and message page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    handler: BaseHTTPRequestHandler

    def header(self, name: str) -> str | None:
        return self.handler.headers.get(name)


def _first(values: dict[str, list[str]]) -> dict[str, str]:
    return {key: items[0] for key, items in values.items() if items}


def _ms(value: int | None) -> str:
    return utc_clock(value) if value else "—"


def _bite(ep: episodes_sql.Episode, bite: str | None = None) -> str:
    """The memory as the PreToolUse hook would show it to the agent: its bite for a query, else its summary."""
    return bite_line({"id": ep.id, "bite": ep.summary if bite is None else bite, "date": utc_date(ep.created_at),
                      "importance": ep.importance}) or ""


def _injection_lines(injection: sql.Injection) -> list[str]:
    if injection.kind == "digest":
        return injection.content.splitlines()
    try:
        bites = json.loads(injection.content)
    except ValueError:
        return []
    return [line for line in (bite_line(b) for b in bites if isinstance(bites, list)) if line]


def _client_gone(sock: socket.socket) -> bool:
    """True once the browser closed the stream (left the page): its slot is freed at once, not at the next write."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class Viewer:
    """The web viewer. ``read_only``: served by ``engram open`` while the processor is down."""

    def __init__(self, settings: SettingsSource, make_store: StoreFactory, *, read_only: bool = False,
                 sessions: Sessions | None = None, stop: threading.Event | None = None) -> None:
        self._settings = settings
        self.make_store = make_store
        self.read_only = read_only
        self.sessions = sessions or Sessions()
        self.stop_event = stop or threading.Event()
        self._streams = threading.BoundedSemaphore(MAX_STREAMS)
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("processor.viewer", "templates"),
            autoescape=True,  # every template, whatever its name: captured text is never markup
            undefined=jinja2.StrictUndefined,
            trim_blocks=True, lstrip_blocks=True,
        )
        self.env.filters["ms"] = _ms
        self.env.filters["bite"] = _bite
        self.env.filters["urlq"] = lambda value: quote(str(value or ""), safe="")
        self.env.globals["read_only"] = read_only

    @property
    def settings(self) -> Settings:
        return self._settings.current

    def login_url(self, port: int) -> str:
        return f"http://127.0.0.1:{port}/ui/login?token={self.sessions.mint_login()}"

    # --- the request -------------------------------------------------------------------------

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        request = Request(handler.command, parts.path, _first(parse_qs(parts.query)), handler)
        try:
            self._route(request)
        except _Answer as answer:
            self._page(request, answer.status, "message.html", title=HTTPStatus(answer.status).phrase,
                       message=answer.message)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass
        except Exception:
            log.exception("viewer %s %s failed", request.method, request.path)
            with contextlib.suppress(OSError):
                self._page(request, 500, "message.html", title="Error", message="Internal error; see the engram log.")

    def _route(self, request: Request) -> None:
        path, method = request.path, request.method
        if path == "/ui/login":
            return self._login(request)
        if not self.sessions.valid(request.header("Cookie")):
            raise _Answer(401, "Not logged in. Run `engram open` for a one-time login link.")
        if method == "POST":
            if not same_origin(request.header("Origin"), request.header("Host"), request.header("Sec-Fetch-Site")):
                raise _Answer(403, "Refused: this request did not come from a page of this viewer.")
            parts = path.split("/")  # /ui/memory/<id>/<action>, /ui/reviews/<id>/choose
            if len(parts) == 5 and parts[2] == "memory":
                return self._memory_action(request, parts[3], parts[4])
            if len(parts) == 5 and parts[2] == "reviews" and parts[4] == "choose":
                return self._review_choice(request, parts[3])
            raise _Answer(404, "No such action.")
        if method not in ("GET", "HEAD"):
            raise _Answer(405, "Use GET, or POST for actions.")
        if path in ("/ui", "/ui/"):
            return self._home(request)
        if path == "/ui/search":
            return self._search(request)
        if path == "/ui/project":
            return self._project(request)
        if path == "/ui/spend":
            return self._spend(request)
        if path == "/ui/reviews":
            return self._reviews(request)
        if path == "/ui/events":
            return self._events(request)
        if path.startswith("/ui/static/"):
            return self._static(request, path.removeprefix("/ui/static/"))
        parts = path.split("/")
        if len(parts) == 4 and parts[2] == "session":
            return self._timeline(request, parts[3])
        if len(parts) == 5 and parts[2] == "session" and parts[4] == "items":
            return self._timeline_items(request, parts[3])
        if len(parts) == 4 and parts[2] == "memory":
            return self._memory(request, parts[3])
        raise _Answer(404, "No such page.")

    # --- answers -----------------------------------------------------------------------------

    def _send(self, request: Request, status: int, body: bytes, content_type: str,
              headers: dict[str, str] | None = None) -> None:
        handler = request.handler
        handler.connection.settimeout(self.write_timeout)
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        self._security_headers(handler)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        if request.method != "HEAD":
            handler.wfile.write(body)

    write_timeout = 10.0  # seconds a write to the browser may block

    @staticmethod
    def _security_headers(handler: BaseHTTPRequestHandler) -> None:
        handler.send_header("Content-Security-Policy", CSP)
        handler.send_header("X-Content-Type-Options", "nosniff")
        # Not "no-referrer": with it a browser sends "Origin: null" on a form POST, and the Origin check needs it.
        handler.send_header("Referrer-Policy", "same-origin")
        handler.send_header("Cross-Origin-Opener-Policy", "same-origin")
        handler.send_header("Cross-Origin-Resource-Policy", "same-origin")
        handler.send_header("Cache-Control", "no-store")
        handler.send_header("Connection", "close")

    def render(self, template: str, **context: Any) -> str:
        context.setdefault("nav", "")
        return self.env.get_template(template).render(**context)

    def _page(self, request: Request, status: int, template: str, **context: Any) -> None:
        body = self.render(template, **context).encode("utf-8")
        self._send(request, status, body, "text/html; charset=utf-8")

    def _redirect(self, request: Request, location: str, headers: dict[str, str] | None = None) -> None:
        self._send(request, 303, b"", "text/plain", {"Location": location, **(headers or {})})

    def _conn(self) -> apsw.Connection:
        return connect(self.settings.db_path, readonly=self.read_only)

    # --- login ---------------------------------------------------------------------------------

    def _login(self, request: Request) -> None:
        if request.method != "GET":
            raise _Answer(405, "Open the login link in the browser.")
        session_id = self.sessions.redeem(request.query.get("token", ""))
        if session_id is None:
            raise _Answer(401, "This login link is used or expired. Run `engram open` again.")
        # The redirect takes the token out of the address bar and the history.
        self._redirect(request, "/ui/", {"Set-Cookie": self.sessions.set_cookie(session_id)})

    # --- pages ---------------------------------------------------------------------------------

    def _home(self, request: Request) -> None:
        conn = self._conn()
        try:
            projects = sql.projects(conn)
            counts = episodes_sql.counts_by_status(conn)
            share = share_status(conn, self.settings) if share_configured(self.settings) else None
        finally:
            conn.close()
        self._page(request, 200, "home.html", title="Engram", nav="home", projects=projects, counts=counts,
                   share=share)

    def _search(self, request: Request) -> None:
        query = request.query.get("q", "").strip()[:4000]
        project = request.query.get("project") or None
        results: list[dict[str, Any]] = []
        error = None
        conn = self._conn()
        try:
            projects = [p.project for p in sql.projects(conn) if p.project]
            if query:
                try:
                    store = self.make_store(conn)
                    weights = store.weights
                    found = store.search(query, limit=SEARCH_LIMIT, project=project, also_statuses=RECALL_ALSO)
                    bites = bites_for(query, [s.episode for s in found])
                    for scored, bite in zip(found, bites, strict=True):
                        rest = scored.score - weights.relevance * scored.relevance
                        results.append({"s": scored, "ep": scored.episode, "rest": rest,
                                        "bite": _bite(scored.episode, bite),
                                        "weighted_relevance": weights.relevance * scored.relevance,
                                        "bm25_share": weights.bm25_share})
                except EmbedderError as exc:
                    error = f"Search is unavailable: {exc}"
        finally:
            conn.close()
        # The hook injects active memories only: stale, archived and superseded ones are found, never injected.
        injectable = [r["bite"] for r in results if r["ep"].status == "active"][:3]
        context_preview = format_context(injectable) if injectable else ""
        self._page(request, 200, "search.html", title=f"Search: {query}" if query else "Search", nav="search",
                   query=query, project=project or "", projects=projects, results=results, error=error,
                   context_preview=context_preview)

    def _project(self, request: Request) -> None:
        name = request.query.get("p")
        project = name or None
        conn = self._conn()
        try:
            sessions = sql.project_sessions(conn, project)
            memories = sql.project_memories(conn, project)
            injections = [(inj, _injection_lines(inj)) for inj in sql.project_injections(conn, project)]
            told = self._told(conn, project)
            also = projects_sql.paths_of(conn, project) if project else []  # its worktrees and clones seen
        finally:
            conn.close()
        self._page(request, 200, "project.html", title=project or "(no project)", nav="home", project=project,
                   sessions=sessions, memories=memories, injections=injections, told=told, also=also,
                   notice=request.query.get("done", ""), agents=AGENT_NAMES)

    @staticmethod
    def _told(conn: apsw.Connection, project: str | None) -> list[tuple[str, list[dict[str, Any]]]]:
        """What Engram tells this project's sessions unasked, by category: each memory with where it came from
        and how often it was told."""
        statements = sql.project_statements(conn, project)
        origins = origins_sql.origins(conn, [ep.id for ep in statements])
        counts = sql.told_counts(conn, [ep.id for ep in statements])
        groups: dict[str, list[dict[str, Any]]] = {}
        for ep in statements:
            name = category(ep, origins.get(ep.id))
            if name is not None:
                groups.setdefault(name, []).append({"ep": ep, "origin": origins.get(ep.id) or ep.source_type,
                                                    "told": counts.get(ep.id)})
        return [(name, groups[name]) for name in CATEGORIES if name in groups]

    def timeline_items(self, conn: apsw.Connection, session_id: str, after: sql.Cursor, *,
                       before_message: int | None = None, page: int = 100_000) -> tuple[list[tuple], int | None]:
        """Rows of one session's timeline in time order, and the id of an earlier page's first message, if any.

        A page is the newest `page` messages before `before_message`, with the memories built and the
        injections made in the same time span. Each row is a flat tuple ``(type, dom id, time, a, b, c)``
        the template unpacks: per-row attribute lookups would be most of the template's cost.
        """
        messages = sql.session_messages(conn, session_id, after.message_id, before_message or 1 << 62, page + 1)
        earlier = None
        if len(messages) > page:  # one more than a page exists: older rows go to the earlier page
            messages = messages[1:]
            earlier = messages[0].id
        since = (messages[0].ts_ms or 0) if earlier is not None else 0
        until = (sql.message_time(conn, before_message) or 1 << 62) if before_message else 1 << 62
        rows: list[tuple[int, int, tuple]] = []
        for m in messages:
            rows.append((m.ts_ms or 0, 0, ("message", f"msg-{m.id}", f"{_ms(m.ts_ms)} · {m.role}", m.role,
                                           m.text[:TIMELINE_TEXT_CHARS], len(m.text) > TIMELINE_TEXT_CHARS)))
        for inj in sql.session_injections(conn, session_id, after.injection_id, since, until):
            label = "SessionStart digest" if inj.kind == "digest" else "bites"
            rows.append((inj.injected_at, 1, ("injection", f"inj-{inj.id}",
                                              f"{_ms(inj.injected_at)} · injected {label}", label,
                                              (inj.answered or "")[:300], _injection_lines(inj))))
        for ep in sql.session_episodes(conn, session_id, after.episode_rowid, since, until):
            rows.append((ep.created_at, 2, ("memory", f"ep-{ep.rowid}",
                                            f"{_ms(ep.created_at)} · memory built ({ep.source_type}, {ep.kind}, "
                                            f"{ep.status})", "", ep.id, ep.summary)))
        rows.sort(key=lambda row: (row[0], row[1]))
        return [row[2] for row in rows], earlier

    def timeline_page(self, session_id: str, before: int | None = None) -> str | None:
        """The timeline page of one session (None: no such session); what bench/viewer.py times."""
        conn = self._conn()
        try:
            info = sql.session_info(conn, session_id)
            if info is None:
                return None
            cursor = sql.cursor(conn)
            items, earlier = self.timeline_items(conn, session_id, sql.Cursor(0, 0, 0), before_message=before,
                                                 page=TIMELINE_PAGE_MESSAGES)
        finally:
            conn.close()
        return self.render("timeline.html", title=f"Session {session_id}", nav="home", session_id=session_id,
                           transcript=info[0], project=info[1], agent=AGENT_NAMES.get(info[3], info[3]),
                           items=items, cursor=cursor, earlier=earlier, before=before)

    def _timeline(self, request: Request, session_id: str) -> None:
        before_text = request.query.get("before", "")
        if before_text and not before_text.isdigit():
            raise _Answer(400, "before must be a message number.")
        page = self.timeline_page(session_id, int(before_text) if before_text else None)
        if page is None:
            raise _Answer(404, "No such session.")
        self._send(request, 200, page.encode("utf-8"), "text/html; charset=utf-8")

    def _timeline_items(self, request: Request, session_id: str) -> None:
        try:
            after = sql.Cursor(int(request.query.get("m", 0)), int(request.query.get("e", 0)),
                               int(request.query.get("i", 0)))
        except ValueError:
            raise _Answer(400, "m, e and i must be integers.") from None
        conn = self._conn()
        try:
            cursor = sql.cursor(conn)
            items, _ = self.timeline_items(conn, session_id, after)
        finally:
            conn.close()
        html = self.render("timeline_items.html", items=items)
        body = json.dumps({"html": html, "m": cursor.message_id, "e": cursor.episode_rowid,
                           "i": cursor.injection_id, "count": len(items)}).encode()
        self._send(request, 200, body, "application/json")

    def _memory(self, request: Request, episode_id: str) -> None:
        conn = self._conn()
        try:
            ep = episodes_sql.get_episode(conn, episode_id)
            if ep is None:
                raise _Answer(404, "No memory with this id.")
            sources = sql.source_lines(conn, ep.source_uuids)
            older = sql.predecessors(conn, ep.id)
            newer = sql.successors(conn, ep.id)
            origin = share_sql.origins_of(conn, [ep.id]).get(ep.id)
            agent = session_sql.session_agent(conn, ep.session_id) if ep.session_id else None
        finally:
            conn.close()
        self._page(request, 200, "memory.html", title=f"Memory {ep.id}", nav="", ep=ep, sources=sources,
                   older=older, newer=newer, notice=request.query.get("done", ""),
                   origin=origin.describe() if origin else None,
                   agent=AGENT_NAMES.get(agent, agent) if agent else None)

    def _spend(self, request: Request) -> None:
        conn = self._conn()
        try:
            status = jobs_status(conn, self.settings)
            days = sql.llm_calls_per_day(conn, now_ms() - 30 * 86_400_000)
            failures = sql.recent_failures(conn)
        finally:
            conn.close()
        peak = max((calls for _, calls, _, _ in days), default=0) or 1
        bars = [{"day": day, "calls": calls, "usd": usd, "failed": failed, "x": index * 22,
                 "h": max(2, round(100 * calls / peak))} for index, (day, calls, usd, failed) in enumerate(days)]
        self._page(request, 200, "spend.html", title="Spend and jobs", nav="spend", jobs=status, bars=bars,
                   failures=failures, chart_width=max(22 * len(bars), 22))

    # --- actions -------------------------------------------------------------------------------

    def _form(self, request: Request) -> dict[str, str]:
        length_text = request.header("Content-Length") or "0"
        if not length_text.isdigit() or int(length_text) > MAX_FORM_BYTES:
            raise _Answer(413, "Form too large.")
        data = request.handler.rfile.read(int(length_text)) if int(length_text) else b""
        return _first(parse_qs(data.decode("utf-8", "replace")))

    def _memory_action(self, request: Request, episode_id: str, action: str) -> None:
        form = self._form(request)
        if self.read_only:
            raise _Answer(403, "The processor is not running: this viewer is read-only. Start it with `engram run`.")
        conn = connect(self.settings.db_path)
        try:
            if episodes_sql.get_episode(conn, episode_id) is None:
                raise _Answer(404, "No memory with this id.")
            if action == "forget":
                EpisodeStore(self._settings, conn).forget(episode_id)
            elif action == "wrong":
                # Never told again; its id stays taken, so the miner does not make the same memory anew.
                EpisodeStore(self._settings, conn).forget(episode_id, form.get("reason") or "marked wrong")
            elif action in ("stale", "restore"):
                with write_transaction(conn):
                    changed = sql.set_status(conn, episode_id, "stale" if action == "stale" else "active", now_ms())
                if not changed:
                    raise _Answer(409, "Only an active memory can be marked stale, and only a stale memory that "
                                       "nothing superseded can be restored.")
            elif action == "importance":
                importance = form.get("importance")
                if importance not in ("high", "normal"):
                    raise _Answer(400, "importance must be high or normal.")
                with write_transaction(conn):
                    if not sql.set_importance(conn, episode_id, importance):
                        raise _Answer(409, "A forgotten memory has no importance to edit.")
            else:
                raise _Answer(404, "No such action.")
        except UnknownEpisode as exc:
            raise _Answer(404, str(exc)) from None
        finally:
            conn.close()
        back = form.get("back", "")
        if back.startswith("/ui/project?p=") or back == "/ui/project":
            self._redirect(request, f"{back}{'&' if '?' in back else '?'}done={action}")
            return
        self._redirect(request, f"/ui/memory/{quote(episode_id, safe='')}?done={action}")

    def _reviews(self, request: Request) -> None:
        conn = self._conn()
        try:
            reviews = cold_sql.open_reviews(conn)
        finally:
            conn.close()
        self._page(request, 200, "reviews.html", title="Reviews", nav="reviews", reviews=reviews,
                   done=request.query.get("done", ""), read_only=self.read_only)

    def _review_choice(self, request: Request, review_text: str) -> None:
        form = self._form(request)
        if self.read_only:
            raise _Answer(403, "The processor is not running: this viewer is read-only. Start it with `engram run`.")
        option = form.get("option", "")
        if not review_text.isdigit() or not option.isdigit():
            raise _Answer(400, "A review id and an option number are needed.")
        conn = connect(self.settings.db_path)
        try:
            # Recorded with its review job in one transaction; the processor's worker applies it.
            record_choice(conn, int(review_text), int(option))
        except LookupError as exc:
            raise _Answer(409 if "already" in str(exc) else 404, str(exc)) from None
        except ValueError as exc:
            raise _Answer(400, str(exc)) from None
        finally:
            conn.close()
        self._redirect(request, f"/ui/reviews?done={int(review_text)}")

    # --- static files and the live stream --------------------------------------------------------

    def _static(self, request: Request, name: str) -> None:
        if name not in ("viewer.css", "viewer.js", "icon.svg"):
            raise _Answer(404, "No such file.")
        body = resources.files("processor.viewer").joinpath("static", name).read_bytes()
        content_type = {"css": "text/css", "js": "text/javascript", "svg": "image/svg+xml"}[name.rpartition(".")[2]]
        self._send(request, 200, body, f"{content_type}; charset=utf-8")

    def _events(self, request: Request) -> None:
        if not self._streams.acquire(blocking=False):
            raise _Answer(503, "Too many live pages open; close one.")
        handler = request.handler
        try:
            conn = connect(self.settings.db_path, readonly=True)
            try:
                handler.connection.settimeout(self.write_timeout)
                handler.send_response(200)
                handler.send_header("Content-Type", "text/event-stream")
                self._security_headers(handler)
                handler.end_headers()
                last = sql.cursor(conn)
                handler.wfile.write(b"retry: 2000\n\n")
                handler.wfile.flush()
                started = idle = time.monotonic()
                while not self.stop_event.wait(STREAM_POLL_SECONDS):
                    if time.monotonic() - started > STREAM_MAX_SECONDS or _client_gone(handler.connection):
                        break
                    current = sql.cursor(conn)
                    if current != last:
                        changed = sql.sessions_changed(conn, last)
                        data = {"sessions": changed, "m": current.message_id, "e": current.episode_rowid,
                                "i": current.injection_id,
                                "new": {"messages": current.message_id - last.message_id,
                                        "memories": current.episode_rowid - last.episode_rowid,
                                        "injections": current.injection_id - last.injection_id}}
                        handler.wfile.write(f"event: change\ndata: {json.dumps(data)}\n\n".encode())
                        handler.wfile.flush()
                        last = current
                        idle = time.monotonic()
                    elif time.monotonic() - idle > 15:
                        handler.wfile.write(b": keep-alive\n\n")  # find out that the browser went away
                        handler.wfile.flush()
                        idle = time.monotonic()
            finally:
                conn.close()
        finally:
            self._streams.release()
