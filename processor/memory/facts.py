"""Facts about the project's files, stated by the assistant after it looked: found without an LLM.

A session explores (reads, searches, lists) and then says what it found about a path or a name of the project:
"There is no `ConnCase` module", "`favicons/token.svg` doesn't exist in the tokenizer repo", "`dist/` is
git-ignored", "`xterm.css` was force-added", "`tokens.ts` is generated from the schema", "`theme.css` is
hand-written", "`ConnCase` lives in `test/support/`". The next session that touches that path or looks for that
name would explore again, or fail on the missing file. Each such statement becomes a ``fact`` memory keyed to
what it is about (``file:<path>`` and its folder, or ``name:<name>``: ``processor/hook_kit/tool_keys.py``), told once
per session when a later session reads, searches, edits or stages it (``processor/recall/lesson_index.py``).

A fact is a declarative sentence of the assistant's, about a thing it names (a backticked span, a path, a file
name or an identifier) in the place a statement puts its subject, with a cue that says what kind of fact it is,
said after the round's first look-around call. Not a fact: narration ("Let me check whether `x` exists"), a
question, a hedge ("`x` might be generated"), a condition ("if `x` doesn't exist, …"), a plan ("we'll need
`x`"), a sentence about something the agent itself just made or changed ("`x` is now ignored" after editing
`.gitignore` is the change, not a finding: kept, since it stays true), table rows and code. English cues only.
"""

from __future__ import annotations

import re

from processor.hook_kit.tool_keys import GENERIC, command_keys
from processor.memory.findings import Finding, Round
from processor.memory.identity import episode_id
from processor.memory.kinds import scope_for
from processor.memory.sentences import units
from processor.memory.statements import is_narration, prose, word_count
from processor.redaction import redact
from processor.store.tool_calls import StoredToolCall

MAX_CHARS = 300
MIN_WORDS = 5
MAX_FACTS_PER_ROUND = 3
_LOOK_TOOLS = frozenset({"Read", "Grep", "Glob", "LS", "NotebookRead", "WebFetch"})

# The thing a fact is about: a backticked span, a path, a file name, or an identifier (CamelCase, snake_case).
_THING = (r"(?P<thing>`[^`\n]{2,80}`|\[[^\]\n]{2,80}\]\([^)\s]{2,200}\)|(?:\.{0,2}/)?[\w.-]+/[\w./-]*\w/?"
          r"|\b[\w-]+\.[a-z][a-z0-9]{0,4}\b|\b[A-Z][a-z0-9]+[A-Z]\w*\b|\b[a-z][a-z0-9]*_[a-z0-9_]+\b)")
# Before the thing: "the", and perhaps the kind of thing it is ("the stylesheet `x.css`", "the `scratch/` folder").
_BEFORE = r"(?:the |this |our )?(?:[a-z]+ )?"
# After the thing, before the verb: a few words ("module", "helper file") and perhaps one parenthesis.
_AFTER = r"(?: \w+){0,3}?(?: \([^)\n]{0,80}\))?"
# (kind of fact, pattern): the thing is the statement's subject, or follows "there is no".
_CUES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("absent", re.compile(rf"\bthere(?:'s| is| are) no (?:such )?(?:\w+ ){{0,2}}?{_THING}", re.IGNORECASE)),
    ("absent", re.compile(rf"^{_BEFORE}{_THING}{_AFTER}(?: which| that)? (?:does not|doesn't|do not|"
                          rf"don't|no longer) exists?\b", re.IGNORECASE)),
    ("absent", re.compile(rf"{_THING},? which (?:does not|doesn't|no longer) exists?\b", re.IGNORECASE)),
    ("ignored", re.compile(rf"^{_BEFORE}{_THING}{_AFTER} (?:is|are|was|were) (?:now )?(?:properly |also )?"
                           rf"(?:git-?ignored|ignored by git|in \.gitignore|listed in \.gitignore|ignored)\b",
                           re.IGNORECASE)),
    ("force-added", re.compile(rf"^{_BEFORE}{_THING}{_AFTER} (?:was|were|is|are|must be|has to be|needs to "
                               rf"be) force[- ]added\b", re.IGNORECASE)),
    ("generated", re.compile(rf"^{_BEFORE}{_THING}{_AFTER} (?:is|are) (?:auto-?|automatically )?generated\b",
                             re.IGNORECASE)),
    ("hand-written", re.compile(rf"^{_BEFORE}{_THING}{_AFTER} (?:is|are) hand-?written\b", re.IGNORECASE)),
    ("location", re.compile(rf"^{_BEFORE}{_THING}{_AFTER} (?:lives?|is located|are located|is defined|are "
                            rf"defined|is kept|are kept|is vendored|are vendored|is configured) (?:in|under|at|by)\b",
                            re.IGNORECASE)),
)
_HEDGE = re.compile(r"\b(?:might|may|maybe|perhaps|probably|possibly|likely|i think|i believe|seems?|appears?|"
                    r"should be|could be|not sure|presumably|apparently|guess|assume)\b", re.IGNORECASE)
