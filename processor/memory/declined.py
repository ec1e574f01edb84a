"""A commit the user would not let skip the project's hooks: declined once, told before the next call that would.

Agents meet a commit hook's refusal and reach for the way around it (`git commit --no-verify`, pre-commit's
`SKIP=…`); a user who keeps the hooks declines the call. BookMinder's user declined three such calls over two
months, each in a session that had not been told the last one. The declined call is the rule in the user's own
act: a ``preference`` (origin ``declined``), filed under the commands hooks run on and told only before a call
that skips them (``processor/hook_kit/tool_keys.py`` ``hook_bypass``; ``recall_hook/pretooluse.py``), never at a
commit that runs them. One a project: the first decline says it.
"""

from __future__ import annotations

from processor.clock import utc_date
from processor.hook_kit.failure_keys import declined
from processor.hook_kit.tool_keys import hook_bypass
from processor.memory.command_text import command_told
from processor.memory.findings import Finding, Round
from processor.memory.identity import episode_id
from processor.memory.kinds import scope_for
from processor.redaction import redact


def findings(round_: Round) -> list[Finding]:
    """The round's calls the user declined that would have skipped the commit hooks: one rule a project."""
    for call in round_.in_round:
        if call.tool != "Bash" or not call.failed or not call.target or not declined(call.error):
            continue
        bypass = hook_bypass(call.target)
        if bypass is None:
            continue
        shown = command_told(call.target, root=round_.project)
        summary = redact(f"The user declined skipping this project's commit hooks (`{shown}`, "
                         f"{utc_date(call.ts_ms)}): make the commit pass them, or ask; never `{bypass}`.")
        return [Finding(id=episode_id(f"declined-bypass:{round_.project}"), kind="preference", summary=summary,
                        full_content=summary, entities=[redact(f"$ {shown}")],
                        source_uuids=[u for u in (call.use_uuid, call.result_uuid) if u], created_at=call.ts_ms,
                        miner="declined", scope=scope_for(None, round_.project))]
    return []
