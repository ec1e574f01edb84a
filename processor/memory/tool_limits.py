"""Where the agent's own tools hit a limit on the project's files: a file too big to read whole.

The agent's harness refuses some calls the same way every time: a ``Read`` of a file past its token limit ("File
content (56293 tokens) exceeds maximum allowed tokens (25000)"). The refusal says what to do instead, so the moment
that needs the lesson is before the next read of that file: each such failure becomes a ``fact`` about the file,
filed under it (``processor/recall/lesson_index.py``), told before a later session reads it whole with a tool that
has the limit (origin ``tool_limit``: not before a `git add` of it, nor a read of a part of it). Not before a read of
the files beside it: a folder of day-by-day logs holds small ones too, and each read of one was told a warning it
did not need (read moment by moment: related at best); a big one's own refusal says what to do.

Found without an LLM, in the harness's own words (Claude Code's and the agents that copy its tools); a refusal in
other words still has its failure signature.
"""

from __future__ import annotations

import re

from processor.memory.findings import Finding, Round
from processor.memory.identity import episode_id
from processor.memory.kinds import scope_for
from processor.redaction import redact

_TOO_BIG = re.compile(r"(?:file content|file) \((?P<size>[\d,]+) tokens\) exceeds maximum allowed tokens "
                      r"\((?P<limit>[\d,]+)\)|(?:file is too large|exceeds the maximum (?:file )?size)", re.IGNORECASE)
_READS = frozenset({"Read", "NotebookRead"})


def _relative(path: str, project: str | None) -> str:
    root = (project or "").rstrip("/") + "/"
    return path[len(root):] if project and path.startswith(root) else path


def findings(round_: Round) -> list[Finding]:
    """The round's reads refused for a file's size, as facts about those files (miner ``fact``), once a file."""
    found: list[Finding] = []
    seen: set[str] = set()
    for call in round_.in_round:
        if call.tool not in _READS or not call.failed or not call.target or call.target in seen:
            continue
        match = _TOO_BIG.search(call.error or "")
        if match is None:
            continue
        seen.add(call.target)
        path = _relative(call.target, round_.project)
        size = f" ({match.group('size')} tokens; the limit is {match.group('limit')})" if match.group("size") else ""
        summary = (f"`{path}` is too big for Read to take whole{size}: search it with Grep, or read a part with "
                   "offset and limit.")
        text = redact(summary)
        found.append(Finding(id=episode_id(f"too-big:{round_.project}:{path}"), kind="fact", summary=text,
                             full_content=text, entities=[redact(path)],
                             source_uuids=[u for u in (call.use_uuid, call.result_uuid) if u],
                             created_at=call.ts_ms, miner="tool_limit", scope=scope_for(None, round_.project)))
    return found
