"""The SessionStart digest: a short, token-budgeted summary of what Engram remembers for a project.

The SessionStart hook (``recall_hook/session_start.py``, run as ``<real python> -I -S`` through its
launcher once per session start: sources startup, resume, clear, compact) prints
``hook_output(event)``; Claude Code adds its ``additionalContext`` to the conversation (seeds 002
and 004: preferences, recent learnings and pending actions at session start). The digest holds, in
this order, only what a session should know before its first prompt:

1. where this project's last session stopped: the newest other session of the project, active in the last
   ``CONTINUE_HOURS``, when its todo list (Claude Code's TodoWrite; the Codex CLI's plan, the Gemini CLI's
   todos, stored alike) still had items in progress or pending — later sessions often begin by continuing; an
   item it put off for later ("… (future)", "Later: …") is not where it stopped;
2. this project's rules and decisions in the user's own words (standing instructions and decisions in the
   project's next ``store.digest.RULE_SESSIONS`` sessions after they were said — later a rule is told at the call
   that would break it, a decision at a call or a prompt about what it names; what was stored on purpose), the
   newest ``RULES_SHOWN``, but not a rule the project's lesson index guards at the call that breaks it
   (``unguarded``); the project is the git root of the event's ``cwd``
   (``processor/hook_kit/project.py``) as capture names it (``processor/capture/project.py``: a clone joins its
   project, a worktree is remembered; ``store/projects.py``), the same key capture stores in ``episodes.project``;
3. the user's preferences for all projects: active ``scope='global'`` ones of importance high, newest first (one
   mined from the user's words, like a project's rule, in each project's next sessions after it was said);
4. pending reviews, when there are any: the open rows of the ``reviews`` table (the cold path's
   judgement calls, walked with `engram review`), plus remember requests quarantined in
   ``$ENGRAM_HOME/queue/rejected/`` (malformed, never stored), which also need the user.
Never a verbatim round, and never what a session found or did (a lesson, an error's fix, a fact about a file,
a commit message): each has its own moment, the call it is about, where the hooks tell it.

Nothing at all for a session that opted out (``processor/capture/optout.py``): ``$ENGRAM_OFF`` in
the hook's environment (Claude Code's), the session's ``<session>.off`` file or its ``sessions.opt_out``.
Forgotten memories are never shown: every query reads active episodes only.

Budget: the whole ``additionalContext`` (fence included) stays within ``session_start_token_budget``
tokens (default 1,500), estimated with Engram's one rule, ``processor.memory.verbatim.estimate_tokens``:
one token per 4 characters, rounded up. The rules may take at most 40% of the budget; the preferences get the
rest. A memory that does not fit
is left out whole, never cut mid-line, and a memory already shown in an earlier section is not
repeated.

Speed: four indexed queries (``processor/store/digest.py``: each reads the newest rows of one
index range and stops at its LIMIT) plus two directory listings; no embedding model is loaded.
A progress handler interrupts SQLite at ``DEADLINE_SECONDS`` as a last resort. The database is
opened read-only and never created.
"""

from __future__ import annotations

import os
import time
from collections import namedtuple

from processor.hook_kit import hook_io
from processor.hook_kit.hook_io import fence, one_line
from processor.hook_kit.project import index_name, project_root
from processor.store import digest as digest_sql
from processor.store import projects as projects_sql
from processor.store.digest import Memory
from processor.tokens import estimate_tokens

SECTION_SHARE = 0.4  # of the budget, for each section but the last
ROWS_PER_SECTION = 20
RULES_SHOWN = 5  # the project's rules and decisions at most: the newest; the rest are told at their prompts
# A session that stopped this recently with its todo list still open is where the next one likely continues.
CONTINUE_HOURS = 72
NEW_HOURS = 48  # a fact stored on purpose is in the digest this long, then told with a prompt about it
TODO_ITEMS_SHOWN = 6
MAX_LINE_CHARS = 400  # a user's rule is kept whole up to this (processor.memory.preferences.MAX_RULE_CHARS)
DEADLINE_SECONDS = 0.8
# processor.capture.remember_inbox.SUFFIX, copied: importing that module costs logging & co.
REMEMBER_SUFFIX = ".remember.json"
BUDGET_ENV = "ENGRAM_SESSION_START_TOKEN_BUDGET"


