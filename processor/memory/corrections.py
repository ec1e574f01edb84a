"""What the user corrected about named things, and how the user wants a file worked on: found without an LLM.

Two shapes of what a user says once and a later session needs again, at the call that touches the thing:

- **a correction about names**: "it's `orders.total_cents`, not `total`", "the data is in `library.sqlite`, not
  `books.db`", "no, the flag is `--dry-run`", "wrong file — the config lives in `settings.toml`". Filed under every
  name it gives (``processor/hook_kit/tool_keys.py`` name and file keys): told when a later call reads, searches or
  edits one of them;
- **how to work on a file**: "no explanatory comments in this script", "edit `README.md` in place, never a copy",
  "no emoji in these docs", "keep the text of this message". Filed under the file it names — or, when it says "this
  script"/"these docs", the file the session had just been working on — and told when that file is edited.

Both are the user's words (``preferences.user_sentences``: no code, quotes or pasted output, no questions), kept
as ``fact`` (a correction) or ``preference`` (a wish about a file) memories with origin ``correction`` or ``file``:
told at their call, not at prompts. English cues only.
"""

from __future__ import annotations

import re

from processor.memory.decisions import names_in
from processor.memory.findings import Finding, Round
from processor.memory.identity import episode_id
from processor.memory.kinds import scope_for
from processor.memory.preferences import _HEDGED, _VENTING, user_sentences
from processor.redaction import redact
from processor.store.tool_calls import StoredToolCall

# A correction: "X, not Y", "not X but Y", "no, it's X", "actually X", "wrong file", "is called X".
_CORRECTION = re.compile(
    r"\b(?:it'?s|it is|that'?s|that is|the \w+ is|they'?re|they are|use)\s+\S+(?:\s+\S+){0,3},?\s+not\s+\S"
    # "No, it's X" / "Actually X": a bare "No need to…", "No worries" is a request or a remark, not a correction.
    r"|\bnot\s+\S+(?:\s+\S+){0,2},?\s+but\s+\S|^\W*(?:no|nope|wrong)\b[,.:!]|^\W*actually\b[,.:! ]"
    r"|\bwrong (?:file|folder|directory|column|table|field|name|flag|option|branch|path|module|function|class|key|"
    r"variable|database|db|endpoint|url|port|service|repo|repository)\b"
    r"|\b(?:is|are) (?:called|named|spelled)\b|\b(?:lives|is|are) (?:in|under) `", re.IGNORECASE)
# A wish about how a file is worked on: what to leave out, keep or how to edit, said of a file.
_FILE_WISH = re.compile(
    r"\b(?:no|don'?t (?:add|use|put|write|include|leave)|do not (?:add|use|put|write|include|leave)|never (?:add|use|"
    r"put|write|include|create|make)|without|avoid|keep|leave)\b[^.]{0,60}\b(?:comments?|emoji|emojis|docstrings?|"
    r"copy|copies|backup|text|wording|formatting|format|style|indentation|tabs|spaces|headers?|type hints|"
    r"print statements|logging|line breaks|trailing)\b|\bin place\b|\bedit (?:it |them )?directly\b", re.IGNORECASE)
# "this script", "these docs": a file in hand, not named.
_THIS_FILE = re.compile(r"\b(?:this|that|these|those|the)\s+(?:script|file|files|module|doc|docs|document|"
                        r"documents|page|pages|test|tests|readme|component|config|notebook|stylesheet)\b",
                        re.IGNORECASE)
_EDITS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit", "Read"})
MAX_NAMES = 4


def _in_hand(calls: list[StoredToolCall], before_ms: int | None) -> str | None:
    """The file the session had just been working on before a message: its last edit (or read)."""
    earlier = [c for c in calls if c.tool in _EDITS and c.target and (before_ms is None or (c.ts_ms or 0) < before_ms)]
    edited = [c for c in earlier if c.tool != "Read"]
    return (edited or earlier)[-1].target if earlier else None


def _relative(path: str, project: str | None) -> str:
    root = (project or "").rstrip("/") + "/"
    return path[len(root):] if project and path.startswith(root) else path


def findings(round_: Round) -> list[Finding]:
    """The corrections and file wishes of a round's user messages, in order (miners ``correction``, ``file``)."""
    found: list[Finding] = []
    for message in round_.user_messages:
        # A correction is often short ("No, it's `total_cents`."): what it names carries it, not its words.
        for index, (sentence, words) in enumerate(user_sentences(message.text, min_words=2)):
            if _VENTING.search(words) or _HEDGED.search(words):
                continue
            names = [n for n in names_in(sentence) if n.lower() not in ("i", "we")][:MAX_NAMES]
            text = redact(sentence)
            common = dict(source_uuids=[message.uuid], created_at=message.ts_ms, scope=scope_for(None, round_.project))
            if _FILE_WISH.search(words):
                files = [n for n in names if "/" in n or "." in n.strip(".")]
                if not files and _THIS_FILE.search(words):
                    in_hand = _in_hand(round_.calls, message.ts_ms)
                    files = [_relative(in_hand, round_.project)] if in_hand else []
                if files:
                    found.append(Finding(id=episode_id(f"file:{message.uuid}:{index}"), kind="preference",
                                         summary=text, full_content=text, entities=[redact(f) for f in files],
                                         miner="file", **common))
                    continue
            if _CORRECTION.search(words) and names:
                found.append(Finding(id=episode_id(f"correction:{message.uuid}:{index}"), kind="fact", summary=text,
                                     full_content=text, entities=[redact(n) for n in names], miner="correction",
                                     **common))
    return found
