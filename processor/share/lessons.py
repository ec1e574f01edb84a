"""What makes a memory tellable on another machine: its lesson, as it leaves one machine and is filed on another.

On the machine that learned it, a memory an error's fix made is told by what the local tables say of it: the miner
that made it (``store/origins.py``: an error's fix is told at its call, never at a prompt) and the failure it tells
the fix of (``store/failures.py``: its key and signature, the fix in a line, the words the fix adds — a call that
has them already applies it — and the sessions that met the failure: told before the call only once it recurred).
None of that is in the memory's row, so it travels beside it as one JSON object, its *lesson* (the shared
database's ``memories.lesson``, migration p005)::

    {"v": 1, "miner": "error_fix", "agent": "claude", "machines": ["m_…"],
     "failure": {"key": "fail:pytest", "call": "cmd:pytest", "signature": ["…"], "fix": "…", "uses": ["…"],
                 "sessions": {"<session id>": <ms>}, "first_ms": <ms>, "last_ms": <ms>}}

- **Leaving** (``outgoing``): read from the local tables, every text redacted again, laid over the lesson as other
  machines last sent it, so the fields a newer Engram added travel on untouched.
- **Arriving** (``parse``): the fields this version knows are checked (one of the wrong type refuses the row, as
  any bad server data); the others are kept and ignored. The format only grows: a field that changes meaning
  gets a new name.
- **Filed** (``file``): in the receiver's own clone of the project, as its own miner would have filed it — the
  origin, and the failure with the memory that tells its fix — so every hook tells it as a local fix, by the same
  rules. A failure met here and elsewhere is one row: its sessions are the union of both. Two memories of one
  failure (learned on two machines before either heard of the other) become one on every machine alike: the
  first learned (then the lower id) tells it, the other is superseded by it. A failure whose memory was forgotten
  here (marked wrong) stays silent: a copy learned elsewhere is superseded by the forgotten one.
- A memory of a project with no clone here is kept with its lesson and filed nowhere; when a clone appears
  (``relocated``), its paths move to that clone and its failure is filed there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import apsw

from processor.hook_kit.failure_keys import same_failure
from processor.redaction import Redacted, redact, redacted_json, redacted_list
from processor.store import episodes as episodes_sql
from processor.store import failures as failures_sql
from processor.store import origins as origins_sql
from processor.store import share as sql

FORMAT = 1
MAX_BYTES = 65_536  # the server's bound too (migration p005)
MAX_SESSIONS = 500
MAX_MACHINES = 100
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


class BadLesson(ValueError):
    """A pulled lesson whose known fields are not what this version reads; the message says which."""


@dataclass(frozen=True)
class Failure:
    """The way of failing a memory tells the fix of, as ``store/failures.py`` keeps it."""

    key: str  # ``fail:<program>``: where the hooks look failures of its kind up
    call: str  # the failed call's key (``cmd:pytest``)
    signature: list[Redacted]
    fix: Redacted  # what fixed it, in a line
    uses: list[Redacted]  # the words the fix added to the command: a call that has them applies it
    sessions: dict[str, int]  # the sessions that met it, and when
    first_ms: int | None
    last_ms: int | None


@dataclass(frozen=True)
class Lesson:
    """A pulled lesson: what this version reads of it, and the whole object as it came (kept, sent on)."""

    raw: dict[str, Any]
    miner: str | None
    agent: str | None
    machines: list[str]
    failure: Failure | None


@dataclass
class Filed:
    """What filing pulled lessons changed: the projects whose lesson index is out of date, and this person's memories
    changed here (superseded by a copy, or met in sessions the server does not count yet) that must be pushed."""

    roots: set[str] = field(default_factory=set)
    queued: set[str] = field(default_factory=set)


# --- leaving --------------------------------------------------------------------------------------------------


def _loads(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def outgoing(conn: apsw.Connection, memory_ids: list[str], machine_id: str) -> dict[str, Redacted]:
    """The lesson of each of these memories that has one (a miner made it, it tells a failure's fix, or another
    machine sent one), as JSON with every text redacted again."""
    origins = origins_sql.origins(conn, memory_ids)
    fixes = failures_sql.of_memories(conn, memory_ids)
    held = sql.pulled_lessons(conn, memory_ids)
    wanted = [i for i in memory_ids if i in origins or i in fixes or i in held]
    if not wanted:
        return {}
    agents = sql.session_agents(conn, wanted)
    met_here = sql.captured_sessions(conn, sorted({s for fix in fixes.values() for s in fix.sessions}))
    out: dict[str, Redacted] = {}
    for memory_id in wanted:
        payload = _loads(held.get(memory_id))  # what other machines sent: fields unknown here stay
        version = payload.get("v")
        payload["v"] = version if isinstance(version, int) and version > FORMAT else FORMAT
        if memory_id in origins:
            payload["miner"] = origins[memory_id]
        if memory_id in agents:
            payload["agent"] = agents[memory_id]
        fix = fixes.get(memory_id)
        if fix is not None:
            before = payload.get("failure")
            payload["failure"] = {**(before if isinstance(before, dict) else {}),
                                  "key": fix.fail_key, "call": fix.call_key, "signature": fix.signature,
                                  "fix": fix.fix or "", "uses": list(fix.uses or []), "sessions": fix.sessions,
                                  "first_ms": fix.first_ms, "last_ms": fix.last_ms}
            machines = {m for m in payload.get("machines") or [] if isinstance(m, str)}
            if any(session in met_here for session in fix.sessions):
                machines.add(machine_id)
            payload["machines"] = sorted(machines)
        text = redacted_json(payload, sort_keys=True)
        if len(text.encode()) <= MAX_BYTES:
            out[memory_id] = text
    return out


# --- arriving -------------------------------------------------------------------------------------------------


def _text(value: Any, name: str, limit: int, *, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise BadLesson(f"{name} is not text of at most {limit} characters")
    return value


def _name(value: Any, name: str) -> str | None:
    text = _text(value, name, 40)
    if text is not None and (not text or not set(text) <= _NAME_CHARS):
        raise BadLesson(f"{name} {text[:40]!r} is not a name")
    return text


def _texts(value: Any, name: str, most: int, limit: int) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > most or not all(isinstance(v, str) and len(v) <= limit
                                                                   for v in value):
        raise BadLesson(f"{name} is not a list of at most {most} texts")
    return value


def _ms(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadLesson(f"{name} is not a time in ms")
    return value


def _failure(value: Any) -> Failure | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadLesson("failure is not an object")
    key = _text(value.get("key"), "failure.key", 300, optional=False) or ""
    if not key.startswith("fail:"):
        raise BadLesson("failure.key is not a failure key (fail:…)")
    signature = _texts(value.get("signature"), "failure.signature", 10, 500)
    if not signature:
        raise BadLesson("failure.signature is empty")
    sessions = value.get("sessions") or {}
    if not isinstance(sessions, dict) or len(sessions) > MAX_SESSIONS:
        raise BadLesson("failure.sessions is not an object of sessions")
    for session_id, at in sessions.items():
        if len(session_id) > 200 or not isinstance(at, int) or isinstance(at, bool) or at < 0:
            raise BadLesson("failure.sessions is not an object of sessions")
    # Through this machine's door (its rules may be newer than the sender's), each text once.
    return Failure(key=key, call=_text(value.get("call"), "failure.call", 300) or key,
                   signature=redacted_list(signature), fix=redact(_text(value.get("fix"), "failure.fix", 2000) or ""),
                   uses=redacted_list(_texts(value.get("uses"), "failure.uses", 20, 200)), sessions=dict(sessions),
                   first_ms=_ms(value.get("first_ms"), "failure.first_ms"),
                   last_ms=_ms(value.get("last_ms"), "failure.last_ms"))


def parse(value: Any) -> Lesson | None:
    """A pulled lesson (None: the memory has none, or an older client sent it); raises BadLesson."""
    if value is None:
        return None
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError:
            raise BadLesson("is not JSON") from None
    if not isinstance(value, dict):
        raise BadLesson("is not an object")
    if len(json.dumps(value)) > MAX_BYTES:
        raise BadLesson(f"is over {MAX_BYTES} bytes")
    failure = _failure(value.get("failure"))
    if failure is not None:  # the redacted texts in the lesson kept: its storing scans only the rest
        value = {**value, "failure": {**value["failure"], "signature": failure.signature, "fix": failure.fix,
                                      "uses": failure.uses}}
    return Lesson(raw=value, miner=_name(value.get("miner"), "miner"), agent=_name(value.get("agent"), "agent"),
                  machines=_texts(value.get("machines"), "machines", MAX_MACHINES, 200), failure=failure)


# --- filed ----------------------------------------------------------------------------------------------------


def moved(values: list[str], theirs: str | None, ours: str | None) -> list[str]:
    """A memory's anchors (the paths it names, alone or in a command) under another clone's root, moved under
    this machine's clone: the root itself, or a path in it (not a sibling whose name merely begins the same)."""
    if not theirs or not ours or theirs == ours or not theirs.startswith("/"):
        return values
    root = re.compile(r"(?<![\w./-])" + re.escape(theirs.rstrip("/")) + r"(?=$|[/\s'\"`:;,)])")
    return [root.sub(ours.rstrip("/").replace("\\", "\\\\"), value) for value in values]


