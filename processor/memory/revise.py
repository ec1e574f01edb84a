"""How the cold path changes memories without losing one: new versions, merges, stale and archived marks.

Every change keeps the original row: a fix or a consolidation writes a new memory and marks the
old ones ``superseded`` (``superseded_by`` points at the new one); a stale or archived memory keeps
its content and stays searchable. Each change is committed together with a row in
``cold_actions`` that says which job did what and why.
"""

from __future__ import annotations

import re
import uuid as uuidlib

import numpy as np

from processor.clock import now_ms
from processor.memory.episode_store import EpisodeStore
from processor.memory.identity import content_hash
from processor.store import cold as cold_sql
from processor.store import episodes as sql
from processor.store import write_transaction
from processor.store.episodes import Episode, NewEpisode


def replace_words(text: str, replacements: tuple[tuple[str, str], ...] | list[tuple[str, str]]) -> str:
    """Each old name replaced by its new one where it stands as a whole word or path."""
    for old, new in replacements:
        text = re.sub(rf"(?<![\w/.-]){re.escape(old)}(?![\w])", new, text)
    return text


def _new_id() -> str:
    return "ep_" + uuidlib.uuid4().hex[:16]


def _blob(store: EpisodeStore, text: str) -> bytes:
    [vector] = store.embedder.embed_documents([text])
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()


def new_version(store: EpisodeStore, ep: Episode, summary: str, full_content: str, entities: list[str], *,
                job_type: str, reason: str, head_commit: str | None = None) -> str:
    """Write a corrected copy of `ep` and supersede it; returns the new id."""
    store.check_model()
    blob = _blob(store, full_content)
    stamp = now_ms()
    new_id = _new_id()
    with write_transaction(store.conn):
        sql.insert_episode(store.conn, NewEpisode(
            id=new_id, session_id=ep.session_id, project=ep.project, scope=ep.scope, summary=summary,
            entities=entities, importance=ep.importance, kind=ep.kind, source_type=ep.source_type,
            full_content=full_content, source_uuids=ep.source_uuids, content_hash=content_hash(full_content),
            created_at=stamp), blob)
        cold_sql.supersede_into(store.conn, [ep.id], new_id, stamp)
        sql.carry_access(store.conn, new_id, ep.id, stamp)
        cold_sql.record_check(store.conn, ep.id, stamp, head_commit, "fixed", f"{reason} → {new_id}")
        cold_sql.record_check(store.conn, new_id, stamp, head_commit, "valid", f"written by the {job_type}")
        cold_sql.record_action(store.conn, stamp, job_type, "new_version", episode_id=ep.id,
                               detail=f"{new_id}: {reason}")
    return new_id


def rewrite(store: EpisodeStore, ep: Episode, replacements: tuple[tuple[str, str], ...], *, job_type: str,
            reason: str, head_commit: str | None = None) -> str:
    """The memory with old names replaced by new ones (a renamed file or function), as a new version."""
    return new_version(store, ep, replace_words(ep.summary, replacements),
                       replace_words(ep.full_content, replacements),
                       [replace_words(e, replacements) for e in ep.entities],
                       job_type=job_type, reason=reason, head_commit=head_commit)


def consolidate(store: EpisodeStore, originals: list[Episode], summary: str, full_content: str, *,
                job_type: str, reason: str) -> str:
    """One memory in place of several: every original kept, superseded by the new one."""
    store.check_model()
    blob = _blob(store, full_content)
    stamp = now_ms()
    new_id = _new_id()
    first = originals[0]
    kinds = [e.kind for e in originals]
    entities = list(dict.fromkeys(e for o in originals for e in o.entities))[:20]
    with write_transaction(store.conn):
        sql.insert_episode(store.conn, NewEpisode(
            id=new_id, session_id=first.session_id, project=first.project, scope=first.scope, summary=summary,
            entities=entities, importance="high" if any(o.importance == "high" for o in originals) else "normal",
            kind=max(set(kinds), key=kinds.count), source_type="auto", full_content=full_content,
            source_uuids=list(dict.fromkeys(u for o in originals for u in o.source_uuids))[:200],
            content_hash=content_hash(full_content), created_at=stamp), blob)
        cold_sql.supersede_into(store.conn, [o.id for o in originals], new_id, stamp)
        cold_sql.record_action(store.conn, stamp, job_type, "consolidate", episode_id=new_id,
                               detail=f"{len(originals)} memories: {', '.join(o.id for o in originals)}; {reason}")
    return new_id


def mark(store: EpisodeStore, episode_id: str, status: str, *, job_type: str, reason: str,
         head_commit: str | None = None, verdict: str | None = None) -> None:
    """stale / archived / active (kept as it is), with the verdict and the action recorded."""
    stamp = now_ms()
    with write_transaction(store.conn):
        cold_sql.set_status(store.conn, episode_id, status, stamp)
        cold_sql.record_check(store.conn, episode_id, stamp, head_commit, verdict or status, reason)
        cold_sql.record_action(store.conn, stamp, job_type, status, episode_id=episode_id, detail=reason)
