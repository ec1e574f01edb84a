"""The no-LLM episode builder: captured messages become round episodes.

A round is a user message and the assistant replies that follow it. A round is
complete once the next user message exists (or, when `final`, at the end of
what was captured). Long rounds are split into pieces. Summaries are
deterministic: the head of the user's words, then the head of the reply.

This is the permanent fallback when no LLM extractor is configured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from processor.memory.findings import Finding
from processor.memory.identity import episode_id
from processor.memory.pasted import condense, with_whole, without_notes
from processor.memory.sentences import Unit, join, split_sentences, units
from processor.store.episodes import StoredMessage
from processor.store.queued import handed_mid_turn
from processor.tokens import CHARS_PER_TOKEN, estimate_tokens  # noqa: F401 - the one rule, re-exported here

SUMMARY_TOKENS = 40

_TOOL_NOTE = re.compile(r"\[tool: [^\]\s]+ ([^\]]+)\]")
_NOTE_PARTS = re.compile(r"\[tool: ([^\]\s]+)(?: ([^\]\n]*))?\]")
_TOOL_NOTE_ANY = re.compile(r"\[tool: [^\]\n]*\]")
_LABEL = re.compile(r"^(?:user|assistant): ", re.M)
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

    def finding(self) -> Finding:
        """The piece as it is stored: the round's own words, kind ``other``, made by no miner."""
        return Finding(id=self.id, kind="other", summary=self.summary, full_content=self.full_content,
                       entities=self.entities, source_uuids=self.source_uuids, created_at=self.created_at, miner="",
                       source_type="verbatim")


def group_rounds(messages: list[StoredMessage], final: bool) -> list[list[StoredMessage]]:
    """Complete rounds, in order. Leading assistant messages continue an earlier round on their own; so does what
    the user said to the model mid-turn (it is in the round it was said in)."""
    rounds: list[list[StoredMessage]] = []
    current: list[StoredMessage] = []
    for message in messages:
        if message.role == "user" and current and not handed_mid_turn(message.uuid):
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


def summarize(user_text: str, reply_text: str, budget: int = SUMMARY_TOKENS * CHARS_PER_TOKEN) -> str:
    """At most budget characters (SUMMARY_TOKENS tokens): the user's words first, then the reply's."""
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
_OMITTED = "[… {n} more characters: the whole message is kept with the captured transcript …]"

# Every piece after a round's first opens with the task it belongs to: the user's request, condensed.
TASK_PREFIX = "task: "
TASK_HEADER_CHARS = 100
# Steps further apart than this are separate pieces of work (the user stepped away, a long build ran).
STEP_GAP_MS = 10 * 60_000
# Markup Claude Code wraps around a prompt (<ide_opened_file>, <command-name>): not the request. Its tag
# names hold "_" or "-"; a user's own HTML (<script>, <b>) has none and stays part of what was asked.
_TAGGED = re.compile(r"<([A-Za-z][A-Za-z0-9]*[_-][\w-]*)(?:\s[^>]*)?>.*?</\1>", re.S)


def _short_note(match: re.Match[str]) -> str:
    target = (match.group(2) or "").rstrip("/").rsplit("/", 1)[-1]
    return f"[{match.group(1)} {target}]" if target else f"[{match.group(1)}]"


def embedding_text(content: str) -> str:
    """What of an episode is embedded: its words, each tool note cut to the tool and the file's name.

    The folders every path of a project shares, repeated in each `[tool: Read /…/x]` note, would make
    all pieces of a session look alike to the embedder; the full notes stay in the stored content.
    """
    return _NOTE_PARTS.sub(_short_note, content)