Owns = Callable[[str], bool]  # memory id → whether it is this person's (its changes may be pushed)


def file(conn: apsw.Connection, memory_id: str, lesson: Lesson, root: str | None, owns: Owns, stamp: int,
         filed: Filed) -> None:
    """File a pulled memory's lesson here (in the caller's transaction): keep it as it came, note its miner, and
    (root: this machine's clone of its project, None when there is none) file its failure there."""
    sql.save_lesson(conn, memory_id, redacted_json(lesson.raw))
    if lesson.miner:
        origins_sql.set_origin(conn, memory_id, lesson.miner)
    if lesson.failure is not None and root is not None:
        _file_failure(conn, memory_id, lesson.failure, root, owns, stamp, filed)


def _file_failure(conn: apsw.Connection, memory_id: str, failure: Failure, root: str, owns: Owns, stamp: int,
                  filed: Filed) -> None:
    pulled = episodes_sql.get_episode(conn, memory_id)
    telling = pulled is not None and pulled.status == "active"
    known = failures_sql.signatures_for(conn, root, failure.key)
    row = next((r for r in known if same_failure(r.signature, failure.signature)), None)
    if row is None:
        if not telling:
            return  # superseded elsewhere, or forgotten here: nothing to tell of this failure
        row = failures_sql.add_known(conn, root, failure.key, failure.call, failure.signature, failure.sessions,
                                     failure.first_ms, failure.last_ms,
                                     crowded=len(known) >= failures_sql.ROWS_PER_KEY)
        failures_sql.relink(conn, row.id, memory_id, failure.fix, failure.uses)
        filed.roots.add(root)
        return
    merged = failures_sql.merge_sessions(conn, row, failure.sessions, failure.first_ms, failure.last_ms)
    changed = merged is not row
    teller = row.memory_id
    if telling and teller != memory_id:
        winner, loser = _one_of(conn, teller, memory_id, pulled.created_at if pulled else 0)
        if winner == memory_id:
            failures_sql.relink(conn, row.id, memory_id, failure.fix, failure.uses)
        if loser is not None:
            episodes_sql.supersede(conn, loser, winner, stamp)
            if owns(loser):
                filed.queued.add(loser)
        teller, changed = winner, True
    if teller and owns(teller) and set(merged.sessions) - set(failure.sessions):
        filed.queued.add(teller)  # met here in sessions the server does not count yet
    if changed:
        filed.roots.add(root)


