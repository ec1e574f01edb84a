"""What may be shown to the agent unasked: the bar a memory must clear to become a bite of a user message.

A bite the agent did not ask for costs its attention; one that does not help the prompt's work is clutter,
and a memory tool that clutters gets switched off. So the answer is silence unless a memory is:

1. **A statement another session can act on**: a lesson (``gotcha``), a rule (``convention``), a
   ``decision`` or a ``preference``, or anything the user asked to remember (``memory_remember``). What was
   mined from tool calls (an error's fix, a lesson, a fact about a file, the routine) waits for its call
   (``AT_THEIR_CALL``: ``processor/recall/lesson_index.py``), not a prompt that shares its words; so does a
   standing instruction mined from the user's words, after the digest of the next sessions. Never a
   verbatim round (narration, tool calls and the user's own earlier prompts are what those are mostly made
   of), never a ``bugfix`` of code that has moved on, never narration, a tool list or a fragment
   (``processor.memory.statements``). Those stay findable with ``memory_recall``.
2. **About this prompt, by both signals**: its embedding close to the prompt's (cosine ≥ ``MIN_COSINE``)
   *and* standing out from the project's usual scores for this prompt (``MIN_Z`` standard deviations above
   the mean similarity of the project's memories and newest rounds, once there are enough of them to have
   a usual score) *and* sharing with the prompt a word that is not what every memory of the project says
   (held by at most a third of them).
3. **Not the prompt again**: a memory the prompt already says (its words, ids aside, inside the prompt) or
   as similar to the prompt as a restatement (a template the user types with other ids) tells the agent
   nothing.

The constants are general thresholds of the embedding model's scale (all-MiniLM-L6: unrelated texts score
about 0.0–0.2, a text that answers a question 0.3 and up, a paraphrase 0.85 and up) and of a distribution
(2 σ), not fitted to any data set.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from processor.memory.bites import BITE_CHARS, fit, terms
from processor.memory.search import VectorIndex
from processor.memory.sentences import split_sentences
from processor.memory.statements import states_something
from processor.store import episodes as sql
from processor.store import origins as origins_sql
from processor.store.episodes import Episode

PUSHED_KINDS = frozenset({"gotcha", "convention", "decision", "preference"})
# What was mined from tool calls has its own moment, the call (before it, or right after the same failure): an
# error's fix, a lesson, a fact about a file, the close-out routine, the environment the project's tools run in,
# a program not installed where it runs.
# A prompt that merely shares words with it is not that moment; the user's decisions and rules, and what was
# stored on purpose, are told at prompts.
AT_THEIR_CALL = frozenset({"error_fix", "lesson", "fact", "tool_limit", "routine", "recipe", "correction", "file",
                           "environment", "absent", "declined", "settled"})
# A standing instruction mined from the user's words is told in the digest of the project's next sessions and
# before the call it forbids (its guard), not at a prompt that shares its words: a prompt about branches ("switch
# to the phase 12 branch") already says what a rule about branches would; the held-out readers found none of
# the rules told with a prompt needed.
NOT_AT_PROMPTS = AT_THEIR_CALL | {"standing"}
# Recalled when asked for, never told unasked: a record of the work (a commit message, a tracker reason, a
# question's answer: capture's signals) says what was done once, not what holds from now on; the close-out
# routine (the commands a project's tasks end with) is the habit every session already has in front of it.
RECALLED_ONLY = frozenset({"signal", "routine"})
MIN_COSINE = 0.3
MIN_Z = 2.0
MIN_REFERENCE = 8  # scores needed before "the project's usual score" means anything
RESTATES = 0.85
COMMON_SHARE = 1 / 3  # a word held by more of the project's memories than this says nothing specific
REFERENCE_MEMORIES = 2_000  # the project's newest memories read per prompt
REFERENCE_ROUNDS = 500  # and its newest verbatim rounds, for the usual score


@dataclass(frozen=True)
class Offer:
    """A memory that cleared the bar, with why: its similarity, how far it stands out, the words it shares."""

    episode: Episode
    bite: str
    cosine: float
    z: float | None
    shared: tuple[str, ...]


def pushable(ep: Episode, origin: str | None = None) -> bool:
    """May this memory ever be shown unasked (before asking whether it fits the prompt)? `origin`: the miner that
    made it (``store/origins.py``): a fact the assistant found about a file after looking
    (``processor.memory.facts``) may be told about that file, not every ``fact`` an extractor or a commit made."""
    if ep.status != "active" or ep.source_type == "verbatim" or origin in RECALLED_ONLY:
        return False
    if ep.kind not in PUSHED_KINDS and ep.source_type != "manual" and not (
            ep.kind == "fact" and origin in ("fact", "tool_limit", "correction")):
        return False
    return states_something(ep.summary) or states_something(ep.full_content[:BITE_CHARS * 2])


# What a memory told unasked is, as the viewer groups them: by the miner that made it, else by its kind.
_CATEGORY_OF_ORIGIN = {"error_fix": "Error fixes", "answered": "Error fixes", "lesson": "Lessons", "fact": "Facts",
                       "tool_limit": "Facts",
                       "recipe": "Recipes", "decision": "Decisions", "routine": "Rules", "declined": "Rules",
                       "settled": "Recipes"}
_CATEGORY_OF_KIND = {"gotcha": "Lessons", "convention": "Rules", "decision": "Decisions", "preference": "Preferences"}
CATEGORIES = ("Error fixes", "Lessons", "Facts", "Recipes", "Decisions", "Rules", "Preferences", "Remembered")


def category(ep: Episode, origin: str | None) -> str | None:
    """Which of ``CATEGORIES`` a memory that may be told unasked belongs to; None for one never told unasked."""
    if not pushable(ep, origin):
        return None
    if ep.source_type == "manual":
        return "Remembered"
    return _CATEGORY_OF_ORIGIN.get(origin or "") or _CATEGORY_OF_KIND.get(ep.kind)


_ID = re.compile(r"\b[\w-]*\d[\w-]*\b")


def _without_ids(text: str) -> str:
    """Lower-cased words with ids and numbers left out: a template typed with another id reads the same."""
    return " ".join(_ID.sub(" ", text.lower()).split())


def _words(ep: Episode) -> set[str]:
    return set(terms(" ".join([ep.summary, *ep.entities])))


def bite_of(ep: Episode, room: int = BITE_CHARS) -> str:
    """A memory shown unasked is shown as what it states: its summary (a lesson's sentence, a rule), within
    `room` characters (a recipe's steps get more: ``RECIPE_ROOM``), in whole sentences: as many as fit, or the
    first one alone when it is longer, up to twice the room. A sentence cut in the middle ("…rewrite files and
    stop the…") is read as a fragment, and the readers counted it noise."""
    text = " ".join(ep.summary.split())
    if len(text) <= room:
        return text
    whole = ""
    for sentence in split_sentences(text, len(text)):
        if len(whole) + len(sentence) + 1 > (room if whole else 2 * room):
            break
        whole = f"{whole} {sentence}" if whole else sentence
    return whole or fit(text, room)


RECIPE_ROOM = 3 * BITE_CHARS


def offers(conn, index: VectorIndex, query: str, vector: np.ndarray, project: str | None,
           exclude: frozenset[str] = frozenset(), limit: int = 3) -> list[Offer]:
    """The memories that clear the bar for this user message, most similar first (often none)."""
    memories = sql.project_memories(conn, project, REFERENCE_MEMORIES)
    if not memories:
        return []
    index.refresh(conn)
    # The project's usual score for this prompt: over its memories and its newest rounds.
    rounds = sql.project_round_rowids(conn, project, REFERENCE_ROUNDS)
    sims = index.similarity(vector, [ep.rowid for ep in memories] + rounds)
    cosine = np.array([sims.get(ep.rowid, 0.0) for ep in memories], dtype=np.float32)
    reference = np.concatenate([cosine, np.array([sims.get(r, 0.0) for r in rounds], dtype=np.float32)])
    usual = (float(reference.mean()), float(reference.std())) if len(reference) >= MIN_REFERENCE else None
    wanted = set(terms(query))
    typed = _without_ids(query)
    close: list[tuple[Episode, float, float | None]] = []
    for ep, cos in zip(memories, cosine.tolist(), strict=True):
        z = (cos - usual[0]) / usual[1] if usual and usual[1] > 1e-6 else None
        if cos >= MIN_COSINE and cos < RESTATES and (z is None or z >= MIN_Z) and ep.id not in exclude:
            close.append((ep, cos, z))
    if not close:
        return []
    # How many of the project's memories say each of the prompt's words: a memory's words are its statement
    # (the summary) and what it is about (its entities).
    frequency = Counter(t for ep in memories for t in _words(ep) & wanted)
    common = max(1, int(len(memories) * COMMON_SHARE))
    origins = origins_sql.origins(conn, [ep.id for ep, _, _ in close])
    found: list[Offer] = []
    for ep, cos, z in close:
        origin = origins.get(ep.id)
        if not pushable(ep, origin) or _without_ids(ep.summary) in typed or origin in NOT_AT_PROMPTS:
            continue
        shared = tuple(sorted(t for t in _words(ep) & wanted if frequency[t] <= common))
        if shared:
            found.append(Offer(ep, bite_of(ep), cos, z, shared))
    found.sort(key=lambda o: o.cosine, reverse=True)
    return found[:limit]
