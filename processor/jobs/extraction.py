"""Extraction (seed 001): micro-batched messages + the rolling summary in, memory bites out.

When: per session, an ``extract`` job is queued once there are ``extract_min_messages`` new
messages since the last extraction, or ``extract_max_minutes`` have passed since it with at least
one new message, or the session has been idle ``extract_idle_minutes``. Until a session is idle
only complete rounds count (messages before its newest user message): an assistant still at
work is not cut mid-answer.

What: the job sends the messages after the session's last extracted one, each cut to its head
and tail (``max_message_chars``), as many as fit ``max_prompt_tokens``, with the rolling summary.
The answer (JSON schema below) is a list of candidate memories and the updated summary. The
candidates go through ADD/UPDATE/NOOP (dedupe.py) in the same transaction that moves the
session's ``extraction_state`` forward, so a crash redoes the batch and never skips or
duplicates it. A long backlog is worked through batch by batch, each committed on its own.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import apsw

from processor.clock import now_ms
from processor.config import Settings
from processor.hook_kit.tool_keys import path_like
from processor.jobs.backends.base import LLMRequest, OutputError
from processor.jobs.base import DueCheck, DueJob, JobContext, JobRejected, JobType, RetryLater
from processor.memory.dedupe import Candidate
from processor.memory.kinds import KINDS, SCOPES
from processor.memory.verbatim import CHARS_PER_TOKEN
from processor.store import episodes as episodes_sql
from processor.store import jobs as sql
from processor.store import origins as origins_sql
from processor.store import sessions
from processor.store.episodes import StoredMessage

log = logging.getLogger(__name__)

EXTRACT = "extract"
SUMMARY_MAX_TOKENS = 40
MAX_OUTPUT_CHARS = 200_000      # an answer longer than this is a runaway model, not memories
MAX_SCAN_MESSAGES = 500         # messages read per batch; the prompt bound cuts further
TRUNCATION_MARKER = "\n[… {n} characters omitted …]\n"

# An extracted memory is told like the mined memory of its kind (``processor/memory/miners.py``): a fact about a
# file before a call on it, a command's gotcha before that command (and a rule or decision of the user at a prompt
# and in the digest); it needs its anchors for the first two. The origin says so (memory_origins).
ORIGIN_OF_KIND = {"fact": "fact", "gotcha": "lesson", "convention": "standing", "preference": "standing",
                  "decision": "decision"}
_UNANCHORED = frozenset({"convention", "preference", "decision"})  # told at prompts and in the digest, anchored or not


def origin_of(kind: str, anchors: list[str]) -> str | None:
    """The miner an extracted memory is told as: its kind's (``ORIGIN_OF_KIND``), but a preference or convention
    anchored to a file is how the user wants that file worked on — told when it is changed, not at a prompt — as
    the correction miner's wishes about a file (``processor/memory/corrections.py``); None for a fact or gotcha
    anchored to nothing (recalled only)."""
    if kind in ("preference", "convention") and any(path_like(a) for a in anchors):
        return "file"
    return ORIGIN_OF_KIND.get(kind) if anchors or kind in _UNANCHORED else None

SYSTEM_PROMPT = """You are the memory extraction system of Engram, a memory for Claude Code.
Given the summary of a coding session so far and its new messages, extract what a later session
should remember: decisions and their reasons, user preferences, conventions, bug fixes and their
causes, gotchas, durable facts about the project, open tasks. Skip chit-chat, transient progress,
tool noise and anything already in the summary. Return no memories when nothing qualifies.

For each memory give:
- summary: one sentence, at most 40 tokens: the "memory bite", readable at a glance (no pasted console output,
  no lists of "…")
- full_content: two or three short paragraphs of context a later session needs
- entities: key names (files, projects, tools, concepts, people)
- anchors: what a later session will be touching when it needs this memory: project paths as written in the
  session (files or folders), shell commands prefixed with "$ " ("$ pnpm test"), or code identifiers; the
  memory is told just before a later call on one of them. [] when it is about none (a preference for all work)
