"""A recipe assembled through a chain of failures, found without an LLM: how to run a command here.

The same call failed in two or more different ways, each time something changed (a step run first, the command
run another way, a constraint the session named), until it ran clean. The steps, in the order they were found (the
session's diagnosis when it said one), become one ``convention``: "To run `pytest` here: …; …; then `…` ran
clean." — told before that call runs again, where the next session would otherwise assemble it from scratch. Mined
with the round's lessons (``processor/memory/lessons.py``).
"""

from __future__ import annotations

import re

from processor.hook_kit.failure_keys import another_go, same_failure
from processor.hook_kit.tool_keys import command_keys
from processor.memory.bites import fit
from processor.memory.command_text import command_told
from processor.memory.commit_hooks import hook_failure
from processor.memory.diagnosis import diagnosis_in
from processor.memory.failed_calls import Failure, inspects, same_call, stages_only
from processor.memory.findings import Finding
from processor.memory.identity import episode_id
from processor.memory.kinds import scope_for
from processor.redaction import redact
from processor.store.episodes import StoredMessage
from processor.store.tool_calls import StoredToolCall

MIN_RECIPE_STEPS = 2
RECIPE_CHARS = 600
_QUOTED = re.compile(r""""[^"]*"|'[^']*'""")


def recipe_of(failures: list[Failure], in_round: list[StoredToolCall], replies: list[StoredMessage],
              project: str | None) -> Finding | None:
    """The recipe a round's failures assembled (the first chain that makes one), or None. A commit hook's refusals
    are not a recipe (``commit_hooks``: the step that avoids them is the lesson), nor is staging again a step."""
    failures = [f for f in failures if hook_failure(f.call.target, f.call.error) is None]
    for failure in failures:
        chain = [f for f in failures if f.fail_key == failure.fail_key and another_go(failure.key, f.key)
                 and (f.call.ts_ms or 0) >= (failure.call.ts_ms or 0)]
        distinct: list[Failure] = []
        for f in chain:
            if not any(same_failure(f.signature, d.signature) for d in distinct):
                distinct.append(f)
        if len(distinct) < MIN_RECIPE_STEPS:
            continue
        last = distinct[-1]
        later = in_round[in_round.index(last.call) + 1:]
        clean = next((c for c in later if same_call(last.call, c, last.key) and not c.failed and not inspects(c)),
                     None)
        if clean is None:
            return None  # never ran clean: a recipe for nothing
        steps = []
        for index, f in enumerate(distinct):
            until = distinct[index + 1].call if index + 1 < len(distinct) else clean
            step = _recipe_step(f, until, in_round, replies, project)
            if step is not None:
                steps.append(step)
        if len(steps) < MIN_RECIPE_STEPS:
            continue  # the code changed between the goes, not the way of running it: that is the work itself
        command = command_told(clean.target, 120, project)
        program = (failure.key[4:] if failure.key.startswith("cmd:") else failure.key).split()
        text = fit(f"To run `{' '.join(program[:3])}` here: " + "; ".join(steps) + f"; then `{command}` ran clean.",
                   RECIPE_CHARS)
        seed = f"recipe:{project}:{failure.fail_key}:{'|'.join(d.signature[0] for d in distinct)}"
        return Finding(id=episode_id(seed), kind="convention", summary=redact(text), full_content=redact(text),
                       entities=[redact(f"$ {command}")],
                       source_uuids=list(dict.fromkeys(u for d in distinct for u in (d.call.use_uuid,
                                                                                    d.call.result_uuid) if u)),
                       created_at=clean.ts_ms, miner="recipe", scope=scope_for(None, project))
    return None


def _recipe_step(failure: Failure, until: StoredToolCall, in_round: list[StoredToolCall],
                 replies: list[StoredMessage], project: str | None) -> str | None:
    """What got past one failure of a recipe's chain, when it was a way of working: a step run first, the
    command run another way, or a tool's constraint the session said. None when only the code changed in
    between (a type error fixed, a test made to pass: the work, not how to run it here), or when the session
    put it down to the code's own cause."""
    between = in_round[in_round.index(failure.call) + 1:in_round.index(until)]
    setup = [c for c in between if c.tool == "Bash" and not c.failed and c.target and not inspects(c)
             and any(k.startswith("cmd:") for k in command_keys(c.target)) and not stages_only(c.target)]
    changed = _shape(until.target) != _shape(failure.call.target)
    said = [m for m in replies if (failure.call.result_ts_ms or failure.call.ts_ms or 0) < (m.ts_ms or 0)
            <= (until.ts_ms or 0)]
    diagnosis = diagnosis_in(said)
    if diagnosis is not None and diagnosis[0] != "gotcha":
        return None  # the session put it down to the code's own cause: fixing that was the work
    if not (setup or changed or diagnosis is not None):
        return None
    if diagnosis is not None:
        return diagnosis[1].rstrip(".")
    return f"after “{fit(failure.error_line, 90)}”, `{command_told(until.target, 90, project)}`"


def _shape(command: str | None) -> str:
    """A command without what its quotes hold: another commit message or search text is not another way of
    running it."""
    return " ".join(_QUOTED.sub('""', command or "").split())
