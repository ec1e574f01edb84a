"""Rebuilding a store's verbatim episodes with the current builder, keeping every id a person acted on.

`engram reindex` runs it: sessions episodized by an older builder get the current pieces (steps,
task headers). Ids are kept for what users touched: a memory expanded (access count), given another
importance or status, reviewed, checked or superseded keeps its id, and takes the new piece that
starts with the same message (or keeps its old text when no new piece does). A forgotten, archived,
stale or superseded memory stays as it is, and the messages it was made from are left out of the new
pieces, so a rebuild never brings forgotten text back nor undoes a sweep.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Protocol

import apsw

from processor.config import Settings
from processor.memory.identity import episode_id
from processor.memory.verbatim import RoundPiece, group_rounds, round_pieces
from processor.store import episodes as sql
from processor.store import write_transaction
from processor.store.episodes import Episode, StoredMessage


class EpisodeStore(Protocol):
    """What a rebuild needs of processor.memory.episode_store.EpisodeStore (which calls it from reindex)."""

    conn: apsw.Connection

    @property
    def settings(self) -> Settings: ...

    def vectors_for(self, contents: list[str]) -> list[bytes]: ...

log = logging.getLogger(__name__)

PAGE = 5_000


@dataclass
class RebuildReport:
    sessions: int = 0
    removed: int = 0  # old pieces no one acted on, replaced
    written: int = 0  # new pieces with new ids
    kept: int = 0  # ids kept (rewritten in place, or left as they were)
    rowids: tuple[int, ...] = ()  # rows embedded by the rebuild: a reindex need not embed them again


def _kept(ep: Episode, named: set[str]) -> bool:
    return (ep.access_count > 0 or ep.status != "active" or ep.importance != "normal" or ep.id in named)


def _messages(store: EpisodeStore, session_id: str, through: int, left_out: set[str]) -> list[StoredMessage]:
    found: list[StoredMessage] = []
    after = 0
    while True:
        page = sql.messages_after(store.conn, session_id, after, limit=PAGE)
        found += [m for m in page if m.id <= through and m.uuid not in left_out]
        if len(page) < PAGE or page[-1].id >= through:
            return found
        after = page[-1].id


def rebuild_session(store: EpisodeStore, session_id: str, report: RebuildReport) -> None:
    """One session's verbatim pieces remade in one transaction (a crash leaves the old ones)."""
    progress = sql.session_progress(store.conn, session_id)
    old = sql.verbatim_episodes(store.conn, session_id)
    if progress is None or not old:
        return
    project, through = progress
    named = sql.acted_on_ids(store.conn, [e.id for e in old])
    kept = [e for e in old if _kept(e, named)]
    # What was forgotten, archived, marked stale or merged away stays as it is, and its messages are not
    # made into new active pieces: a rebuild never undoes a forget or a sweep.
    put_away = {u for e in kept if e.status != "active" for u in e.source_uuids}
    messages = _messages(store, session_id, through, put_away)
    pieces: list[RoundPiece] = [p for r in group_rounds(messages, final=True)
                                for p in round_pieces(r, store.settings.verbatim_max_chars)]
    # A kept active memory takes over the new piece that starts where it started; others stay as they are.
    takes: dict[int, Episode] = {}
    for ep in kept:
        if ep.status != "active" or not ep.source_uuids:
            continue
        for index, piece in enumerate(pieces):
            if index not in takes and piece.source_uuids and piece.source_uuids[0] == ep.source_uuids[0]:
                takes[index] = ep
                break
    kept_ids = {e.id for e in kept}
    blobs = store.vectors_for([p.full_content for p in pieces])
    written: list[str] = []
    with write_transaction(store.conn):
        sql.delete_episodes(store.conn, [e.id for e in old if e.id not in kept_ids])
        for index, (piece, blob) in enumerate(zip(pieces, blobs, strict=True)):
            new = piece.finding().episode(session_id, project, old[0].created_at)
            if index in takes:
                sql.rewrite_episode(store.conn, takes[index].id, new, blob)
                written.append(takes[index].id)
                continue
            new_id = piece.id
            if new_id in kept_ids or sql.get_episode(store.conn, new_id) is not None:
                # The natural id belongs to a memory kept as it was: this piece gets one of its own.
                new_id = episode_id(f"{piece.id}:rebuilt")
            sql.insert_episode(store.conn, replace(new, id=new_id), blob)
            written.append(new_id)
        rowids = [sql.get_episode(store.conn, i).rowid for i in written]
    report.sessions += 1
    report.removed += len(old) - len(kept)
    report.kept += len(kept)
    report.written += len(pieces) - len(takes)
    report.rowids += tuple(rowids)


def rebuild_verbatim(store: EpisodeStore) -> RebuildReport:
    """Every episodized session's verbatim pieces remade with the current builder (vectors from the
    configured model: `engram reindex` then re-embeds the rest and records the model)."""
    report = RebuildReport()
    for session_id in sql.episodized_sessions(store.conn):
        rebuild_session(store, session_id, report)
    log.info("rebuilt verbatim episodes of %d sessions: %d written, %d replaced, %d ids kept",
             report.sessions, report.written, report.removed, report.kept)
    return report
