"""RecollectionWriter: on each new user message, precompute the bites the hook will inject.

The processor has the model loaded, so it does the search here and writes a small
file per session; the PreToolUse hook only reads that file (seed 001). A message
on the same topic as the previous one (cosine > topic_gate) keeps the existing
file, so the agent is not shown the same memories again and again.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from pathlib import Path

import numpy as np

from processor.capture.parse import CapturedLine
from processor.config import Settings, ensure_private_dir
from processor.memory.episodes import EpisodeStore
from processor.store import episodes as sql

log = logging.getLogger(__name__)

_SAFE_SESSION = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def recollection_path(recollections_dir: Path, session_id: str) -> Path:
    if not _SAFE_SESSION.match(session_id) or session_id.startswith("."):
        raise ValueError(f"unsafe session id {session_id!r}")
    return recollections_dir / f"{session_id}.json"


def write_atomically(path: Path, data: dict) -> None:
    """Temp file in the same folder, then rename: a reader sees the old file or the new one, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    os.replace(tmp, path)


class RecollectionWriter:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._last_vector: dict[str, np.ndarray] = {}  # session id → embedding of its previous user message

    def handle(self, store: EpisodeStore, payload: tuple[str, CapturedLine]) -> Path | None:
        session_id, line = payload
        return self.write(store, session_id, line.uuid, line.text, project=self._project(store, session_id))

    @staticmethod
    def _project(store: EpisodeStore, session_id: str) -> str | None:
        progress = sql.session_progress(store.conn, session_id)
        return progress[0] if progress else None

    def write(self, store: EpisodeStore, session_id: str, message_uuid: str, text: str,
              project: str | None) -> Path | None:
        """Search memories for the message and replace the session's recollection file.

        Returns the file written, or None when the topic gate kept the existing one.
        """
        folder = ensure_private_dir(self.settings.recollections_dir)
        path = recollection_path(folder, session_id)
        vector = store.embedder.embed_query(text)
        previous = self._last_vector.get(session_id)
        self._last_vector[session_id] = vector
        if previous is not None and float(previous @ vector) > float(self.settings.topic_gate) and path.exists():
            return None
        exclude = self._recent_episode_ids(store, session_id)
        scored = store.search(text, limit=int(self.settings.recollection_bites), project=project,
                              exclude_ids=exclude, query_vector=vector)
        bites = [{"id": s.episode.id, "bite": s.episode.summary,
                  "date": time.strftime("%Y-%m-%d", time.gmtime(s.episode.created_at / 1000)),
                  "importance": s.episode.importance}
                 for s in scored if s.relevance >= float(self.settings.recollection_min_relevance)]
        write_atomically(path, {"messageUuid": message_uuid, "timestamp": int(time.time() * 1000), "bites": bites})
        return path

    def _recent_episode_ids(self, store: EpisodeStore, session_id: str) -> frozenset[str]:
        """Episodes made from this session's last few turns: the agent has just seen them."""
        rows = store.conn.execute(
            "SELECT id FROM episodes WHERE session_id = ? ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (session_id, int(self.settings.recollection_skip_recent)),
        ).fetchall()
        return frozenset(row[0] for row in rows)

    def remove_idle(self, now: float | None = None) -> int:
        """Delete recollection files (and hook state) of sessions idle longer than recollection_idle_hours."""
        now = time.time() if now is None else now
        cutoff = now - float(self.settings.recollection_idle_hours) * 3600
        removed = 0
        try:
            entries = list(os.scandir(self.settings.recollections_dir))
        except FileNotFoundError:
            return 0
        for entry in entries:
            if not entry.name.endswith(".json"):
                continue
            try:
                if entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
                    Path(entry.path[:-5] + ".state").unlink(missing_ok=True)
                    self._last_vector.pop(entry.name[:-5], None)
                    removed += 1
            except OSError as exc:
                log.warning("cannot remove stale recollection %s: %s", entry.path, exc)
        return removed