- importance: "high" for an architectural decision, user preference, convention or critical bug fix,
  otherwise "normal"
- kind: one of decision, preference, convention, bugfix, gotcha, fact, task, other. A fact learned by
  looking (which file is generated, which database file is the populated one, which library the CLI is built
  on) is a fact anchored to that file; a rule the user stated is a convention; the way around a failure of a
  command is a gotcha anchored to that command; a remark about the task in hand is no memory at all
- scope: "global" for a general fact or preference, "project" if it is specific to this project

Also return rolling_summary: the updated summary of the whole session so far, at most 150 words.
Answer with the JSON object only."""


@dataclass(frozen=True)
class OutputLimits:
    """Bounds on the answer. Grammar decoders (llama) get them as maxItems/maxLength in the schema."""

    max_memories: int = 8
    summary_chars: int = 240
    content_chars: int = 1000
    entities: int = 8
    anchors: int = 6
    entity_chars: int = 60
    rolling_summary_chars: int = 1000
    max_output_tokens: int = 4096


def output_schema(limits: OutputLimits, *, bounded: bool) -> dict[str, Any]:
    """The answer's JSON schema; `bounded` adds the length limits (OpenAI strict mode rejects them)."""

    def string(max_len: int) -> dict[str, Any]:
        return {"type": "string", "maxLength": max_len} if bounded else {"type": "string"}

    def array(items: dict[str, Any], max_items: int) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "array", "items": items}
        if bounded:
            out["maxItems"] = max_items
        return out

    memory = {
        "type": "object",
        "properties": {
            "summary": string(limits.summary_chars),
            "full_content": string(limits.content_chars),
            "entities": array(string(limits.entity_chars), limits.entities),
            "anchors": array(string(limits.entity_chars), limits.anchors),
            "importance": {"type": "string", "enum": ["high", "normal"]},
            "kind": {"type": "string", "enum": list(KINDS)},
            "scope": {"type": "string", "enum": list(SCOPES)},
        },
        "required": ["summary", "full_content", "entities", "anchors", "importance", "kind", "scope"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "memories": array(memory, limits.max_memories),
            "rolling_summary": string(limits.rolling_summary_chars),
        },
        "required": ["memories", "rolling_summary"],
        "additionalProperties": False,
    }


# --- the prompt --------------------------------------------------------------------------------

def head_tail(text: str, max_chars: int) -> str:
    """The text, or its head and tail around a marker saying how much was cut."""
    if len(text) <= max_chars:
        return text
    keep = max(max_chars - len(TRUNCATION_MARKER.format(n=len(text))), 2)
    head = keep * 2 // 3
    tail = keep - head
    omitted = len(text) - head - tail
    return text[:head] + TRUNCATION_MARKER.format(n=omitted) + text[len(text) - tail:]


def _stamp(ms: int | None) -> str:
    return time.strftime(" %Y-%m-%d %H:%M", time.gmtime(ms / 1000)) if ms else ""


@dataclass(frozen=True)
class PromptBatch:
    prompt: str
    messages: list[StoredMessage]

    @property
    def last_id(self) -> int:
        return self.messages[-1].id


def build_prompt(project: str | None, rolling_summary: str, messages: list[StoredMessage],
                 settings: Settings, max_tokens: int | None = None) -> PromptBatch:
    """The user prompt for the longest prefix of messages that fits max_prompt_tokens, or the backend's smaller
    `max_tokens` (at least one message)."""
    if not messages:
        raise ValueError("build_prompt needs at least one message")
    summary = head_tail(rolling_summary.strip(), 4000) or "(none: this is the start of the session)"
    header = f"Project: {project or 'unknown'}\n\nSummary of the session so far:\n{summary}\n\nNew messages:\n"
    tokens = min(settings.max_prompt_tokens, max_tokens) if max_tokens else settings.max_prompt_tokens
    budget = tokens * CHARS_PER_TOKEN - len(SYSTEM_PROMPT) - len(header)
    per_message = max(settings.max_message_chars, 200)
    parts: list[str] = []
    taken: list[StoredMessage] = []
    used = 0
    for message in messages:
        block = f"\n[{message.role}{_stamp(message.ts_ms)}]\n{head_tail(message.text.strip(), per_message)}\n"
        if used + len(block) > budget:
            if taken:
                break
            # A single message larger than the whole budget is cut to fit it.
            cut = head_tail(message.text.strip(), max(budget - 40, 200))
            block = f"\n[{message.role}{_stamp(message.ts_ms)}]\n{cut}\n"
        parts.append(block)
        taken.append(message)
        used += len(block)
    return PromptBatch(header + "".join(parts), taken)


