"""The miners: what finds memories in a session's rounds without an LLM, and the order they run in.

A miner is a function from one ``Round`` (a user message, the replies after it, the session's tool calls) to the
``Finding``s in it (``processor/memory/findings.py``), each with its origin (``Finding.miner``, kept in
memory_origins: ``standing``, ``decision``, ``fact``, ``error_fix``, ``lesson``, ``recipe``). Adding a miner is a
module with such a function and one line below. The episodizer (``processor/memory/episodize.py``) runs every miner
on each slice of rounds and stores what they find, in this order: the order memories are embedded and stored in,
and the first of two findings with the same words is the one kept.

Two more sources of memories are read outside the slices, by the episodizer itself: commits, tracker reasons and
the user's answers (signals, ``processor/capture/signals.py``), and a project's close-out routine
(``processor/memory/routines.py``), read again once a session of the project has ended.
"""

from __future__ import annotations

from collections.abc import Callable

from processor.memory import answered, corrections, decisions, declined, facts, lessons, preferences, tool_limits
from processor.memory.findings import Finding, Round

Miner = Callable[[Round], list[Finding]]

# What the user said, in the user's own words: each runs over every round of a slice before what the session did.
SAID: tuple[Miner, ...] = (
    preferences.findings,  # standing preferences and instructions: "always …", "I prefer …", "from now on …"
    decisions.findings,  # decisions: "we use PostgreSQL 16, never MySQL", "let's go with `httpx`"
    corrections.findings,  # "it's `total_cents`, not `total`"; "no comments in this script": told at their call
)
# What the session found and did, round by round, with the tool calls made in the round.
DONE: tuple[Miner, ...] = (
    facts.findings,  # facts about the project's files stated after looking: "`dist/` is git-ignored"
    lessons.findings,  # a failure and what got past it; recipes; staging that had to be undone
    tool_limits.findings,  # a file too big for the agent's Read: told before the next read there
    declined.findings,  # a commit the user would not let skip the hooks: told before the next call that would
    answered.findings,  # a failure the agent asked the user about: the answer, told after the same failure
)
