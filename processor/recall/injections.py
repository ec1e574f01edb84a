"""Which injections reached the agent: the ledger of offered bites, hook injections and SessionStart digests.

Injections are recorded for real, without slowing the hooks down:

- **bites.** When the processor writes a session's recollection file it records the same bites as an
  *offer* for that user message (``RecollectionWriter.write``, same thread, same moment). The
  PreToolUse hook, when it injects, already writes ``<session>.state`` (``lastInjectedMessageUuid``)
  under its lock, atomically; that file is the proof of injection and its mtime the time. ``ingest``
  turns each state file into an injection row once (the offer's bites, the hook's time). The hook is
  unchanged: not one more syscall on its hot path.
- **told about a tool call.** What the PreToolUse hook told about the file or command in hand is listed in
  ``<session>.shown`` (written under its lock when it tells); ``ingest`` records each memory once per session
  as a ``bites`` injection keyed ``tool:<memory id>``, with the memory's statement as it was told.
- **where a file is.** Right after a call failed on a path that is not there, the failure hook may tell where the
  project's file of that name is (``processor/hook_kit/where_files.py``); it lists ``where:<path>`` in
  ``<session>.shown``, recorded the same way with the path as its statement; so is the project's branch of the
  number a call named (``processor/hook_kit/branches.py``: ``branch:<name>``).
- **digest.** The SessionStart hook leaves ``<session>.digest`` (the ids it showed, which the bite
  writer leaves out, its text and its time, written atomically); ``ingest`` records each digest once
  (by its time) and leaves the file, which is removed with the session's other files when it idles.

``ingest`` runs on the memory thread when the recollections folder changes (a watcher) and with each
periodic sweep, so an injection shows up in the viewer within about a second.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import apsw

from processor.clock import now_ms, utc_date
from processor.hook_kit import branches, hook_io
from processor.memory import tool_roles
from processor.memory.unasked import bite_of
from processor.store import episodes as episodes_sql
from processor.store import viewer as sql
from processor.store import write_transaction

log = logging.getLogger(__name__)

WHERE_PREFIX = "where:"  # processor/hook_kit/where_files.py: where a missed path's file is
USES_PREFIX = tool_roles.PREFIX  # processor/memory/tool_roles.py: what the project runs for a job (its linter, …)
BRANCH_PREFIX = branches.PREFIX  # processor/hook_kit/branches.py: the project's branch of a number

# Written by the hooks (processor/hook_kit/hook_io.py write_state and claim_shown, processor/recall/digest.py
# write_digest_ids for the SessionStart hook).
STATE_SUFFIX = hook_io.STATE_SUFFIX
DIGEST_SUFFIX = hook_io.DIGEST_SUFFIX
SHOWN_SUFFIX = hook_io.SHOWN_SUFFIX
_FILE_LIMIT = 256 * 1024
OFFER_RETENTION_MS = 7 * 86_400_000  # an offer not injected within a week never will be


def _read(path: Path) -> object:
    with open(path, "rb") as fh:
        data = fh.read(_FILE_LIMIT + 1)
    if len(data) > _FILE_LIMIT:
        raise ValueError("too large")
    return json.loads(data)


def ingest(conn: apsw.Connection, recollections_dir: Path) -> int:
    """Record every injection the hooks' files reveal; returns how many are new."""
    try:
        entries = [e for e in os.scandir(recollections_dir)
                   if not e.name.startswith(".") and e.name.endswith((STATE_SUFFIX, DIGEST_SUFFIX, SHOWN_SUFFIX))]
    except FileNotFoundError:
        return 0
    states: list[tuple[str, str, int]] = []
    digests: list[tuple[Path, str, str, int]] = []
    told: list[tuple[str, list[str], int]] = []
    for entry in entries:
        path = Path(entry.path)
        try:
            mtime_ms = entry.stat(follow_symlinks=False).st_mtime_ns // 1_000_000
            data = _read(path)
        except (OSError, ValueError):
            continue  # being replaced right now, or not ours: the next pass sees it
        if entry.name.endswith(STATE_SUFFIX):
            uuid = data.get("lastInjectedMessageUuid") if isinstance(data, dict) else None
            if isinstance(uuid, str) and uuid:
                states.append((entry.name[: -len(STATE_SUFFIX)], uuid, mtime_ms))
        elif entry.name.endswith(SHOWN_SUFFIX):
            shown = data.get("shown") if isinstance(data, dict) else None
            if isinstance(shown, list) and shown:
                told.append((entry.name[: -len(SHOWN_SUFFIX)], [i for i in shown if isinstance(i, str)], mtime_ms))
        elif isinstance(data, dict) and isinstance(data.get("text"), str):
            at = data.get("at")
            digests.append((path, entry.name[: -len(DIGEST_SUFFIX)], data["text"],
                            at if isinstance(at, int) else mtime_ms))
    if not states and not digests and not told:
        return 0
    new = 0
    with write_transaction(conn):
        for session_id, uuid, at in sorted(states, key=lambda s: s[2]):
            new += sql.mark_injected(conn, session_id, uuid, at)
        for _path, session_id, text, at in sorted(digests, key=lambda d: d[3]):
            new += sql.insert_digest(conn, session_id, text, at)
        for session_id, ids, at in told:
            fresh = sql.not_told(conn, session_id, ids)
            for episode in episodes_sql.episodes_by_id(conn, fresh):
                new += sql.insert_told(conn, session_id, episode.id, [{
                    "id": episode.id, "bite": bite_of(episode), "date": utc_date(episode.created_at),
                    "importance": episode.importance, "kind": episode.kind, "at": "tool"}], at)
            for told_id in fresh:
                if told_id.startswith(WHERE_PREFIX):  # where the file a failed call missed is: no memory of its own
                    path = told_id[len(WHERE_PREFIX):]
                    statement = f"This project's `{path.rpartition('/')[2]}` is `{path}`."
                elif told_id.startswith(USES_PREFIX):  # what the project runs for a job another program was missed for
                    statement = f"This project runs `{told_id[len(USES_PREFIX):]}` for that job."
                elif told_id.startswith(BRANCH_PREFIX):  # the project's branch of the number a call named
                    statement = f"This project's branch of that number is `{told_id[len(BRANCH_PREFIX):]}`."
                else:
                    continue
                new += sql.insert_told(conn, session_id, told_id, [{
                    "id": told_id, "bite": statement, "date": utc_date(at), "importance": "normal", "kind": "fact",
                    "at": "tool"}], at)
        sql.prune_offers(conn, now_ms() - OFFER_RETENTION_MS)
    if new:
        log.debug("recorded %d injections", new)
    return new