def task_header(user_text: str) -> str:
    """The user's request, condensed to TASK_HEADER_CHARS, markup left out: the whole of a short one;
    of a longer one the head of its first sentence (the setting) and of its last (most often the ask)."""
    # The user's words say the task; a paste's note does only when the message is nothing else.
    own = without_notes(user_text)
    text = _WS.sub(" ", _TAGGED.sub(" ", own)).strip() or _WS.sub(" ", user_text).strip()
    if len(text) <= TASK_HEADER_CHARS:
        return text
    sentences = split_sentences(text, TASK_HEADER_CHARS * 4)
    if len(sentences) < 2:
        return _head(text, TASK_HEADER_CHARS)
    first = _head(sentences[0], TASK_HEADER_CHARS * 2 // 5)
    return f"{first} {_head(sentences[-1], TASK_HEADER_CHARS - len(first) - 1)}"


def split_task_header(content: str) -> tuple[str, str]:
    """(task header, the rest) of a piece's full content; no header for a round's first piece."""
    if not content.startswith(TASK_PREFIX):
        return "", content
    line, _, rest = content.partition("\n")
    return line[len(TASK_PREFIX):].strip(), rest.lstrip("\n")


@dataclass
class _Step:
    """A stretch of one round's work: an assistant text that follows tool calls starts the next one."""

    entries: list[tuple[StoredMessage, Unit]]
    files: set[str]
    last_ms: int | None

    @property
    def size(self) -> int:
        return sum(len(unit.text) + 1 for _, unit in self.entries)


def _message_units(message: StoredMessage, max_chars: int, condensed: dict[int, str]) -> list[Unit]:
    # What the user pasted (logs, diffs, pages) stays whole in the message; the episode holds its note.
    text = with_whole(condensed[message.id], f"msg_{message.uuid}") if message.id in condensed else message.text
    limit = max_chars * MESSAGE_HEAD_PIECES
    found = units(text[:limit], max_chars)
    if len(text) > limit:
        found.append(Unit(_OMITTED.format(n=len(text) - limit), "sentence"))
    return found


def _steps(round_messages: list[StoredMessage], max_chars: int, condensed: dict[int, str]) -> list[_Step]:
    steps: list[_Step] = []
    after_tools = False
    previous_ms: int | None = None
    for message in round_messages:
        found = _message_units(message, max_chars, condensed)
        if not found:
            continue
        tools_only = all(u.kind == "tool" for u in found)
        gap = (message.ts_ms is not None and previous_ms is not None
               and message.ts_ms - previous_ms > STEP_GAP_MS)
        new = (not steps or message.role == "user" or steps[-1].entries[-1][0].role == "user"
               or (after_tools and not tools_only) or gap)
        if new:
            steps.append(_Step([], set(), None))
        step = steps[-1]
        step.entries += [(message, unit) for unit in found]
        step.files.update(m.group(1).strip() for u in found if u.kind == "tool" for m in _TOOL_NOTE.finditer(u.text))
        step.last_ms = message.ts_ms or step.last_ms
        after_tools = found[-1].kind == "tool"
        previous_ms = message.ts_ms or previous_ms
    return steps


def _pack(steps: list[_Step], max_chars: int) -> list[list[tuple[StoredMessage, Unit]]]:
    """Steps into pieces of about max_chars: whole steps when they fit, related steps together, a long
    step spread over pieces at its units' boundaries (never inside a sentence, list item or code block)."""
    pieces: list[list[tuple[StoredMessage, Unit]]] = []
    current: list[tuple[StoredMessage, Unit]] = []
    size, files, last_ms = 0, set[str](), None
    for step in steps:
        if current:
            first_ms = next((m.ts_ms for m, _ in step.entries if m.ts_ms), None)
            gap = first_ms is not None and last_ms is not None and first_ms - last_ms > STEP_GAP_MS
            # Another file set, with the piece already well filled: a new piece of work starts here.
            unrelated = bool(step.files and files and not step.files & files) and size >= max_chars // 2
            crowded = size + step.size > max_chars and size >= max_chars // 2
            if gap or unrelated or crowded:
                pieces.append(current)
                current, size, files = [], 0, set()
        for entry in step.entries:
            # A speaker label ("\n\nassistant: ") where the speaker changes counts as text.
            label = 0 if current and current[-1][0].role == entry[0].role else len(entry[0].role) + 4
            cost = len(entry[1].text) + 1 + label
            if current and size + cost > max_chars:
                pieces.append(current)
                current, size, files = [], 0, set()
                cost = len(entry[1].text) + 1 + len(entry[0].role) + 4
            current.append(entry)
            size += cost
        files |= step.files
        last_ms = step.last_ms or last_ms
    if current:
        pieces.append(current)
    return pieces


def _render(entries: list[tuple[StoredMessage, Unit]]) -> str:
    """A piece's text: a speaker label where the speaker changes, each message on lines of its own."""
    blocks: list[list[Unit]] = []
    roles: list[str] = []
    previous: tuple[StoredMessage, Unit] | None = None
    for message, unit in entries:
        if not blocks or message.role != roles[-1]:
            blocks.append([])
            roles.append(message.role)
        elif previous is not None and unit.kind == "tool" and previous[1].kind == "tool":
            unit = replace(unit, starts_line=False)  # a run of tool calls stays on one line
        elif previous is not None and message.id != previous[0].id:
            unit = replace(unit, starts_line=True)  # the next message of the same speaker: a new line
        blocks[-1].append(unit)
        previous = (message, unit)
    return "\n\n".join(f"{role}: {join(block)}" for role, block in zip(roles, blocks, strict=True))


def _prose(text: str) -> str:
    """Text without its tool notes: what a summary should say."""
    return _WS.sub(" ", _TOOL_NOTE_ANY.sub(" ", _LABEL.sub("", text))).strip()


def round_pieces(round_messages: list[StoredMessage], max_chars: int) -> list[RoundPiece]:
    """Split a round into episodes of about max_chars of content each, at the boundaries of its work."""
    # Each user message condensed once (pastes as notes): for the task header and for the pieces.
    condensed = {m.id: condense(m.text) for m in round_messages if m.role == "user"}
    user = next((m for m in round_messages if m.role == "user"), None)
    user_text = condensed[user.id] if user else ""
    header = task_header(user_text) if user_text else ""
    replies = [m for m in round_messages if m.role == "assistant"]
    reply_text = _prose("\n".join(m.text for m in replies)) or "\n".join(m.text for m in replies)
    first = round_messages[0]
    # max_chars is the piece's own text, speaker labels included; the task header (at most
    # TASK_HEADER_CHARS) comes on top, so a continuation holds as much of the work as a first piece.
    room = max_chars
    unit_room = room - len("assistant: ") - 1
    pieces = []
    for index, entries in enumerate(_pack(_steps(round_messages, unit_room, condensed), room)):
        body = _render(entries)
        if index == 0 or not header:
            content = body
            # The summary says the request, not the markup Claude Code wrapped around it (an opened file).
            asked = _TAGGED.sub(" ", without_notes(user_text)).strip() or user_text
            summary = summarize(asked, reply_text) if index == 0 else _head(
                _prose(body) or body, SUMMARY_TOKENS * CHARS_PER_TOKEN)
        else:
            content = f"{TASK_PREFIX}{header}\n\n{body}"
            own = _prose(join([unit for _, unit in entries])) or join([unit for _, unit in entries])
            part = f"(part {index + 1}) "
            summary = part + summarize(header, own, SUMMARY_TOKENS * CHARS_PER_TOKEN - len(part))
        uuids: list[str] = []
        for message, _ in entries:
            if message.uuid not in uuids:
                uuids.append(message.uuid)
        pieces.append(RoundPiece(
            id=episode_id(f"{first.uuid}:{index}"),
            summary=summary,
            full_content=content,
            entities=entities_of(content),
            source_uuids=uuids,
            created_at=next((m.ts_ms for m, _ in entries if m.ts_ms), None)
            or next((m.ts_ms for m in round_messages if m.ts_ms), None),
            last_message_id=round_messages[-1].id,
        ))
    return pieces
