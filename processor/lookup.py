"""What `engram recall` and `engram expand` print: the running processor's answer when it gives one, else
the same work done here.

The processor has the embedding model loaded; a CLI that loads it again takes about two seconds a call.
So the command asks the processor over its control plane (`POST /recall`, `POST /expand`, with the token)
and prints the answer with the same formatting as its own search would. When no processor answers —
none runs, its port or token file is stale, it stops between the check and the request, it is busy or
answers an error — the command does the work itself, and the output is the same: the processor runs the
very same `EpisodeStore` calls on the same database.

Imports are kept light on purpose: the served path must not pay for numpy, apsw or llama.cpp.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from processor.config import Settings
from processor.recall.format import format_expansion, format_hits
from processor.service.control_client import RECALL_MAX_LIMIT, RECALL_QUERY_CHARS, ControlError, request

SERVED_TIMEOUT_SECONDS = 10.0


def recall_output(settings: Settings, query: str, *, limit: int, project: str | None, as_json: bool) -> str:
    """The lines (or JSON) of a recall for `query`, as `engram recall` prints them."""
    limit = max(1, min(int(limit), RECALL_MAX_LIMIT))
    hits = _served_hits(settings, query, limit, project)
    if hits is None:
        hits = [hit.__dict__ for hit in _local_store(settings).recall(query, limit=limit, project=project)]
    if as_json:
        return json.dumps(hits, indent=2)
    return format_hits([SimpleNamespace(**hit) for hit in hits])  # type: ignore[misc]


def expand_output(settings: Settings, item_id: str, *, as_json: bool) -> str:
    """A memory's full content and sources, as `engram expand` prints them (an access, either way)."""
    expansion = _served(settings, "/expand", {"id": item_id})
    if expansion is None:
        expansion = _local_store(settings).expand(item_id).__dict__
    if as_json:
        return json.dumps(expansion, indent=2)
    return format_expansion(SimpleNamespace(**expansion))  # type: ignore[arg-type]


def _served_hits(settings: Settings, query: str, limit: int, project: str | None) -> list[dict[str, Any]] | None:
    if len(query) > RECALL_QUERY_CHARS or not query.strip():
        return None  # the processor would cut it, or refuse it: the local search gives the full answer or error
    body: dict[str, Any] = {"query": query, "limit": limit}
    if project is not None:
        body["project"] = project
    answer = _served(settings, "/recall", body)
    bites = answer.get("bites") if answer is not None else None
    return bites if isinstance(bites, list) and all(isinstance(b, dict) for b in bites) else None


def _served(settings: Settings, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """The running processor's answer, or None when it does not give one (the caller then does the work)."""
    try:
        return request(settings.run_dir, "POST", path, body, timeout=SERVED_TIMEOUT_SECONDS)
    except ControlError:
        return None


def _local_store(settings: Settings):  # -> EpisodeStore, imported here: numpy and the model are slow to load
    from processor.config import ensure_home
    from processor.memory.episode_store import EpisodeStore
    from processor.store import open_store

    ensure_home(settings)
    return EpisodeStore(settings, open_store(settings.db_path))