# --- the answer --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Extraction:
    memories: list[dict[str, Any]]
    rolling_summary: str


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def _bite(text: str, max_tokens: int = SUMMARY_MAX_TOKENS) -> str:
    flat = " ".join(text.split())
    limit = max_tokens * CHARS_PER_TOKEN
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0] or flat[:limit]
    return cut.rstrip(",;:") + "…"


def parse_extraction(text: str, limits: OutputLimits) -> Extraction:
    """Validate a model's answer against the schema; raise OutputError naming what is wrong.

    Structure and types are strict; enum values a server did not enforce fall back to defaults
    (kind other, importance normal, scope project), and over-long strings are cut.
    """
    if not text or not text.strip():
        raise OutputError("the model returned an empty answer")
    if len(text) > MAX_OUTPUT_CHARS:
        raise OutputError(f"the answer is {len(text)} characters long, over the {MAX_OUTPUT_CHARS} limit: "
                          "a runaway model; it is not stored")
    fenced = _FENCE.match(text)
    try:
        # strict=False: a raw newline inside a string (grammar decoders allow it) is not worth a retry.
        data = json.loads(fenced.group(1) if fenced else text, strict=False)
    except ValueError as exc:
        raise OutputError(f"the answer is not JSON ({exc}); it begins {text.strip()[:80]!r}") from None
    if not isinstance(data, dict):
        raise OutputError(f"the answer is a JSON {type(data).__name__}, not an object with memories and "
                          "rolling_summary")
    memories = data.get("memories")
    rolling = data.get("rolling_summary")
    if not isinstance(memories, list):
        raise OutputError(f"the answer's `memories` is {type(memories).__name__}, not a list (schema violation)")
    if not isinstance(rolling, str):
        raise OutputError(f"the answer's `rolling_summary` is {type(rolling).__name__}, not a string "
                          "(schema violation)")
    out = []
    for i, item in enumerate(memories):
        if not isinstance(item, dict):
            raise OutputError(f"memories[{i}] is {type(item).__name__}, not an object (schema violation)")
        summary, content, entities = item.get("summary"), item.get("full_content"), item.get("entities", [])
        anchors = item.get("anchors", [])  # absent from an answer to an older schema: about nothing in particular
        if not isinstance(summary, str) or not summary.strip():
            raise OutputError(f"memories[{i}].summary is missing or not a non-empty string (schema violation)")
        if not isinstance(content, str):
            raise OutputError(f"memories[{i}].full_content is missing or not a string (schema violation)")
        if not isinstance(entities, list) or not all(isinstance(e, str) for e in entities):
            raise OutputError(f"memories[{i}].entities is not a list of strings (schema violation)")
        if not isinstance(anchors, list) or not all(isinstance(a, str) for a in anchors):
            raise OutputError(f"memories[{i}].anchors is not a list of strings (schema violation)")
        for key in ("importance", "kind", "scope"):
            if key in item and not isinstance(item[key], str):
                raise OutputError(f"memories[{i}].{key} is not a string (schema violation)")
        out.append({
            "summary": _bite(summary),
            "full_content": (content.strip() or summary.strip())[: limits.content_chars * 2],
            "entities": [e.strip()[: limits.entity_chars] for e in entities if e.strip()][: limits.entities * 2],
            "anchors": [a.strip()[: limits.entity_chars] for a in anchors if a.strip()][: limits.anchors],
            "importance": item.get("importance") if item.get("importance") in ("high", "normal") else "normal",
            "kind": item.get("kind") if item.get("kind") in KINDS else "other",
            "scope": item.get("scope") if item.get("scope") in SCOPES else "project",
        })
    if len(out) > limits.max_memories * 2:
        log.warning("the model returned %d memories; keeping the first %d", len(out), limits.max_memories * 2)
        out = out[: limits.max_memories * 2]
    return Extraction(out, head_tail(rolling.strip(), limits.rolling_summary_chars * 2))


