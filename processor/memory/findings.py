"""What a miner reads (a ``Round``) and what it returns (a ``Finding``), and the one way a finding becomes an episode.

Every miner (``processor/memory/miners.py``) reads a session's rounds without an LLM and returns findings: a
memory to store, in the session's words, with the lines it came from. The episodizer
(``processor/memory/episodize.py``) embeds them and stores them through ``Finding.episode``, so what an episode's
columns hold for a mined memory is decided here and only here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from processor.memory.identity import content_hash
from processor.memory.kinds import default_importance
from processor.store.episodes import NewEpisode, StoredMessage
from processor.store.tool_calls import StoredToolCall


@dataclass(frozen=True)
class Round:
    """One complete round of a session as the miners read it: a user message and the replies after it, with the
    session's tool calls."""

    messages: list[StoredMessage]
    calls: list[StoredToolCall]  # the session's calls from the first round read on, in order ([] when none)
    following: int | None  # when the next round began: calls from then on are not this round's (None: none yet)
    project: str | None
    # The user's answers to the questions the agent asked in the session (by the question's tool_use_id): the
    # signal's text, "Asked the user: …\nThe user answered: …" (``capture/signals.py``).
    answers: Mapping[str, str] = field(default_factory=dict)

    @property
    def user_messages(self) -> list[StoredMessage]:
        return [m for m in self.messages if m.role == "user"]

    @cached_property
    def in_round(self) -> list[StoredToolCall]:
        """The calls made during the round ([] when none of its messages has a time to place them by)."""
        start = next((m.ts_ms for m in self.messages if m.ts_ms is not None), None)
        if start is None:
            return []
        return [c for c in self.calls if c.ts_ms is not None and c.ts_ms >= start
                and (self.following is None or c.ts_ms < self.following)]


@dataclass(frozen=True)
class FailureFix:
    """The way of failing a lesson tells the fix of, as the failure hooks look it up
    (``processor/hook_kit/failure_keys.py``)."""

    key: str  # where failures of this kind are filed (``failure_keys.failure_key``)
    signature: tuple[str, ...]  # how it failed, normalised
    fix: str  # what fixed it, in a line: what the failure hook tells right after the same failure
    uses: tuple[str, ...]  # the words the fix added to the failed command (a call that has them applies it)
    session_fixed: bool  # got past by a way of working (told at the failure), not by editing the code


@dataclass(frozen=True)
class Finding:
    """One memory a miner found, ready to be stored: its id is stable, so mining the same rounds again makes the same
    one. Its texts are redacted by the miner (``processor.redaction``): what it hashes is what is stored."""

    id: str  # ``identity.episode_id`` of what made it
    kind: str  # ``processor.memory.kinds.KINDS``
    summary: str  # the line a later session is shown
    full_content: str
    entities: list[str]  # what it is about: what the hooks match a prompt or a tool call against
    source_uuids: list[str]  # the transcript lines it was found in
    created_at: int | None  # when it was said (None: when it is stored)
    miner: str  # the origin it is stored with (memory_origins); "" for a verbatim piece or a signal: none
    scope: str = "project"  # or "global": about no one project
    importance: str | None = None  # None: its kind's default
    source_type: str = "auto"  # "verbatim" for a round's own words
    failure: FailureFix | None = None  # a lesson's: the failure it tells the fix of

    def episode(self, session_id: str | None, project: str | None, now: int) -> NewEpisode:
        """The episode that stores it, learned in this session of this project (kept only when project-scoped),
        made when it was said or else at `now`."""
        return NewEpisode(
            id=self.id, session_id=session_id, project=project if self.scope == "project" else None,
            scope=self.scope, summary=self.summary, entities=self.entities,
            importance=self.importance or default_importance(self.kind), kind=self.kind,
            source_type=self.source_type, full_content=self.full_content, source_uuids=self.source_uuids,
            content_hash=content_hash(self.full_content), created_at=self.created_at or now)
