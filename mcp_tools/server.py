"""Engram's MCP server: the memory tools Claude Code calls.

Start it on stdio from the project directory (the bridge does, when no processor answers)::

    python -m mcp_tools.server

Tools: ``memory_recall`` (short dated bites with ids), ``memory_expand`` (one memory in full, with
provenance), ``memory_remember`` (queue a memory for the processor), ``memory_forget`` (erase one
memory and keep it out of every recollection) and ``memory_status``.

The server is stateless in the sense of seed 000: it reads the database and drops remember requests
into ``$ENGRAM_HOME/queue/``; it never calls an LLM and never imports an agent SDK, so a Claude Code
session started by Engram's own worker can load it without recursion. With the processor down every
tool still answers from the database, and ``memory_status`` says so.

Threading: apsw connections must stay on one thread, and the SDK runs sync tools on a pool of worker
threads. So the tools are async and hand all database work to one dedicated thread that owns the
connection, the ``EpisodeStore`` and its in-memory vector index. Loading the embedding model (seconds,
on the first recall) then blocks only that thread, never the protocol loop.

What the model reads: Claude Code passes a tool's ``structuredContent`` to the model instead of its
text when there is one (1.5–1.8× the characters of the text), so the server Claude Code starts
(``main``) declares no output schemas and returns the compact text only; ``build_server(...,
structured=True)`` (the default, for programs and tests) adds the structured copy.

Where it runs: the running processor serves these tools itself (``mcp_tools/host.py``, ``POST /mcp``)
with its warm model and vectors, and the command Claude Code starts is the stdlib bridge
(``mcp_tools/bridge.py``) that passes each session there; each request then names the client's directory
and session in headers. This in-process server is the bridge's fallback when no processor answers; its
recall still goes over the processor's control plane (``POST /recall``) whenever one is up, where the
embedding model is already warm: the first recall costs a request, not a model load. When the processor is down,
or does not answer, the server searches in-process as before. The calling session (Claude Code's
``claudecode/sessionId`` request meta, else ``$CLAUDE_CODE_SESSION_ID``) is passed along, so messages of
the same session not yet in a memory are found too.

Stdout: the SDK's stdio transport moves the wire to a private descriptor and points fd 1 at stderr
while serving, so llama.cpp or a stray print can never corrupt the protocol stream.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import threading
import urllib.parse
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import anyio.to_thread
import apsw
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, TypeAdapter

from mcp_tools import PROJECT_HEADER, SESSION_HEADER
from processor.capture.project import known_project, project_root
from processor.config import ConfigError, Settings, load_settings
from processor.memory.errors import EmbedderError, EmbeddingMismatch, UnknownEpisode
from processor.memory.kinds import KINDS, SCOPES
from processor.recall.format import format_expansion, format_hits
from processor.service.control_client import ping
from processor.service.pidfile import is_running
from processor.share.errors import ShareError
from processor.store import cold as cold_sql
from processor.store import open_store
from processor.store.connection import NotEngramDatabase
from processor.store.episodes import Episode

if TYPE_CHECKING:
    from processor.memory.episode_store import EpisodeStore, Expansion, Hit

log = logging.getLogger(__name__)

SERVER_NAME = "engram"
# Longer "queries" are pasted documents, not questions: the model should pass the key words instead.
MAX_QUERY_CHARS = 4000
MAX_ID_CHARS = 200
MAX_LIMIT = 50
# memory_status must stay snappy: a processor that does not answer /ping within this is reported down.
PING_TIMEOUT_SECONDS = 0.3
ALL_PROJECTS = "*"
START_HINT = "start it with `engram run` or `engram service install`"

T = TypeVar("T")

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)


# --- structured output -----------------------------------------------------------------------


def _load_memory_layer() -> None:
    """Import the memory layer (numpy, the redaction rules: about as long as the SDK's own import) and
    define the result model that names its `Hit`. Claude Code's server declares no output schemas, so it
    does this on the first tool call, after `initialize`; `build_server(structured=True)` does it at once."""
    global EpisodeStore, Expansion, Hit, RecallResult
    if "RecallResult" in globals():
        return
    from processor.memory.episode_store import EpisodeStore, Expansion, Hit

    class RecallResult(BaseModel):
        query: str
        project: str | None = Field(description="project searched besides global memories; null = every project")
        hits: list[Hit] = Field(description="best first; pass an id to memory_expand for the full memory")

    RecallResult.__module__ = __name__
    RecallResult.__qualname__ = "RecallResult"


class ReviewItem(BaseModel):
    id: int
    memory_id: str | None
    project: str | None
    question: str
    options: list[str] = Field(description="numbered from 1; the user applies one with `engram review ID --choose N`")
    why: str
    created_at_commit: str | None


class ReviewsResult(BaseModel):
    project: str | None
    reviews: list[ReviewItem]


def _format_reviews(items: list[ReviewItem]) -> str:
    if not items:
        return "No pending reviews."
    lines = []
    for r in items:
        why = f" — why: {r.why}" if r.why else ""
        lines.append(f"Review {r.id} (memory {r.memory_id or '-'}): {r.question}{why}")
        lines += [f"  {i}. {o}" for i, o in enumerate(r.options, 1)]
    lines.append("The user applies a choice with `engram review ID --choose N` (or walks them with `engram review`).")
    return "\n".join(lines)


class RememberResult(BaseModel):
    queued: bool
    file: str = Field(description="the queue file the processor will store the memory from")
    kind: str | None
    scope: str
    project: str | None
    processor_running: bool
    message: str


class ForgetResult(BaseModel):
    forgotten: list[str] = Field(description="ids erased: the memory, then the earlier versions it replaced")
    summary: str = Field(description="what the memory said (its first line), for the user")
    message: str


class StatusResult(BaseModel):
    processor_running: bool
    mode: Literal["normal", "degraded"]
    message: str
    processor: dict[str, Any] | None = Field(description="the processor's /ping answer, when it is running")
    episodes: int | None
    episodes_by_status: dict[str, int]
    embedding_model: str | None = Field(description="model that made the stored vectors")
    embedding_dim: int | None
    configured_embedding_model: str | None
    db_path: str
    queue_dir: str
    pending_remember_files: int
    database_error: str | None = None


def _text_result(text: str, structured: Any, with_structured: bool = True) -> CallToolResult:
    # The text is what the model reads (seed 001's format); the structured copy is for programs.
    if not with_structured:
        return CallToolResult(content=[TextContent(type="text", text=text)])
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=TypeAdapter(type(structured)).dump_python(structured, mode="json"))


SESSION_META = "claudecode/sessionId"
SESSION_ENV = "CLAUDE_CODE_SESSION_ID"
# The processor answers /recall from memory in milliseconds; past this, search here instead.
RECALL_TIMEOUT_SECONDS = 2.0


def calling_session(ctx: Context | None, *, environment: bool = True) -> str | None:
    """The Claude Code session that called the tool: its request meta, else the bridge's header, else (for
    a server Claude Code started itself: `environment`) the server's environment."""
    meta = None
    try:
        meta = ctx.request_context.meta if ctx is not None else None
    except (ValueError, AttributeError):  # no request (a direct call)
        meta = None
    value = None
    if meta is not None:
        extra = meta.model_dump(by_alias=True) if hasattr(meta, "model_dump") else dict(meta)
        value = extra.get(SESSION_META)
    if not isinstance(value, str) or not value:
        value = _header(ctx, SESSION_HEADER)  # the bridge's environment, when the processor serves the tool
    if (not isinstance(value, str) or not value) and environment:
        value = os.environ.get(SESSION_ENV)
    return value if isinstance(value, str) and 0 < len(value) <= 128 else None