# --- when to extract ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Due:
    session_id: str
    project: str | None
    reason: str | None      # why it is due; None: not due
    eligible: int           # messages the next job would take
    detail: str             # for --dry-run: what was measured


def due_reason(c: sql.ExtractionCandidate, settings: Settings, now_ms: int) -> Due:
    idle_ms = settings.extract_idle_minutes * 60_000
    idle_for = now_ms - c.activity_ms if c.activity_ms is not None else None
    idle = idle_for is not None and idle_for >= idle_ms
    eligible = c.new_messages if idle else c.complete_messages
    since = c.last_extracted_at or c.first_new_ts_ms or c.activity_ms
    since_min = (now_ms - since) / 60_000 if since else None
    detail = (f"{c.new_messages} new message(s), {eligible} in complete rounds or idle; "
              + (f"last extraction {since_min:.0f} min ago; " if c.last_extracted_at and since_min is not None
                 else "never extracted; ")
              + (f"idle {idle_for / 60_000:.0f} min" if idle_for is not None else "activity unknown"))
    reason = None
    if eligible > 0:
        if eligible >= settings.extract_min_messages:
            reason = f"{eligible} new messages (>= extract_min_messages {settings.extract_min_messages})"
        elif since_min is not None and since_min >= settings.extract_max_minutes:
            reason = (f"{since_min:.0f} minutes since the last extraction "
                      f"(>= extract_max_minutes {settings.extract_max_minutes:g})")
        elif idle:
            reason = f"session idle for {idle_for / 60_000:.0f} minutes (>= extract_idle_minutes " \
                     f"{settings.extract_idle_minutes:g})"
    return Due(c.session_id, c.project, reason, eligible, detail)


def evaluate_sessions(conn: apsw.Connection, settings: Settings, now_ms: int,
                      session_ids: list[str] | None = None) -> list[Due]:
    """Every recently active session with unextracted messages, due or not (recent_days bounds the scan)."""
    since = now_ms - int(settings.recent_days * 86_400_000)
    return [due_reason(c, settings, now_ms) for c in sql.extraction_candidates(conn, since, session_ids)]


def dedupe_key(session_id: str) -> str:
    return f"{EXTRACT}:{session_id}"


def find_due(check: DueCheck) -> list[DueJob]:
    """An extract job for each session whose triggers fire; only when an LLM backend is usable."""
    if not check.llm_available:
        return []
    sessions_ = sorted(check.sessions) if check.sessions is not None else None
    return [DueJob(dedupe_key(d.session_id), {"session_id": d.session_id},
                   f"session {d.session_id} ({d.project or 'no project'}): {d.reason}")
            for d in evaluate_sessions(check.conn, check.settings, check.now_ms, sessions_) if d.reason]


# --- the job -----------------------------------------------------------------------------------

class _OffTheRecord(Exception):
    """The session went off the record while its batch was with the LLM."""