def _one_of(conn: apsw.Connection, teller: str | None, pulled: str, pulled_at: int) -> tuple[str, str | None]:
    """(the memory that tells a failure's fix, the one superseded by it) of the failure's memory here and a pulled
    one of the same failure; the same answer on every machine, whichever it heard of first."""
    current = episodes_sql.get_episode(conn, teller) if teller else None
    if current is None or current.status in ("superseded", "stale", "archived"):
        return pulled, None
    if current.status == "forgotten":
        return current.id, pulled  # marked wrong (or forgotten) here: this failure stays silent
    first = min((current.created_at, current.id), (pulled_at, pulled))[1]
    return first, (pulled if first == current.id else current.id)


def relocated(conn: apsw.Connection, memory_ids: list[str], root: str, owns: Owns, stamp: int, filed: Filed) -> None:
    """Pulled memories of a project that now has a clone here (it had none when they came): their paths move under
    the clone and their failures are filed there (in the caller's transaction)."""
    held = sql.pulled_lessons(conn, memory_ids)
    for memory_id in memory_ids:
        episode = episodes_sql.get_episode(conn, memory_id)
        if episode is None:
            continue
        sql.move_replica(conn, memory_id, root, moved(episode.entities, episode.project, root))
        try:
            lesson = parse(held.get(memory_id))
        except BadLesson:
            continue  # checked when it was pulled: only a lesson from an older Engram's checks is not filed
        if lesson is not None:
            file(conn, memory_id, lesson, root, owns, stamp, filed)
        filed.roots.add(root)