class Pending(namedtuple("Pending", "reviews rejected")):
    """Open reviews (`engram review`), and remember requests moved to queue/rejected/ (to fix or delete)."""

    __slots__ = ()

    @property
    def total(self) -> int:
        return self.reviews + self.rejected


# The digest's sections, its pending count and the project it is for (None: cwd unknown).
Digest = namedtuple("Digest", "stopped global_high project_rules pending project")


def _count(directory: str, suffix: str | None) -> int:
    import posix

    try:
        names = posix.listdir(directory)
    except OSError:
        return 0
    if suffix is not None:
        return sum(1 for name in names if name.endswith(suffix))
    import stat

    count = 0
    for name in names:
        try:
            count += stat.S_ISREG(posix.stat(f"{directory}/{name}").st_mode)
        except OSError:
            continue
    return count


def count_pending(conn: object, queue_dir: object) -> Pending:
    return Pending(reviews=digest_sql.open_review_count(conn), rejected=_count(f"{queue_dir}/rejected", None))


def collect(conn: object, queue_dir: object, project: str | None, now_ms: int, session_id: str | None = None) -> Digest:
    limit = ROWS_PER_SECTION
    new_since = now_ms - NEW_HOURS * 3_600_000  # a fact stored on purpose this recently opens the next sessions
    # A rule mined from the user's words opens the project's next sessions, then waits for its call or prompt.
    global_high = digest_sql.global_important(conn, limit, new_since, project, session_id)
    rules: list[Memory] = []
    stopped = None
    if project:
        rules = digest_sql.project_rules(conn, project, RULES_SHOWN, new_since, session_id)
        stopped = digest_sql.last_session(conn, project, session_id, now_ms - CONTINUE_HOURS * 3_600_000)
    return Digest(stopped, global_high, rules, count_pending(conn, queue_dir), project)


def unguarded(digest: Digest, guarded: set[str]) -> Digest:
    """The digest without the rules the project's lesson index guards (``processor/recall/lesson_index.py``): a
    rule that forbids a command is told just before a call that would break it; at the session's start it is
    read long before that call, or in a session that makes none."""
    if not guarded:
        return digest
    return digest._replace(project_rules=[m for m in digest.project_rules if m.id not in guarded],
                           global_high=[m for m in digest.global_high if m.id not in guarded])


# How a todo item says it was put off, not left: "Add more test books when needed (future)", "Later: …".
DEFERRED = ("(future)", "(later)", "(optional)", "(deferred)", "(someday)", "(nice to have)", "(low priority)",
            "(backlog)", "(follow-up)", "(if needed)", "(when needed)")
DEFERRED_STARTS = ("future:", "later:", "optional:", "someday:", "backlog:", "nice to have:", "maybe:")


def deferred(item: str) -> bool:
    """Whether a todo item says it was put off for later: not where the session stopped."""
    text = item.strip().lower()
    return text.startswith(DEFERRED_STARTS) or any(cue in text for cue in DEFERRED)


def open_todos(todos: str | None) -> list[str]:
    """The items of a stored todo list (``status: content`` lines) not done and not put off for later: in progress
    first, then pending."""
    items = [line.partition(": ") for line in (todos or "").splitlines()]
    doing = [text for status, _, text in items if status == "in_progress" and text]
    pending = [text for status, _, text in items if status == "pending" and text and not deferred(text)]
    return [f"in progress: {t}" for t in doing] + [f"pending: {t}" for t in pending]


