"""The no-LLM episode builder: captured messages become round episodes.

A round is a user message and the assistant replies that follow it. A round is
complete once the next user message exists (or, when `final`, at the end of
what was captured). Long rounds are split into pieces. Summaries are
deterministic: the head of the user's words, then the head of the reply.

This is the permanent fallback when no LLM extractor is configured.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from processor.store.episodes import StoredMessage
from processor.tokens import CHARS_PER_TOKEN, estimate_tokens  # noqa: F401 - the one rule, re-exported here

SUMMARY_TOKENS = 40

_TOOL_NOTE = re.compile(r"\[tool: [^\]\s]+ ([^\]]+)\]")
_CODE_SPAN = re.compile(r"`([^`\n]{2,60})`")
_WS = re.compile(r"\s+")


@dataclass(frozen=True)
class RoundPiece:
    """One verbatim episode: a round, or a piece of a long one."""

    id: str
    summary: str
    full_content: str
    entities: list[str]
    source_uuids: list[str]
    created_at: int | None
    last_message_id: int


def group_rounds(messages: list[StoredMessage], final: bool) -> list[list[StoredMessage]]:
    """Complete rounds, in order. Leading assistant messages continue an earlier round on their own."""
    rounds: list[list[StoredMessage]] = []
    current: list[StoredMessage] = []
    for message in messages:
        if message.role == "user" and current:
            rounds.append(current)
            current = []
        current.append(message)
    if current and final:
        rounds.append(current)
    return rounds


def _head(text: str, max_chars: int) -> str:
    flat = _WS.sub(" ", text).strip()
    if len(flat) <= max_chars:
        return flat
    cut = flat[: max_chars - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > max_chars // 2 else cut).rstrip(" ,;:") + "…"


def summarize(user_text: str, reply_text: str) -> str:
    """At most SUMMARY_TOKENS tokens: the user's words first, then the reply's."""
    budget = SUMMARY_TOKENS * CHARS_PER_TOKEN
    if not user_text:
        return _head(reply_text, budget)
    if not reply_text:
        return _head(user_text, budget)
    question = _head(user_text, budget * 5 // 8)
    answer = _head(reply_text, budget - len(question) - 3)
    return f"{question} → {answer}" if answer else question


def entities_of(text: str, limit: int = 10) -> list[str]:
    found: list[str] = []
    for match in (*_TOOL_NOTE.finditer(text), *_CODE_SPAN.finditer(text)):
        value = match.group(1).strip()
        if value and value not in found:
            found.append(value)
        if len(found) >= limit:
            break
    return found


# A message longer than this many pieces (a pasted log, a 1 MB paste) contributes only its head to
# episodes: the whole text stays in the captured message, and one message never becomes thousands of
# episodes embedded in one go.
MESSAGE_HEAD_PIECES = 8
_OMITTED = "\n[… {n} more characters: the whole message is kept with the captured transcript …]"


def _speaker_block(message: StoredMessage, max_chars: int) -> str:
    text = message.text
    limit = max_chars * MESSAGE_HEAD_PIECES
    if len(text) > limit:
        text = text[:limit] + _OMITTED.format(n=len(text) - limit)
    return f"{message.role}: {text}"


def round_pieces(round_messages: list[StoredMessage], max_chars: int) -> list[RoundPiece]:
    """Split a round into episodes of at most about max_chars of content each."""
    user = next((m for m in round_messages if m.role == "user"), None)
    user_text = user.text if user else ""
    replies = [m for m in round_messages if m.role == "assistant"]
    reply_text = "\n".join(m.text for m in replies)
    # Pack speaker blocks into pieces of at most max_chars; a longer block continues in the next
    # piece, so a question and the start of its answer stay together.
    # Each piece also keeps the length of the speaker label it opens with (0 when it opens inside a
    # block), so a continuation bite starts exactly where the piece's own text starts.
    pieces_text: list[tuple[str, list[str], int]] = []
    current, current_uuids, current_label = "", [], 0
    for message in round_messages:
        block = _speaker_block(message, max_chars)
        label = len(message.role) + 2  # the block opens with "role: "
        while block:
            room = max_chars - len(current) - (2 if current else 0)
            if len(block) > room and room < min(200, max_chars // 4):
                pieces_text.append((current, current_uuids, current_label))
                current, current_uuids, current_label = "", [], 0
                continue
            cut = room
            if len(block) > room:
                # Cut at a word boundary when one is near, so no piece ends mid-word.
                space = block.rfind(" ", room * 3 // 4, room)
                cut = space + 1 if space > 0 else room
            taken, block = block[:cut], block[cut:]
            if not current:
                current_label = label
            current = f"{current}\n\n{taken}" if current else taken
            label = 0  # what is left of this block opens with its text, not a label
            if message.uuid not in current_uuids:
                current_uuids.append(message.uuid)
            if block:
                pieces_text.append((current, current_uuids, current_label))
                current, current_uuids, current_label = "", [], 0
    if current:
        pieces_text.append((current, current_uuids, current_label))

    first = round_messages[0]
    created = next((m.ts_ms for m in round_messages if m.ts_ms), None)
    pieces = []
    for index, (content, uuids, label_len) in enumerate(pieces_text):
        digest = hashlib.sha1(f"{first.uuid}:{index}".encode()).hexdigest()[:16]
        if index == 0:
            summary = summarize(user_text, reply_text)
        else:
            summary = f"(cont. {index + 1}) " + _head(content[label_len:], SUMMARY_TOKENS * CHARS_PER_TOKEN - 12)
        pieces.append(RoundPiece(
            id=f"ep_{digest}",
            summary=summary,
            full_content=content,
            entities=entities_of(content),
            source_uuids=uuids,
            created_at=created,
            last_message_id=round_messages[-1].id,
        ))
    return pieces