@functools.lru_cache(maxsize=256)
def _project_of_directory(directory: str) -> str:
    return project_root(directory)


def _header(ctx: Context | None, name: str) -> str | None:
    """A header of the HTTP request that carried this call (None on stdio or outside a request)."""
    try:
        headers = ctx.headers if ctx is not None else None
    except (ValueError, AttributeError):  # no request (a direct call)
        return None
    return headers.get(name.lower()) if headers else None


def calling_project(ctx: Context | None, default: str | None) -> str | None:
    """The git root of the calling client's directory (PROJECT_HEADER), else the server's own default."""
    encoded = _header(ctx, PROJECT_HEADER)
    if not encoded:
        return default
    directory = urllib.parse.unquote(encoded)
    return _project_of_directory(directory) if os.path.isabs(directory) else default


# --- the database side: one thread, one connection --------------------------------------------


class MemoryService:
    """Everything the tools do, with database work confined to one dedicated thread."""

    def __init__(self, settings: Settings | None = None, cwd: str | None = None,
                 store: Callable[[], EpisodeStore] | None = None) -> None:
        self._settings = settings
        self._settings_error: str | None = None
        # Hosted by the processor (`store` given): its per-thread store, sharing the warm model and vectors,
        # and no default project of its own: each request names its client's directory (PROJECT_HEADER).
        self._hosted_store = store
        self.project = None if store is not None else project_root(os.path.abspath(cwd or os.getcwd()))
        # One worker: the connection below is only ever touched from it, and calls are serialised
        # (an apsw connection runs one statement at a time anyway).
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engram-mcp-db")
        self._store: EpisodeStore | None = None
        self._store_thread: int | None = None

    @property
    def hosted(self) -> bool:
        """Served by the processor for every session (mcp_tools/host.py), not started by one."""
        return self._hosted_store is not None

    @property
    def loaded_settings(self) -> Settings | None:
        return self._settings

    @property
    def settings(self) -> Settings:
        """Loaded once; a broken config.toml becomes a tool error naming the file, not a dead server."""
        if self._settings is None:
            if self._settings_error is None:
                try:
                    self._settings = load_settings()
                except ConfigError as exc:
                    self._settings_error = str(exc)
            if self._settings is None:
                raise ToolError(f"Engram's configuration cannot be used: {self._settings_error}")
        return self._settings

    async def on_db_thread(self, fn: Callable[[], T]) -> T:
        # asyncio.wrap_future: MCPServer.run() drives anyio on its default asyncio backend.
        return await asyncio.wrap_future(self._executor.submit(fn))

    def _episodes(self) -> EpisodeStore:
        """The store, opened on first use (on the DB thread) so a server starts even before the DB exists."""
        _load_memory_layer()
        if self._hosted_store is not None:
            return self._hosted_store()
        if self._store is None:
            settings = self.settings
            conn = open_store(settings.db_path)
            self._store = EpisodeStore(settings, conn)
            self._store_thread = threading.get_ident()
        if self._store_thread != threading.get_ident():
            raise RuntimeError("the Engram database connection was used outside its thread")
        return self._store

    def close_db(self) -> None:
        """Close the connection (on the DB thread); a later call opens it again."""
        store, self._store = self._store, None
        if store is not None:
            store.conn.close()

    async def aclose(self) -> None:
        await self.on_db_thread(self.close_db)

    # Each call below runs on the DB thread.

    def _project(self, project: str | None) -> str | None:
        """The project a client's root belongs to (a clone's root: its project's key), on the DB thread."""
        return known_project(self._episodes().conn, project) if project else None

    def recall(self, query: str, limit: int, project: str | None, session_id: str | None = None) -> list[Hit]:
        return self._episodes().recall(query, limit=limit, project=self._project(project), session_id=session_id)

    def recall_by_processor(self, query: str, limit: int, project: str | None,
                            session_id: str | None, *, light: bool = False) -> list[Hit] | None:
        """The running processor's answer (its model is warm); None when it is down or does not answer.

        light: the hits only become text (no structured copy), so plain namespaces serve and the memory
        layer is not imported: a first recall costs one request.
        """
        from processor.service.control_client import ControlError, request

        if self._hosted_store is not None:  # this is the processor: search here, with its warm model
            return None
        if not light:
            _load_memory_layer()
        body: dict[str, Any] = {"query": query, "limit": limit}
        if project is not None:  # absent: every project
            body["project"] = project
        if session_id:
            body["session_id"] = session_id
        try:
            answer = request(self.settings.run_dir, "POST", "/recall", body, timeout=RECALL_TIMEOUT_SECONDS)
            if light:
                from types import SimpleNamespace

                return [SimpleNamespace(**bite) for bite in answer["bites"]]  # type: ignore[misc]
            return [Hit(**bite) for bite in answer["bites"]]
        except (ControlError, KeyError, TypeError) as exc:
            log.info("recall through the processor failed (%s); searching here", exc)
            return None

    def expand(self, item_id: str) -> Expansion:
        try:
            return self._episodes().expand(item_id, touch=True)
        except UnknownEpisode:
            # A hit of a team search (scope "team") that this machine does not hold: read it on the server.
            if not item_id.startswith("ep_") or not self.settings.shared_database_url.strip():
                raise
            from processor.share.team_search import expand_team

            found = expand_team(self.settings, item_id)
            if found is None:
                raise
            return found

    def recall_team(self, query: str, limit: int, project: str | None) -> list[Hit]:
        """The team's memories searched on the shared database (scope "team")."""
        from processor.share.team_search import search_team

        settings = self.settings
        if not settings.shared_database_url.strip():
            raise ToolError("scope 'team' searches the shared database, and shared memory is not configured: set "
                            "shared_database_url in $ENGRAM_HOME/config.toml (docs/shared-memory.md)")
        return search_team(settings, self._episodes().embedder, query, limit=limit, project=self._project(project))

    def forget(self, item_id: str, reason: str | None) -> list[Episode]:
        from processor.recall.forget import forget as forget_memory

        return forget_memory(self._episodes(), self.settings, item_id, reason)

    def db_status(self) -> dict[str, Any]:
        return self._episodes().status()

    def reviews(self, project: str | None) -> list[ReviewItem]:
        project = self._project(project)
        return [ReviewItem(id=r.id, memory_id=r.episode_id, project=r.project, question=r.question,
                           options=[str(o.get("label", o.get("action"))) for o in r.options], why=r.context,
                           created_at_commit=r.created_commit)
                for r in cold_sql.open_reviews(self._episodes().conn)
                if project is None or r.project in (None, project)]


