"""Decisions in the user's own words, found without an LLM.

A user decides in passing: "Decision for the billing service: we use PostgreSQL 16, never MySQL", "let's go with
`httpx` from now on", "use `pnpm` instead of `npm`", "we're not doing these complex path selections, just picking
the latest one", "we switched to `uv`". A later session that works on what the decision names should hear it, in those
words: a change to that function, the billing service's database. Each such sentence becomes a ``decision``
memory (importance high: the SessionStart digest lists it with the project's rules), with what it names as its
entities: its backticked spans, paths, identifiers and the proper names of tools and services, so it is told at
a later prompt about them (``processor.memory.unasked``) and before a tool call that touches a file or a name it
names (``processor/recall/lesson_index.py``).

Only the user's prose counts (``preferences.user_sentences``: no code, quotes or pasted output, no questions).
Not a decision: a hypothetical ("if we use X", "should we use X"), a sentence naming nothing specific ("let's go
with that") unless it says it is a decision ("Decision: the ledger stores money as integer cents", "we decided to
…": then what it is about are its content words), a sentence already kept as a standing instruction
("always"/"never"…), and venting. English cues only.
"""

from __future__ import annotations

import re

from processor.memory.findings import Finding, Round
from processor.memory.identity import episode_id
from processor.memory.kinds import scope_for
from processor.memory.preferences import _CONVENTION, _PREFERENCE, _VENTING, user_sentences
from processor.redaction import redact
from processor.store.episodes import StoredMessage

_DECIDED = re.compile(
    r"^decision\b[^:]{0,60}:|\b(?:we|i)(?:'ve| have)? (?:decided|agreed|chosen|chose)\b|\bthe decision is\b"
    r"|\bwe(?:'ll| will| are going to| 're going to)? (?:use|keep using|stick with|standardi[sz]e on|go with|"
    r"stay with|switch(?:ed)? to|moved to|migrate(?:d)? to)\b"
    r"|" + (_LETS := r"\blet'?s (?:go with|use|stick with|switch to|keep using|stay with|adopt|standardi[sz]e on)\b") +
    r"|\b(?:use|prefer|pick|choose) \S+(?: \S+){0,3} (?:instead of|rather than|over)\b|\binstead of \S+(?: \S+){0,3},? "
    r"(?:use|we use|let's use)\b"
    r"|\bwe(?:'re| are) not (?:doing|going to do|using|supporting|adding|building)\b.*\b(?:just|only|instead)\b"
    r"|\b(?:no more|stop using|drop(?:ping)?|get rid of)\b .*\b(?:use|instead|switch)\b",
    re.IGNORECASE)
# "Let's switch to main, pull and commit" is a request for the work in hand; so is "Let's switch to `uv`.", said at
# the prompt of the session that then switched (opening BookMinder's next sessions it was noise or at best related
# to all four readings: done, and it says nothing of what it replaced). "let's use pnpm instead of npm", "let's go
# with uv from now on" is a choice: a let's-sentence is a decision only with the alternative it drops or a word
# that makes it last.
_LETS_ONLY = re.compile(_LETS, re.IGNORECASE)
_CHOICE_OR_LASTING = re.compile(r"\b(?:instead of|rather than|over|not|never|no more|always|from now on|going forward|"
                                r"for (?:this|the) project|in this project|here on|everywhere)\b", re.IGNORECASE)
_HYPOTHETICAL = re.compile(r"^\W*(?:if|whether|maybe|perhaps|what if|should|could|would|can)\b|\b(?:if we|unless we|"
                           r"in case we|we could|we might|we may|we should consider|maybe we)\b", re.IGNORECASE)
# What a decision names: a backticked span, a path or file, an identifier, a proper name (PostgreSQL, Stripe)
# or a version.
_NAMED = re.compile(r"`([^`\n]{2,60})`|\b((?:\.{0,2}/)?[\w.-]+/[\w./-]*\w)|\b([\w-]+\.[a-z][a-z0-9]{0,4})\b"
                    r"|\b([a-z][a-z0-9]*_[a-z0-9_]+|[a-z]+[A-Z]\w+)\b|(?<![.!?]\s)(?<!^)\b([A-Z][A-Za-z0-9]{2,}(?:\s\d+)?)\b")
