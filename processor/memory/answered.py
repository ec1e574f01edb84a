"""A failure the agent asked the user about: the user's answer is what to do when it fails that way again.

Some failures are not the agent's to get past: a signing agent that is locked (cipher-box: "error: 1Password:
failed to fill whole buffer / fatal: failed to write commit object"), an expired login, a service only the user can
start. The agent retries, then asks; the user answers ("No, I'll fix 1Password" to "Commit without signing?"). The
next session that meets the same failure retries again, or commits unsigned, unless told: so the answer is a lesson
of that way of failing (``FailureFix``), told right after the same failure (``recall_hook/tool_failure.py``) — in
the user's words, with the question they answered.

Only a question asked right after the failure (the agent's very next call), and only the agent's question tool
(Claude Code's ``AskUserQuestion``, whose answer ``capture/signals.py`` keeps): an answer in a typed prompt may be
about anything the turn said.
"""

from __future__ import annotations

import re

from processor.memory.bites import fit
from processor.memory.command_text import command_told
from processor.memory.diagnosis import LESSON_CHARS
from processor.memory.failed_calls import failures_of
from processor.memory.findings import FailureFix, Finding, Round
from processor.memory.identity import episode_id
from processor.memory.kinds import scope_for
from processor.memory.lessons import FIX_CHARS
from processor.redaction import redact

ASKS_THE_USER = "AskUserQuestion"
# Claude Code's answer: `"<question>"="<answer>"`, one pair a question (``signals.outcome`` kept the pairs).
_PAIR = re.compile(r'"(?P<question>[^"]{1,600})"="(?P<answer>[^"]{1,400})"')
_LAST_QUESTION = re.compile(r"[^.!?\n]*\?\s*$")


def findings(round_: Round) -> list[Finding]:
    """The round's failures the agent asked the user about right after, each with the user's answer."""
    calls = round_.in_round
    failures = {failure.call.tool_use_id: failure for failure in failures_of(calls)}
    found: list[Finding] = []
    for before, call in zip(calls, calls[1:], strict=False):
        failure = failures.get(before.tool_use_id)
        answer = round_.answers.get(call.tool_use_id) if call.tool == ASKS_THE_USER else None
        pair = _PAIR.search(answer or "")
        if failure is None or pair is None or before.tool != "Bash":
            continue
        question = _asked(pair.group("question"))
        said = " ".join(pair.group("answer").split())
        # The command by what failed (`git commit`), not the whole call (`git add … && git commit -m …`).
        command = failure.key[4:] if failure.key.startswith("cmd:") else \
            command_told(before.target, root=round_.project) or before.tool
        fix = fit(f"asking the user — asked “{question}”, they answered “{said}”", FIX_CHARS)
        summary = fit(f"When `{command}` failed this way ({failure.error_line}), {fix}.", LESSON_CHARS)
        found.append(Finding(
            id=episode_id(f"answered:{round_.project}:{failure.fail_key}:{'|'.join(failure.signature)}"),
            kind="gotcha", summary=redact(summary), full_content=redact(summary), entities=[redact(f"$ {command}")],
            source_uuids=[u for u in (before.use_uuid, before.result_uuid, call.use_uuid, call.result_uuid) if u],
            created_at=before.ts_ms, miner="answered", scope=scope_for(None, round_.project),
            failure=FailureFix(key=failure.fail_key, signature=tuple(failure.signature), fix=redact(fix), uses=(),
                               session_fixed=True)))
    return found


def _asked(question: str) -> str:
    """The question itself: the last sentence of what was asked, when it ends in one ("…Commit without
    signing?")."""
    flat = " ".join(question.split())
    last = _LAST_QUESTION.search(flat)
    return last.group(0).strip() if last and len(last.group(0).strip()) > 8 else flat