def _tool_error(exc: BaseException, settings: Settings | None) -> ToolError:
    """The library's errors already name the thing and the fix; add context only where they do not."""
    db = settings.db_path if settings else "the Engram database"
    if isinstance(exc, ToolError):
        return exc
    if isinstance(exc, EmbeddingMismatch):
        return ToolError(f"cannot search: {exc}")
    if isinstance(exc, EmbedderError):
        return ToolError(f"the embedding model cannot be used: {exc}")
    if isinstance(exc, UnknownEpisode | NotEngramDatabase | ShareError):
        return ToolError(str(exc))
    if isinstance(exc, apsw.BusyError):
        return ToolError(f"{db} stayed locked by another writer for too long ({exc}); try again in a moment")
    if isinstance(exc, apsw.Error):
        return ToolError(f"cannot read {db}: {exc}. If the file is damaged, move it aside and run "
                         "`engram backfill` to rebuild it from the transcripts")
    if isinstance(exc, OSError):
        return ToolError(f"file error: {exc}")
    if isinstance(exc, ValueError):
        return ToolError(str(exc))
    raise exc  # a bug: the SDK logs the traceback and tells the model only that the tool failed


async def _guarded(service: MemoryService, fn: Callable[[], T]) -> T:
    try:
        return await service.on_db_thread(fn)
    except ToolError:
        raise
    except Exception as exc:
        raise _tool_error(exc, service.loaded_settings) from exc


