"""The variables a project's command came to be run with: what a session found the command needs here.

A session starts the API with ``pnpm --filter api dev``, meets what it lacks (the database is not on localhost,
uploads fail against a local IPFS node), and ends up starting it as ``DB_HOST=192.168.133.114
REDIS_HOST=192.168.133.114 IPFS_LOCAL_API_URL=http://192.168.133.114:5001 pnpm --filter api dev``. The next
session starts it bare and finds all of it again (cipher-box: three sessions in four days). Nothing failed in the
sense of an exit code — a server started in the background exits 0 — so no error fix is made; the session's runs
of the same command say it: the last run of it set variables that its first run did not.

One ``convention`` memory a project and command (miner ``settled``), made by the episodizer after a session ends
as the environment's is, replaced when a newer session settles on other variables. Told before a call of the same
command that sets none of them (``processor/recall/lesson_index.py``, ``recall_hook/pretooluse.py``), never before
one that sets them. A session that tried variables and went back to the bare command settled on nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from processor.clock import utc_date
from processor.hook_kit.tool_keys import HOOKED_KEYS, assigned, command_key, simple_commands
from processor.memory.command_text import command_told
from processor.memory.findings import Finding
from processor.memory.identity import episode_id
from processor.memory.kinds import scope_for
from processor.redaction import redact
from processor.store.tool_calls import StoredToolCall

SETTLED_CHARS = 260  # the command as it was last run, at most
MAX_NAMES = 5
# Not what a command is given to get past a check (`SKIP=ruff git commit`: the hooks' business,
# ``processor/memory/declined.py``), nor the shell's own search path (whether a shell has a program is known when
# it is not found: ``processor/memory/environments.py``).
_NOT_SETTLED = ("PATH",)


@dataclass(frozen=True)
class Settled:
    """A command a session ran bare and last ran with variables: as it was last run, and the variables added."""

    core: str  # the command without its variables, redirections and what ran after it: `pnpm --filter api dev`
    segment: str  # the last run, as typed (its variables first)
    added: tuple[str, ...]  # the variables its first run of the session lacked
    call: StoredToolCall


def _runs(call: StoredToolCall) -> Iterable[tuple[list[str], str, str]]:
    """Each simple command of a call that runs a program: (its variables, its core, the segment)."""
    for segment in simple_commands(call.target or ""):
        key = command_key(segment)
        if key is None or key in HOOKED_KEYS:
            continue
        names, core = assigned(segment)
        if core:
            yield [name for name in names if name not in _NOT_SETTLED], core, segment


def settled(calls: Iterable[StoredToolCall]) -> list[Settled]:
    """What the sessions of these calls (clean shell calls of one project, any order) settled on, the newest session's
    for each command."""
    by_session: dict[str, list[StoredToolCall]] = {}
    for call in calls:
        by_session.setdefault(call.session_id, []).append(call)
    found: dict[str, Settled] = {}
    for session_calls in by_session.values():
        runs: dict[str, list[tuple[list[str], str, StoredToolCall]]] = {}
        for call in sorted(session_calls, key=lambda c: c.ts_ms or 0):
            for names, core, segment in _runs(call):
                runs.setdefault(core, []).append((names, segment, call))
        for core, tries in runs.items():
            last_names, segment, call = tries[-1]
            added = tuple(name for name in last_names if name not in tries[0][0])
            if len(tries) < 2 or not added:
                continue
            known = found.get(core)
            if known is None or (known.call.ts_ms or 0) < (call.ts_ms or 0):
                found[core] = Settled(core, segment, added, call)
    return sorted(found.values(), key=lambda s: s.core)


def finding(project: str, settled_on: Settled) -> Finding:
    """The memory of the variables a command came to be run with here: told before it is run without them (its
    entities: the command as last run, and each variable)."""
    names = ", ".join(f"`{name}`" for name in settled_on.added[:MAX_NAMES])
    ran = command_told(settled_on.segment, SETTLED_CHARS, project)
    text = redact(f"Here `{settled_on.core}` was last run as `{ran}` ({utc_date(settled_on.call.ts_ms)}), after "
                  f"runs without {names}: the values it needed here.")
    sources = [u for u in (settled_on.call.use_uuid, settled_on.call.result_uuid) if u]
    return Finding(id=episode_id(f"settled:{project}:{text}"), kind="convention", summary=text, full_content=text,
                   entities=[redact(f"$ {settled_on.core}"), *settled_on.added[:MAX_NAMES]],
                   source_uuids=sources, created_at=settled_on.call.ts_ms, miner="settled",
                   scope=scope_for(None, project))