class Extractor:
    """The `extract` job handler: batches until the session has nothing eligible left."""

    def __init__(self, limits: OutputLimits | None = None) -> None:
        self.limits = limits or OutputLimits()

    def request(self, prompt: str, settings: Settings) -> LLMRequest:
        return LLMRequest(
            system=SYSTEM_PROMPT, prompt=prompt, schema=output_schema(self.limits, bounded=False),
            schema_name="engram_memories", max_output_tokens=self.limits.max_output_tokens,
            timeout=settings.llm_timeout_seconds, bounded_schema=output_schema(self.limits, bounded=True),
        )

    def next_batch(self, conn: apsw.Connection, settings: Settings, session_id: str,
                   now_ms: int, max_tokens: int | None = None) -> tuple[PromptBatch, str | None] | None:
        """The next batch of the session to extract, or None when nothing is eligible yet."""
        session = episodes_sql.session_progress(conn, session_id)
        if session is None:
            return None
        project = session[0]
        progress = sql.extraction_progress(conn, session_id)
        messages = episodes_sql.messages_after(conn, session_id, progress.extracted_through, MAX_SCAN_MESSAGES)
        if not messages:
            return None
        activity = sessions.session_activity(conn, session_id)
        idle = activity is not None and now_ms - activity >= settings.extract_idle_minutes * 60_000
        if not idle and len(messages) < MAX_SCAN_MESSAGES:
            last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
            messages = messages[:last_user] if last_user is not None else []
        if not messages:
            return None
        return build_prompt(project, progress.rolling_summary, messages, settings, max_tokens), project

    def __call__(self, ctx: JobContext, job: sql.JobRow) -> None:
        session_id = job.payload.get("session_id")
        if not isinstance(session_id, str) or not session_id:
            raise JobRejected(f"extract job #{job.id} has no session_id in its payload {job.payload!r}")
        batches = 0
        while True:
            if ctx.stop_requested():
                raise RetryLater("the processor is stopping; the rest of the session is extracted later", 0)
            found = self.next_batch(ctx.conn, ctx.settings, session_id, now_ms(),
                                    ctx.backend.prompt_token_limit if ctx.backend else None)
            if found is None:
                if batches == 0:
                    log.info("extract %s: nothing eligible (yet)", session_id)
                return
            batch, project = found
            result = ctx.call_llm(self.request(batch.prompt, ctx.settings),
                                  lambda text: parse_extraction(text, self.limits))
            uuids = [m.uuid for m in batch.messages]
            # What it is anchored to comes first among its entities: where the lesson index files it (a fact
            # under its first one), as the miners file theirs.
            candidates = [Candidate(
                summary=m["summary"], full_content=m["full_content"],
                entities=list(dict.fromkeys([*m["anchors"], *m["entities"]])),
                importance=m["importance"], kind=m["kind"], scope=m["scope"], source_type="auto",
                session_id=session_id, project=project, source_uuids=uuids,
            ) for m in result.memories]
            origins = [origin_of(m["kind"], m["anchors"]) for m in result.memories]
            stamp = now_ms()
            through = batch.last_id

            def advance(conn: apsw.Connection, through: int = through, summary: str = result.rolling_summary,
                        stamp: int = stamp) -> None:
                if sessions.session_opt_out(conn, session_id) == "record":
                    raise _OffTheRecord  # rolls the memories back with it (one transaction)
                sql.set_extraction_progress(conn, session_id, through, summary, stamp)

            def told_as_mined(conn: apsw.Connection, outcomes: list, origins: list = origins) -> None:
                for outcome, origin in zip(outcomes, origins, strict=True):
                    if origin is not None and outcome.action in ("add", "update"):
                        origins_sql.set_origin(conn, outcome.episode_id, origin)

            try:
                outcomes = ctx.store.add_memories(candidates, progress=advance, linked=told_as_mined)
            except _OffTheRecord:
                log.info("extract %s: the session went off the record during the call; nothing stored", session_id)
                return
            batches += 1
            log.info("extract %s: %d message(s) through #%d -> %s", session_id, len(batch.messages), through,
                     ", ".join(f"{o.action} {o.episode_id}" for o in outcomes) or "no memories")


def job_type(limits: OutputLimits | None = None) -> JobType:
    return JobType(EXTRACT, Extractor(limits), priority=0, uses_llm=True, due=find_due, asked_on_capture=True)