# --- tools -----------------------------------------------------------------------------------


def build_server(settings: Settings | None = None, cwd: str | None = None, *, structured: bool = True,
                 store: Callable[[], EpisodeStore] | None = None) -> MCPServer:
    """The MCP server object; tests connect to it in-process with ``mcp.Client(server)``.

    settings: default ``load_settings()`` (ENGRAM_HOME and friends), read on the first tool call.
    cwd: the directory whose git root is the default project for recall and remember.
    structured: declare output schemas and return ``structuredContent`` beside the text (see the
    module docstring: not for Claude Code).
    store: the processor hosting these tools (``mcp_tools/host.py``) gives its per-thread
    store, which shares its warm model and vectors; the default project then comes with each request.
    """
    service = MemoryService(settings, cwd, store)
    if structured:  # the output schemas name Hit and Expansion
        _load_memory_layer()

    def result(text: str, data: Any) -> CallToolResult:
        return _text_result(text, data, structured)

    def tool(**kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
        register = server.tool(**kwargs)

        def decorate(fn: Callable[..., Any]) -> Any:
            if not structured:  # a bare CallToolResult: no outputSchema is declared
                fn.__annotations__["return"] = "CallToolResult"
            return register(fn)
        return decorate

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[MemoryService]:
        try:
            yield service
        finally:
            # Not the executor: an in-process client may connect again to the same server object.
            await service.aclose()

    server: MCPServer = MCPServer(
        SERVER_NAME,
        instructions=(
            "Engram remembers what earlier coding-agent sessions learned. Call memory_recall with a few key words "
            "before re-deriving a decision, convention or past fix; memory_expand(id) gives one memory in full; "
            "memory_remember stores something worth keeping for future sessions."
        ),
        lifespan=lifespan,
    )

    @tool(
        title="Recall memories",
        description=(
            "Get brief memory recollections for a topic: short dated 'memory bites' with ids, best first. "
            "Expand one with memory_expand(id). Searches global memories plus the current project's "
            f"(pass project='{ALL_PROJECTS}' for every project)."
        ),
        annotations=READ_ONLY,
    )
    async def memory_recall(
        query: Annotated[str, Field(description="what to remember: a few key words or a short question")],
        limit: Annotated[Annotated[int, Field(ge=1, le=MAX_LIMIT)] | None,
                         Field(description="how many memories (default: the recall_limit setting, 5)")] = None,
        project: Annotated[str | None, Field(description="project root path; default: the git root of the "
                                             f"current directory; '{ALL_PROJECTS}' for all projects")] = None,
        scope: Annotated[Literal["local", "team"] | None,
                         Field(description="'team': search your teams' memories on the shared database directly "
                                           "(shared memory); default: the memories on this machine")] = None,
        ctx: Context | None = None,
    ) -> Annotated[CallToolResult, RecallResult]:
        text = query.strip()
        if not text:
            raise ToolError("memory_recall needs a query: pass a few key words about the topic")
        if len(text) > MAX_QUERY_CHARS:
            raise ToolError(f"the query is {len(text)} characters; memory_recall takes at most {MAX_QUERY_CHARS}. "
                            "Pass a few key words or a short question instead of a whole text")
        team = scope == "team"  # below, `scope` is the project searched
        scope = None if project == ALL_PROJECTS else (project.strip() if project and project.strip()
                                                      else calling_project(ctx, service.project))
        count = limit or service.settings.recall_limit
        if team:
            hits = await _guarded(service, lambda: service.recall_team(text, count, scope))
            return result(format_hits(hits), RecallResult(query=text, project=scope, hits=hits) if structured
                          else None)
        session_id = calling_session(ctx, environment=not service.hosted)
        hits = await anyio.to_thread.run_sync(lambda: service.recall_by_processor(text, count, scope, session_id,
                                                                                  light=not structured))
        if hits is None:
            hits = await _guarded(service, lambda: service.recall(text, count, scope, session_id))
        if not structured:
            return result(format_hits(hits), None)
        return result(format_hits(hits), RecallResult(query=text, project=scope, hits=hits))

    @tool(
        title="Expand a memory",
        description=(
            "Expand a memory recollection to its full context: the whole content, when and in which session and "
            "project it was made, its source messages and entities. Pass an id from memory_recall (ep_… or msg_…)."
        ),
        annotations=READ_ONLY,
    )
    async def memory_expand(
        id: Annotated[str, Field(description="a memory id from memory_recall, e.g. ep_0123abcd…")],
    ) -> Annotated[CallToolResult, Expansion]:
        item_id = id.strip()
        if not item_id:
            raise ToolError("memory_expand needs an id from memory_recall (they look like ep_…)")
        if len(item_id) > MAX_ID_CHARS:
            raise ToolError(f"no memory with an id of {len(item_id)} characters; ids look like ep_… and come "
                            "from memory_recall")
        expansion = await _guarded(service, lambda: service.expand(item_id))
        return result(format_expansion(expansion), expansion)

    @tool(
        title="Remember",
        description=(
            "Store something worth remembering in future sessions: a decision, preference, convention, fix or "
            "gotcha. Returns at once; Engram's processor stores it in the background. "
            f"kind: one of {', '.join(KINDS)}. scope: 'project' (this repository, default) or 'global'."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                    open_world_hint=False),
    )
    async def memory_remember(
        text: Annotated[str, Field(description="the memory, in a sentence or a short paragraph")],
        kind: Annotated[str | None, Field(description=f"one of {', '.join(KINDS)}")] = None,
        scope: Annotated[str | None, Field(description="'project' (default) or 'global'")] = None,
        ctx: Context | None = None,
    ) -> Annotated[CallToolResult, RememberResult]:
        if kind is not None and kind not in KINDS:
            raise ToolError(f"unknown kind {kind!r}; use one of {', '.join(KINDS)} (or leave it out)")
        if scope is not None and scope not in SCOPES:
            raise ToolError(f"unknown scope {scope!r}; use 'project' or 'global' (or leave it out)")
        settings = service.settings
        project = None if scope == "global" else calling_project(ctx, service.project)
        # No database and no model here: one small file write, so the call returns at once.
        from processor.capture.remember_inbox import RememberRequest, write_remember_file

        try:
            path = write_remember_file(settings.queue_dir,
                                       RememberRequest(text, kind=kind, scope=scope, project=project))
        except (ValueError, OSError) as exc:
            raise _tool_error(exc, settings) from exc
        running = is_running(settings.run_dir)
        if running:
            message = f"Queued; the Engram processor stores it in a moment ({path.name})."
        else:
            message = (f"Queued as {path}, but the Engram processor is not running, so it is stored when the "
                       f"processor next starts; {START_HINT}.")
        remembered = RememberResult(queued=True, file=str(path), kind=kind, scope=scope or "project", project=project,
                                    processor_running=running, message=message)
        return result(message, remembered)

    @tool(
        title="Forget a memory",
        description=(
            "Forget a memory for good when the user asks to (or it is wrong, outdated or private): its content "
            "is erased and it is never shown or injected again; its id only remembers that it was forgotten. "
            "Pass an id from memory_recall or from the injected memories (ep_…), and optionally why."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                    open_world_hint=False),
    )
    async def memory_forget(
        id: Annotated[str, Field(description="the memory's id, e.g. ep_0123abcd…")],
        reason: Annotated[str | None, Field(description="why it is forgotten (kept with the id)")] = None,
    ) -> Annotated[CallToolResult, ForgetResult]:
        item_id = id.strip()
        if not item_id or len(item_id) > MAX_ID_CHARS:
            raise ToolError("memory_forget needs one memory's id (they look like ep_… and come from memory_recall)")
        erased = await _guarded(service, lambda: service.forget(item_id, reason))
        first = erased[0]
        older = len(erased) - 1
        message = (f"Forgot {first.id}: {first.summary}" if first.status != "forgotten"
                   else f"{first.id} was already forgotten")
        message += (f" (and {older} earlier version{'s' if older != 1 else ''})" if older else "") + \
            ". It will not be recalled or injected again."
        answer = ForgetResult(forgotten=[e.id for e in erased if e.status != "forgotten"], summary=first.summary,
                              message=message)
        return result(message, answer)

    @tool(
        title="Pending memory reviews",
        description=("List the pending reviews: memories Engram's inquisitor could not confirm against the code "
                     "(a file or function it cites is gone or changed), each with numbered options. Show them to "
                     "the user; the user applies one with `engram review ID --choose N`."),
        annotations=READ_ONLY,
    )
    async def memory_review(
        project: Annotated[str | None, Field(description="project root path; default: the current project; "
                                             f"'{ALL_PROJECTS}' for all projects")] = None,
        ctx: Context | None = None,
    ) -> Annotated[CallToolResult, ReviewsResult]:
        scope = None if project == ALL_PROJECTS else (project.strip() if project and project.strip()
                                                      else calling_project(ctx, service.project))
        items = await _guarded(service, lambda: service.reviews(scope))
        return result(_format_reviews(items), ReviewsResult(project=scope, reviews=items))

    @tool(
        title="Memory status",
        description=("Is Engram's processor running (or are memories answered from the database only), how many "
                     "memories are stored, which embedding model made them, and how many remember requests wait."),
        annotations=READ_ONLY,
    )
    async def memory_status() -> Annotated[CallToolResult, StatusResult]:
        settings = service.settings
        answer = await anyio.to_thread.run_sync(lambda: ping(settings.run_dir, timeout=PING_TIMEOUT_SECONDS))
        counts: dict[str, Any] = {}
        database_error = None
        try:
            counts = await _guarded(service, service.db_status)
        except ToolError as exc:
            database_error = str(exc)  # status still answers: it is how the user finds out what is wrong
        from processor.capture.remember_inbox import pending_remember_files

        pending = len(pending_remember_files(settings.queue_dir))
        running = answer is not None
        if running:
            message = "The Engram processor is running."
        elif is_running(settings.run_dir):
            message = ("degraded: the Engram processor holds its lock but does not answer; answering from the "
                       "database only. Check `engram status` or restart it")
        else:
            message = f"degraded: the Engram processor is not running; answering from the database only; {START_HINT}"
        status = StatusResult(
            processor_running=running, mode="normal" if running else "degraded", message=message,
            processor=answer, episodes=counts.get("episodes"), episodes_by_status=counts.get("episodes_by_status", {}),
            embedding_model=counts.get("embedding_model"), embedding_dim=counts.get("embedding_dim"),
            configured_embedding_model=settings.embedding_model, db_path=str(settings.db_path),
            queue_dir=str(settings.queue_dir), pending_remember_files=pending, database_error=database_error,
        )
        return result(_format_status(status), status)

    return server


def _format_status(s: StatusResult) -> str:
    lines = [s.message]
    if s.database_error:
        lines.append(f"Database: {s.database_error}")
    else:
        by_status = ", ".join(f"{n} {status}" for status, n in sorted(s.episodes_by_status.items()))
        lines.append(f"Memories: {s.episodes or 0}" + (f" ({by_status})" if by_status else ""))
    model = s.embedding_model or "(none yet)"
    dim = f", {s.embedding_dim} dims" if s.embedding_dim else ""
    lines.append(f"Embedding model: {model}{dim}; configured: {s.configured_embedding_model}")
    lines.append(f"Database: {s.db_path}")
    lines.append(f"Pending remember requests: {s.pending_remember_files} in {s.queue_dir}")
    return "\n".join(lines)


def main() -> None:
    # Logs go to stderr, which Claude Code keeps in its MCP log; stdout carries only the protocol.
    from processor.redaction.logs import redacting_formatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(redacting_formatter())  # a tool call's text can reach a log line: redacted like all logs
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    build_server(cwd=os.getcwd(), structured=False).run("stdio")


if __name__ == "__main__":
    main()
