"""RecollectionWriter: on each new user message, precompute the bites the hook will inject.

The processor has the model loaded, so it does the search here and writes a small
file per session; the PreToolUse hook only reads that file (seed 001). A message
on the same topic as the previous one (cosine > topic_gate) keeps the existing
file, so the agent is not shown the same memories again and again.

Files in ``recollections_dir``, per session (the hooks' side: ``recall_hook/``, ``processor/hook_kit/``):
- ``<session>.json``: ``{messageUuid, timestamp, bites: [{id, bite, date, importance}]}``, written
  here, atomically;
- ``<session>.state``: the PreToolUse hook's record of the last message it injected;
- ``<session>.prompt``: ids the optional UserPromptSubmit hook already showed in this session;
- ``<session>.digest``: ids the SessionStart digest showed in this session (written by
  ``recall_hook/session_start.py``); the ids of both markers are left out of the bites written here.
- ``<session>.off``: the session opted out (``processor/capture/optout.py``): its level, ``memory`` or
  ``record``. The hooks inject nothing for it and this writer writes nothing; it is kept (a resumed
  session stays opted out).
All but ``.off`` are removed once the session has been idle for ``recollection_idle_hours``.

A forgotten memory, or one dropped with an off-the-record session, is taken out of every recollection
file at once (``drop_bites``), and the writer re-reads its bites' status just before writing, so a
memory forgotten during a search is not written back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from pathlib import Path

import numpy as np

from processor.capture.captured import CapturedLine
from processor.capture.optout import MEMORY, OFF_SUFFIX, RECORD
from processor.clock import now_ms, utc_date
from processor.config import Settings, SettingsSource
from processor.files import ensure_private_dir, write_atomic
from processor.hook_kit import hook_io
from processor.memory.citations import extract, missing_paths_on_disk
from processor.memory.episode_store import EpisodeStore
from processor.memory.unasked import offers
from processor.recall.file_map import FileMap
from processor.recall.lesson_index import LessonIndex
from processor.recall.recap import NAMED, UNNAMED, asks_for_last_session, recap_bite
from processor.store import episodes as episodes_sql
from processor.store import sessions, write_transaction
from processor.store import viewer as viewer_sql
from processor.store.episodes import Episode

log = logging.getLogger(__name__)

_SAFE_SESSION = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# The session's files the hooks write and read beside its recollection (their names are the kit's).
STATE_SUFFIX = hook_io.STATE_SUFFIX
PROMPT_SUFFIX = hook_io.PROMPT_SUFFIX
DIGEST_SUFFIX = hook_io.DIGEST_SUFFIX
SHOWN_SUFFIX = hook_io.SHOWN_SUFFIX
_SESSION_FILES = (".json", STATE_SUFFIX, PROMPT_SUFFIX, DIGEST_SUFFIX, SHOWN_SUFFIX)
_MARKER_LIMIT = 16 * 1024
_DIGEST_LIMIT = 64 * 1024
_RECOLLECTION_LIMIT = hook_io.RECOLLECTION_LIMIT
# User lines Claude Code writes itself when the user interrupts: no topic to recall anything for.
_NOT_PROMPTS = ("[Request interrupted by user",)


def recollection_path(recollections_dir: Path, session_id: str) -> Path:
    if not _SAFE_SESSION.match(session_id) or session_id.startswith("."):
        raise ValueError(f"unsafe session id {session_id!r}")
    return recollections_dir / f"{session_id}.json"


_MIN_TOPIC_WORDS = 3


def prompt_shown_ids(recollections_dir: Path, session_id: str) -> frozenset[str]:
    """Ids the hooks already showed in this session: the UserPromptSubmit hook's ``<session>.prompt``
    marker, the SessionStart digest's ``<session>.digest`` and the PreToolUse hook's ``<session>.shown``."""
    return (_marker_ids(recollections_dir, session_id, PROMPT_SUFFIX, _MARKER_LIMIT)
            | _marker_ids(recollections_dir, session_id, DIGEST_SUFFIX, _DIGEST_LIMIT)
            | _marker_ids(recollections_dir, session_id, SHOWN_SUFFIX, _MARKER_LIMIT))


def _marker_ids(recollections_dir: Path, session_id: str, suffix: str, limit: int) -> frozenset[str]:
    """The ids a hook's marker lists: ``shown`` (and, in ``<session>.shown``, ``asked``: a message's bites, told
    once a session like the rest; offering them again would only have the hook drop them)."""
    try:
        with open(recollections_dir / f"{session_id}{suffix}", "rb") as f:
            marker = json.loads(f.read(limit + 1)[:limit])
    except (OSError, ValueError):
        return frozenset()
    if not isinstance(marker, dict):
        return frozenset()
    lists = [marker.get(name) for name in ("shown", "asked")]
    return frozenset(i for ids in lists if isinstance(ids, list) for i in ids if isinstance(i, str))


def record_opt_out(recollections_dir: Path, session_id: str, level: str) -> None:
    """The session opted out: leave ``<session>.off`` for the hooks, then remove its recollection."""
    folder = ensure_private_dir(recollections_dir)
    recollection_path(folder, session_id)  # refuses an unsafe session id
    write_atomic(folder / f"{session_id}{OFF_SUFFIX}", level)
    for suffix in (".json", PROMPT_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / f"{session_id}{suffix}")


def requested_opt_out(recollections_dir: Path, session_id: str) -> str | None:
    """The level in ``<session>.off`` (left by the SessionStart hook for ENGRAM_OFF=record), if any."""
    if not _SAFE_SESSION.match(session_id):
        return None
    try:
        with open(recollections_dir / f"{session_id}{OFF_SUFFIX}", "rb") as f:
            text = f.read(64).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return RECORD if text == RECORD else MEMORY


def drop_bites(recollections_dir: Path, ids: set[str] | frozenset[str]) -> int:
    """Remove these memories from every recollection file and every project's lesson index; returns how
    many files were rewritten."""
    if not ids:
        return 0
    rewritten = LessonIndex(recollections_dir).drop(ids)
    try:
        entries = list(os.scandir(recollections_dir))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if not entry.name.endswith(".json") or entry.name.startswith("."):
            continue
        try:
            with open(entry.path, "rb") as f:
                data = json.loads(f.read(_RECOLLECTION_LIMIT + 1)[:_RECOLLECTION_LIMIT])
        except (OSError, ValueError):
            continue
        bites = data.get("bites") if isinstance(data, dict) else None
        if not isinstance(bites, list):
            continue
        kept = [b for b in bites if not (isinstance(b, dict) and b.get("id") in ids)]
        if len(kept) != len(bites):
            data["bites"] = kept
            write_atomic(Path(entry.path), json.dumps(data, ensure_ascii=False))
            rewritten += 1
    return rewritten


# Sessions whose previous user message's vector is kept for the topic gate; past this, the least recently
# active session's is dropped (its next message then gets fresh bites, as after a restart).
MAX_TOPIC_SESSIONS = 256


class RecollectionWriter:
    def __init__(self, settings: SettingsSource) -> None:
        self._settings = settings
        # session id → (embedding of its previous user message, when it came), least recently active first.
        # Only active sessions have one: the idle sweep drops sessions quiet for idle_minutes.
        self._last_vector: dict[str, tuple[np.ndarray, float]] = {}
        self.lessons = LessonIndex(self.settings.recollections_dir)
        self.files = FileMap(self.settings.recollections_dir)  # beside it: where the project's files are

    @property
    def settings(self) -> Settings:
        return self._settings.current

    def handle(self, store: EpisodeStore, session_id: str, line: CapturedLine) -> Path | None:
        """The memory thread's Recollect request: one captured user message."""
        if line.text.startswith(_NOT_PROMPTS) or self._stale(line) or self._superseded(store, session_id, line.uuid):
            return None
        if sessions.session_opt_out(store.conn, session_id) is not None:
            return None  # no bites for a session that opted out
        return self.write(store, session_id, line.uuid, line.text, project=self._project(store, session_id))

    def _stale(self, line: CapturedLine) -> bool:
        """A message from an idle session's past (a backfill or the first pass): no hook will read it."""
        cutoff = time.time() - self.settings.recollection_idle_hours * 3600
        return line.ts_ms is not None and line.ts_ms / 1000 < cutoff

    @staticmethod
    def _superseded(store: EpisodeStore, session_id: str, message_uuid: str) -> bool:
        """A later user message of the session is already captured; its own request follows this one."""
        newest = sessions.newest_prompt_uuid(store.conn, session_id, not_prefix=_NOT_PROMPTS[0])
        return newest is not None and newest != message_uuid

    @staticmethod
    def _project(store: EpisodeStore, session_id: str) -> str | None:
        progress = episodes_sql.session_progress(store.conn, session_id)
        return progress[0] if progress else None

    def refresh_lessons(self, store: EpisodeStore, session_id: str) -> None:
        """The lesson index of the session's project, once its rounds became memories: what it learned last (a rule
        said in its final round) is filed before the project's next session starts, not at that session's first
        prompt."""
        project = self._project(store, session_id)
        if project:
            self.lessons.refresh(store.conn, project, project)

    def write(self, store: EpisodeStore, session_id: str, message_uuid: str, text: str,
              project: str | None) -> Path | None:
        """Search memories for the message and replace the session's recollection file.

        Returns the file written, or None when the topic gate kept the existing one.
        """
        folder = ensure_private_dir(self.settings.recollections_dir)
        path = recollection_path(folder, session_id)
        if len(text.split()) < _MIN_TOPIC_WORDS and path.exists():
            # "yes", "go on": no topic of its own; the conversation is still on the previous one.
            os.utime(path)
            return None
        vector = store.embedder.embed_query(text)
        previous = self._remember_topic(session_id, vector)
        if previous is not None and float(previous @ vector) > self.settings.topic_gate and path.exists():
            os.utime(path)  # the session is active: keep its file from the idle cleanup
            return None
        exclude = self._recent_episode_ids(store, session_id) | prompt_shown_ids(folder, session_id)
        # Silence unless a memory clears the bar (processor.memory.unasked): most messages get no bites.
        found = offers(store.conn, store.index, text, vector, project, exclude, limit=self.settings.recollection_bites)
        # Read the markers again: a hook may have shown some of these during the search.
        shown = prompt_shown_ids(folder, session_id)
        found = [o for o in found if o.episode.id not in shown and not self._cites_missing_file(o.episode, project)]
        bites = [{"id": o.episode.id, "bite": o.bite, "date": utc_date(o.episode.created_at),
                  "importance": o.episode.importance, "kind": o.episode.kind} for o in found]
        # Forgotten while the search ran (memory_forget, `engram forget`): never written back.
        active = episodes_sql.active_ids(store.conn, [b["id"] for b in bites])
        bites = [b for b in bites if b["id"] in active]
        asked = asks_for_last_session(text)  # "where did we leave off?": what the last session did, first
        # A session with prompts before this one (its recollection file, or its captured messages) asks about itself.
        if asked == NAMED or (asked == UNNAMED and not path.exists()
                              and not episodes_sql.other_prompts(store.conn, session_id, message_uuid)):
            recap = recap_bite(store.conn, project, session_id)
            if recap is not None and recap["id"] not in shown:
                bites.insert(0, recap)
        if bites:  # the ledger of what may reach the agent: the hook's state file later confirms it did
            with write_transaction(store.conn):
                viewer_sql.record_offer(store.conn, session_id, message_uuid, bites, now_ms())
        lessons = self.lessons.refresh(store.conn, project, project)
        record = {"messageUuid": message_uuid, "timestamp": now_ms(), "bites": bites, "lessons": lessons,
                  "root": project, "branch": sessions.current_branch(store.conn, session_id)}
        write_atomic(path, json.dumps(record, ensure_ascii=False))
        self.files.refresh(store.conn, project, project, session_id)  # after: the prompt's hook waits for it
        return path

    def _remember_topic(self, session_id: str, vector: np.ndarray) -> np.ndarray | None:
        """Keep the session's newest message vector for its next message; returns the previous one."""
        previous = self._last_vector.pop(session_id, None)
        self._last_vector[session_id] = (vector, time.monotonic())  # re-inserted: the most recent last
        while len(self._last_vector) > MAX_TOPIC_SESSIONS:
            del self._last_vector[next(iter(self._last_vector))]
        return previous[0] if previous is not None else None

    def forget_quiet_topics(self, now: float | None = None) -> int:
        """Drop the topic of every session with no user message for idle_minutes; returns how many."""
        cutoff = (time.monotonic() if now is None else now) - self.settings.idle_minutes * 60
        kept = {sid: topic for sid, topic in self._last_vector.items() if topic[1] >= cutoff}
        dropped = len(self._last_vector) - len(kept)
        if dropped:
            self._last_vector = kept  # a new dict: one that held many sessions keeps its size when emptied
        return dropped

    @property
    def sessions_in_memory(self) -> int:
        """Sessions this writer keeps anything for (their previous message's vector)."""
        return len(self._last_vector)

    @staticmethod
    def _cites_missing_file(episode: Episode, project: str | None) -> bool:
        """The inquisitor's cheapest check, before its job runs: a bite citing a file gone from disk is not shown."""
        missing = missing_paths_on_disk(project, extract(episode.full_content, episode.entities, project))
        if missing:
            log.info("bite %s not shown: it cites %s, which is no longer in %s", episode.id, missing[0], project)
        return bool(missing)

    def _recent_episode_ids(self, store: EpisodeStore, session_id: str) -> frozenset[str]:
        """Episodes made from this session's last few turns: the agent has just seen them."""
        return episodes_sql.newest_session_episode_ids(store.conn, session_id, self.settings.recollection_skip_recent)

    def remove_idle(self, now: float | None = None) -> int:
        """Delete the files of sessions idle longer than recollection_idle_hours; returns sessions removed.

        A session's activity is its newest file's mtime (the writer touches the recollection file even
        when the topic gate keeps it). Temp files left by a crash are removed once as old.
        """
        self.forget_quiet_topics()
        now = time.time() if now is None else now
        cutoff = now - self.settings.recollection_idle_hours * 3600
        try:
            entries = list(os.scandir(self.settings.recollections_dir))
        except FileNotFoundError:
            return 0
        newest: dict[str, float] = {}
        files: dict[str, list[str]] = {}
        for entry in entries:
            try:
                mtime = entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                if mtime < cutoff:
                    self._unlink(entry.path)
                continue
            session_id, suffix = next(((entry.name[: -len(s)], s) for s in _SESSION_FILES
                                       if entry.name.endswith(s)), (None, None))
            if not session_id or session_id.startswith("."):
                continue  # the hook's lock file, foreign files: not ours to judge
            newest[session_id] = max(newest.get(session_id, 0.0), mtime)
            files.setdefault(session_id, []).append(entry.path)
        removed = 0
        for session_id, mtime in newest.items():
            if mtime >= cutoff:
                continue
            # The recollection first: the PreToolUse hook without it does nothing, whatever the state.
            for path in sorted(files[session_id], key=lambda p: not p.endswith(".json")):
                self._unlink(path)
            self._last_vector.pop(session_id, None)
            removed += 1
        for session_id in list(self._last_vector):
            if session_id not in newest:  # its file was removed by someone else: start afresh
                del self._last_vector[session_id]
        return removed

    @staticmethod
    def _unlink(path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cannot remove stale recollection file %s: %s", path, exc)