# The objects of a choice name what was chosen even in lower case: "use pnpm instead of npm", "we use redis for …".
_CHOSEN = re.compile(r"\b(?:use|prefer|pick|choose|go with|stick with|switch(?:ed)? to|standardi[sz]e on|moved to|"
                     r"migrate(?:d)? to) (?:the |a |an )?([\w.@/+-]{2,40})"
                     r"|\b(?:instead of|rather than|over) (?:the |a |an )?([\w.@/+-]{2,40})", re.IGNORECASE)
_STOP = frozenset("it this that these those them one ones something anything everything here there now the a an "
                  "same other another more less".split())
_NOT_NAMES = frozenset({"I", "The", "This", "That", "We", "Let", "Decision", "Use", "No", "Just", "Only", "OK",
                        "Yes", "Please", "Thanks", "Also", "And", "But", "For", "From", "Never", "Always"})
MIN_NAMED = 1
# A decision said as one ("Decision: …", "we decided …", "we agreed …", "the decision is …") needs no name to be
# one: what it is about are its content words.
_EXPLICIT = re.compile(r"^decision\b[^:]{0,60}:|\b(?:we|i)(?:'ve| have)? (?:decided|agreed)\b|\bthe decision is\b",
                       re.IGNORECASE)
_CONTENT = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{3,}")
_FUNCTION_WORDS = frozenset(
    "decision decided agreed that this with from into onto they them their there here when what which will would "
    "should could must have been being were about every never always only just also some more most much many "
    "other than then because over under after before where while these those your ours keep mind please".split())
CONTENT_NAMES = 6


def tool_names(sentence: str) -> set[str]:
    """What a decision names that may be a program (one word, lower-cased: a backticked word, a proper name, the
    word after a choice — ``use pnpm instead of npm``): a call running it is about the decision. A decision said
    in plain words names no program: its content words are not ones."""
    return {name.lower() for name in names_in(sentence)
            if " " not in name and name.replace("-", "").replace("_", "").replace(".", "").isalnum()}


def content_words(sentence: str) -> list[str]:
    """The words of a sentence that say what it is about (no function words, no cue words), in order, once each."""
    found: list[str] = []
    for word in _CONTENT.findall(sentence):
        word = word.strip(".,;:").lower()
        if word not in _FUNCTION_WORDS and word not in _STOP and word not in found:
            found.append(word)
    return found


def names_in(sentence: str) -> list[str]:
    """What a sentence names: its backticked spans, paths, identifiers and proper names, in order, once each."""
    found: list[str] = []
    for match in (*_NAMED.finditer(sentence), *_CHOSEN.finditer(sentence)):
        name = next(g for g in match.groups() if g).strip(".,;:")
        if name in _NOT_NAMES or name.lower() in _STOP or name.lower() in ("i", "we") or len(name) < 2:
            continue
        if name not in found:
            found.append(name)
    return found


def findings(round_: Round) -> list[Finding]:
    """The decisions a round's user messages state, in order (miner ``decision``)."""
    return [found for message in round_.user_messages for found in decisions_in(message, round_.project)]


def decisions_in(message: StoredMessage, project: str | None) -> list[Finding]:
    """The decisions one user message states, in order, in the user's words: what it names are the memory's
    entities; [] for anything else."""
    if message.role != "user":
        return []
    found: list[Finding] = []
    for index, (sentence, words) in enumerate(user_sentences(message.text)):
        if not _DECIDED.search(words) or _HYPOTHETICAL.search(words) or _VENTING.search(words):
            continue
        if _LETS_ONLY.search(words) and not _DECIDED.search(_LETS_ONLY.sub(" ", words)) \
                and not _CHOICE_OR_LASTING.search(words):
            continue  # a request for the work in hand, not a choice
        if _PREFERENCE.search(words) or _CONVENTION.search(words):
            continue  # kept as a standing instruction already
        names = names_in(sentence)
        if len(names) < MIN_NAMED and _EXPLICIT.search(words):
            names = content_words(words)[:CONTENT_NAMES]  # said as a decision: about what its words say
        if len(names) < MIN_NAMED:
            continue
        text = redact(sentence)
        found.append(Finding(id=episode_id(f"decision:{message.uuid}:{index}"), kind="decision", summary=text,
                             full_content=text, entities=[redact(n) for n in names[:8]], source_uuids=[message.uuid],
                             created_at=message.ts_ms, miner="decision", scope=scope_for(None, project)))
    return found