_CONDITION = re.compile(r"^(?:if|when|whether|unless|once|until|in case|otherwise)\b", re.IGNORECASE)
_PLAN = re.compile(r"\b(?:we'll|we will|i'll|i will|let's|need to|needs to be created|going to|should create|"
                   r"to be created|yet)\b", re.IGNORECASE)


def _thing(raw: str) -> str:
    if raw.startswith("[") and "](" in raw:  # a Markdown link: its text
        raw = raw[1:raw.index("](")]
    return raw.strip("`").strip()


def statement_of(sentence: str) -> tuple[str, str] | None:
    """(relation, thing) when the sentence states a fact about a named thing; else None."""
    text = " ".join(prose(sentence).split()).lstrip("-*• ")
    if (not text or len(text) > MAX_CHARS or text.endswith("?") or word_count(text) < MIN_WORDS
            or is_narration(text) or _HEDGE.search(text) or _CONDITION.match(text) or _PLAN.search(text)
            or text.startswith(("#", "|", ">", "//")) or "|" in text or "→" in text):
        return None
    for relation, pattern in _CUES:
        match = pattern.search(text)
        if match is not None:
            thing = _thing(match["thing"])
            if len(thing) >= 3 and " " not in thing.strip():
                return relation, thing
    return None


def _explored_before(calls: list[StoredToolCall], ts_ms: int) -> bool:
    """A look-around call (a read, a search, a listing) came before the moment the fact was said."""
    for call in calls:
        if (call.ts_ms or 0) >= ts_ms:
            break
        if call.tool in _LOOK_TOOLS:
            return True
        if call.tool == "Bash" and call.target and not any(k.startswith("cmd:") for k in command_keys(call.target)):
            words = call.target.split()
            if words and words[0].rsplit("/", 1)[-1] in GENERIC:
                return True
    return False


def findings(round_: Round) -> list[Finding]:
    """The facts the assistant stated in one round about things it had looked at (miner ``fact``): each is about
    its thing (its one entity), by what kind of fact it is (absent, ignored, force-added, generated, hand-written,
    location)."""
    in_round = round_.in_round
    found: list[Finding] = []
    for message in round_.messages:
        if message.role != "assistant" or message.ts_ms is None or not _explored_before(in_round, message.ts_ms):
            continue
        for unit in units(message.text, MAX_CHARS * 2):
            if unit.kind not in ("sentence", "item"):
                continue
            stated = statement_of(unit.text)
            if stated is None:
                continue
            relation, thing = stated
            sentence = " ".join(prose(unit.text).split()).lstrip("-*• ")
            fact_id = episode_id(f"fact:{round_.project}:{relation}:{thing}:{sentence.lower()}")
            if any(f.id == fact_id for f in found):
                continue
            text = redact(sentence)
            found.append(Finding(id=fact_id, kind="fact", summary=text, full_content=text, entities=[redact(thing)],
                                 source_uuids=[message.uuid], created_at=message.ts_ms, miner="fact",
                                 scope=scope_for(None, round_.project)))
            if len(found) >= MAX_FACTS_PER_ROUND:
                return found
    return found