def stopped_line(stopped: object) -> str | None:
    """Where the last session stopped, as one line: its todo list's open items (None: it left none open)."""
    items = open_todos(stopped.todos) if stopped is not None else []  # type: ignore[attr-defined]
    if not items or not hook_io.valid_session_id(stopped.message_uuid):  # type: ignore[attr-defined]
        return None
    day = time.strftime("%Y-%m-%d", time.gmtime(stopped.at / 1000))  # type: ignore[attr-defined]
    more = len(items) - TODO_ITEMS_SHOWN
    text = "Its todo list was left with " + "; ".join(items[:TODO_ITEMS_SHOWN])
    text += f"; +{more} more" if more > 0 else ""
    # Its id is the message that wrote the list (memory_expand shows it with its session's context).
    return f"- [{day}, high] {one_line(text, MAX_LINE_CHARS * 2)} (id: msg_{stopped.message_uuid})"  # type: ignore


def memory_line(m: Memory) -> str:
    day = time.strftime("%Y-%m-%d", time.gmtime(m.created_at / 1000))
    return f"- [{day}, {m.importance}] {one_line(m.summary, MAX_LINE_CHARS)} (id: {m.id})"


DIGEST_IDS = 200  # ids kept in <session>.digest


def write_digest_ids(directory: str, session_id: str, ids: list[str], text: str = "") -> None:
    """Record what the session's digest showed in ``<session>.digest``: its ids (the recollection writer and the
    prompt hook leave them out of bites) and its text and time (the processor records the injection for the
    viewer). A complete temp file renamed into place (readers never see half of it); a resume, clear or compact
    writes it again with what that digest showed."""
    data = ('{"shown":[' + ",".join(hook_io.quote(i) for i in ids[:DIGEST_IDS]) + '],"text":' + hook_io.quote(text)
            + ',"at":' + str(int(time.time() * 1000)) + "}\n").encode()
    hook_io.write_private(directory, session_id + hook_io.DIGEST_SUFFIX, data)


def header(agent: str = hook_io.CLAUDE) -> str:
    """The digest's first line, naming the tools as the agent shows them to its model."""
    expand, recall = (hook_io.mcp_tool(tool, agent) for tool in ("memory_expand", "memory_recall"))
    return ("Engram memory digest: what earlier sessions taught. For a memory's full context call "
            f"{expand}(id); to search, {recall}(query).")


HEADER = header()


def pending_line(p: Pending, queue_dir: object) -> str | None:
    if not p.total:
        return None
    parts = []
    if p.reviews:
        parts.append(f"{p.reviews} open review(s) of memories the code may no longer support (`engram review`, "
                     "or the memory_review tool)")
    if p.rejected:
        parts.append(f"{p.rejected} rejected memory request(s) in {queue_dir}/rejected to fix or delete")
    return f"Pending reviews: {p.total} — " + "; ".join(parts) + "."


def render(digest: Digest, budget: int, queue_dir: object, shown_ids: list[str] | None = None,
           agent: str = hook_io.CLAUDE) -> str | None:
    """The fenced digest within `budget` estimated tokens, or None when there is nothing to say."""
    pending = pending_line(digest.pending, queue_dir)
    top = header(agent)
    fixed = [top] + ([pending] if pending else [])

    def cost(lines: list[str]) -> int:
        return estimate_tokens(fence("\n".join(lines), agent))

    if cost(fixed) > budget:
        return None
    body: list[str] = []
    shown: set[str] = set()
    project_name = digest.project.rstrip("/").rpartition("/")[2] if digest.project else ""
    stopped = stopped_line(digest.stopped)
    if stopped is not None and cost([top, "Where this project's last session stopped:", stopped]) <= budget:
        body += ["Where this project's last session stopped:", stopped]
        if shown_ids is not None:
            shown_ids.append(f"msg_{digest.stopped.message_uuid}")
    sections = (
        (f"Rules and decisions of this project ({project_name}), in the user's words:", digest.project_rules,
         SECTION_SHARE),
        ("Preferences (all projects):", digest.global_high, 1.0),
    )
    for title, memories, share in sections:
        section: list[str] = []
        section_cap = int(budget * share)
        for m in memories:
            if m.id in shown:
                continue
            line = memory_line(m)
            candidate = section + [line] if section else [title, line]
            if cost(candidate) > section_cap or cost([top, *body, *candidate, *fixed[1:]]) > budget:
                continue  # a shorter line further down may still fit
            section = candidate
            shown.add(m.id)
            if shown_ids is not None:
                shown_ids.append(m.id)
        body.extend(section)
    if not body and not pending:
        return None
    return fence("\n".join([top, *body, *fixed[1:]]), agent)


def budget(home: str) -> int:
    """session_start_token_budget: environment first, then config.toml, then the default."""
    raw = hook_io.getenv(BUDGET_ENV) or hook_io.config_value(home, "session_start_token_budget")
    try:
        return int(raw) if raw not in (None, "") else hook_io.SESSION_START_BUDGET_DEFAULT  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return hook_io.SESSION_START_BUDGET_DEFAULT


def hook_output(event: object, home: str | None = None, now_ms: int | None = None,
                agent: str = hook_io.CLAUDE) -> str | None:
    """The hook's stdout for this event (None: print nothing). Raises on failures; main() silences them.

    Reads the settings it needs itself (``hook_io``: $ENGRAM_HOME, config.toml) rather than through
    processor.config, whose imports alone would double the hook's cost.
    """
    if not isinstance(event, dict):
        return None
    started = time.monotonic()
    home = home or hook_io.data_home()
    if home is None:
        return None
    session_id = event.get("session_id")
    session_id = session_id if hook_io.valid_session_id(session_id) else None
    level = hook_io.env_opt_out()
    if level is not None:
        # Claude Code was started with ENGRAM_OFF: no digest. Off the record is the processor's to apply:
        # leave it the request (it never sees Claude Code's environment).
        if level == "record" and session_id:
            directory = home + "/recollections"
            os.makedirs(directory, mode=0o700, exist_ok=True)
            hook_io.write_private(directory, session_id + hook_io.OFF_SUFFIX, b"record")
        return None
    if session_id and hook_io.opted_out(home + "/recollections", session_id):
        return None  # the session opted out by a marker in a prompt (resume, clear, compact)
    if session_id and event.get("source") in ("compact", "clear"):
        # The agent's context lost what was told in it: every memory may be told once more.
        for suffix in (hook_io.SHOWN_SUFFIX, hook_io.PROMPT_SUFFIX):
            hook_io.remove(f"{home}/recollections/{session_id}{suffix}")
    cwd = event.get("cwd")
    root = project_root(cwd) if isinstance(cwd, str) and cwd else None
    conn = digest_sql.open_readonly(home + "/engram.db", started + DEADLINE_SECONDS)
    if conn is None:
        return None
    try:
        if session_id and digest_sql.session_opt_out(conn, session_id) is not None:
            return None
        # The project capture named for this folder: a clone's root, a worktree remembered, else the root itself.
        project = (projects_sql.project_for(conn, cwd, root) or root) if root else None
        digest = collect(conn, home + "/queue", project, int(time.time() * 1000) if now_ms is None else now_ms,
                         session_id)
    finally:
        conn.close()
    digest = unguarded(digest, hook_io.guarded_ids(home + "/recollections", index_name(project) if project else None))
    ids: list[str] = []
    context = render(digest, budget(home), home + "/queue", ids, agent)
    if context is None:
        return None
    session_id = event.get("session_id")
    if ids and hook_io.valid_session_id(session_id):
        try:
            write_digest_ids(home + "/recollections", session_id, ids, context)
        except OSError:  # no recollections folder yet (processor never ran): the digest goes out anyway
            return hook_io.answer(event, "SessionStart", context, ids, home)
    return hook_io.answer(event, "SessionStart", context, ids, home)
