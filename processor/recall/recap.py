"""What the project's last session did, told when the user asks for it ("where did we leave off?").

Later sessions often begin by continuing, and the user asks: "do you know what we did in our last session?",
"where did we leave off?" (BookMinder, both). The memories answer neither: a lesson waits for its call, a commit
message is recalled only when searched for. So a prompt that asks about the previous session is told, as one bite
with it, what that session said last (its closing summary, in its own words), what it committed and what its todo
list left open — and the file the project's sessions keep their open work in (BookMinder's `TODO.md`, where a
session pinned the priorities: the user asked the next one "Did you check TODO.md?"). Only when asked: opening
every session with the last one's summary tells most of them nothing.

English cues only; the question must be asked (a sentence with the cue that asks or requests: "… previous
sessions were done with Sonnet 3.7" is not), and "where were we?" in a session that already had prompts (after a
``/compact``) asks about that session: only a question that names the last session reaches back then.
"""

from __future__ import annotations

import re
from dataclasses import replace

from processor.clock import utc_date
from processor.hook_kit.hook_io import EDITING
from processor.recall.digest import open_todos
from processor.store import digest as digest_sql
from processor.store import episodes as episodes_sql
from processor.store import tool_calls as tool_calls_sql
from processor.store.episodes import StoredMessage

# What names the previous session's work, and what makes a sentence ask for it. "Where were we?" asked in a
# session that already had prompts (after a /compact) is about that session: only the named ones ("our last
# session") reach back then.
_NAMES_LAST = re.compile(r"\b(?:last|previous|earlier|yesterday'?s) (?:session|conversation|chat)\b", re.IGNORECASE)
_ABOUT_LAST = re.compile(_NAMES_LAST.pattern + r"|\bleft off\b|\bleave off\b|\bwhere were we\b|\bwhere we stopped\b"
                         r"|\bpick up where\b|\bwhat (?:did|have) we (?:do|done|did)\b", re.IGNORECASE)
NAMED, UNNAMED = "named", "unnamed"  # how a prompt asks: naming the last session, or only where "we" were
_ASKS = re.compile(r"\?|\b(?:remind me|recap|summari[sz]e|tell me|catch me up|continue|pick up)\b", re.IGNORECASE)
BITE_ROOM = 590  # characters: the hooks show a bite whole up to 600 (hook_io.MAX_BITE_CHARS)
SAID_CHARS = 360  # of the session's closing words, at most: the gist of a summary, not all of it
MIN_SAID = 60  # characters: "Done." is not a closing summary
LOOKED_AT = 20  # the session's newest assistant messages read for its last words
COMMITS = 4
# A file that holds a project's open work, by its name's stem (`TODO.md`, `.planning/STATE.md`, `ROADMAP.md`):
# one changed in any of the project's last RECENT_SESSIONS sessions is named with the recap (BookMinder pinned its
# priorities in TODO.md in one session; the next four did not touch it, and the fifth needed them).
PLAN_STEMS = frozenset({"todo", "todos", "roadmap", "state", "plan", "backlog", "tasks", "progress", "next"})
RECENT_SESSIONS = 5
CHANGES_READ = 2_000  # (file, session) changes read, the newest first: the last sessions' are among them
_TOOL_MARK = re.compile(r"\[tool: [^\]]*\]")


def asks_for_last_session(prompt: str) -> str | None:
    """Whether the user's message asks what the project's previous session did: ``NAMED`` when it names that
    session, ``UNNAMED`` for "where were we?", None when it does not ask."""
    asked = None
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", prompt[:4000]):
        if _ABOUT_LAST.search(sentence) and _ASKS.search(sentence):
            if _NAMES_LAST.search(sentence):
                return NAMED
            asked = UNNAMED
    return asked


def last_said(messages: list[StoredMessage]) -> StoredMessage | None:
    """Of a session's newest assistant messages (newest first), the last that says something: not a bare tool call
    ("[tool: Bash]") nor a line of narration before one ("Let me run the tests: [tool: Bash]"); its text without
    the tool-call marks."""
    for message in messages:
        text = _TOOL_MARK.sub(" ", message.text).strip()
        if len(text) >= MIN_SAID and not _TOOL_MARK.search(message.text[-80:]):
            return replace(message, text=text)
    return None


def _commit(summary: str) -> str:
    """A commit memory as the recap names it: ``018c746`` and its subject (the body and a console's cost line
    after the subject's "…" left out)."""
    head, _, subject = summary.removeprefix("Committed ").partition(": ")
    sha = head.split(" ", 1)[0]  # "63dbde7 on `main`": the branch it went on is the session's own
    return f"`{sha}` {subject.split('…', 1)[0].strip()}"


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


# Where a closing summary says what is left (its own line): "Next steps:", "Here's what you need to do next:",
# "Remaining work", "Still to do", "Open questions". Said after what was done, and cut off first without this.
_NEXT = re.compile(r"^[#*>\s-]*[^\n]{0,60}?\b(?:next steps?|(?:to )?do next|what'?s next|what is next|remaining"
                   r"(?: steps| work| tasks)?|left to do|still (?:to do|open|pending)|follow-?ups?|"
                   r"open (?:items|questions|issues))\b[^\n]*$", re.IGNORECASE | re.MULTILINE)
# The closing offer ("Is there anything else you'd like me to help with?"): says nothing of the work.
_OFFER = re.compile(r"\n\s*(?:is there anything else|let me know if|would you like me to|anything else)[^\n]*\s*$",
                    re.IGNORECASE)


def _gist(text: str, limit: int) -> str:
    """A session's closing words in `limit` characters: what they say is left to do kept whole when they say it
    (the next session starts there: BookMinder's "Here's what you need to do next: 1. Create the GitHub
    repository …" was cut off after the list of what was done), what was done shortened before it."""
    text = _OFFER.sub("", text).strip()
    found = _NEXT.search(text)
    if found is None or found.start() == 0:
        return _cut(text, limit)
    ahead = _cut(text[found.start():], limit * 2 // 3)
    return f"{_cut(text[:found.start()], max(limit - len(ahead) - 1, 40))} {ahead}"


def plan_file(conn, project: str, session_id: str) -> str | None:
    """The file the project's recent sessions keep their open work in, with how often they changed it: a `TODO.md`
    (or `ROADMAP.md`, `.planning/STATE.md`, …) changed in the last RECENT_SESSIONS other sessions — the one changed
    in the most, then the most recently. None when there is none."""
    recent = [s for s in tool_calls_sql.project_sessions_with_calls(conn, project, RECENT_SESSIONS + 1)
              if s != session_id][:RECENT_SESSIONS]
    changed: dict[str, set[str]] = {}  # file name → the sessions that changed a file of that name
    for target, session, _ in tool_calls_sql.files_worked_on(conn, project, EDITING, CHANGES_READ):
        if session not in recent:
            continue
        name = target.rstrip("/").rpartition("/")[2]
        stem, dot, extension = name.rpartition(".")
        if dot and extension.lower() in ("md", "txt", "org") and stem.lower() in PLAN_STEMS:
            changed.setdefault(name, set()).add(session)
    ranked = sorted(changed.items(), key=lambda item: len(item[1]), reverse=True)  # stable: the newest first
    if not ranked:
        return None
    name, sessions = ranked[0]
    return (f"This project's sessions keep their open work in `{name}` (changed in {len(sessions)} of the last "
            f"{len(recent)}).")


def recap_bite(conn, project: str | None, session_id: str) -> dict | None:
    """The bite that says what the project's newest other session did: its last words, its commits, its open todo
    items; None when there is no such session or it left nothing to say."""
    if not project:
        return None
    last = digest_sql.last_session(conn, project, session_id, 0)
    if last is None:
        return None
    said = last_said(episodes_sql.last_messages(conn, last.session_id, "assistant", LOOKED_AT))
    commits = [_commit(c) for c in episodes_sql.session_commits(conn, last.session_id, COMMITS)]
    todos = open_todos(last.todos)
    plan = plan_file(conn, project, session_id)
    opening = f"The last session of this project ({utc_date(last.at)}) "
    parts = []
    if commits:
        parts.append("committed " + "; ".join(_cut(c, 80) for c in commits))
    if todos:
        parts.append("left its todo list with " + "; ".join(_cut(t, 70) for t in todos[:3]))
    if said is not None:  # its closing words take the room the rest leaves: the bite is shown whole
        room = BITE_ROOM - len(opening) - sum(len(p) + 5 for p in parts) - len("ended saying: “”") - len(plan or "")
        parts.insert(0, f"ended saying: “{_gist(said.text, min(SAID_CHARS, max(room, 120)))}”")
    if not parts:
        return None
    uuid = said.uuid if said is not None else last.message_uuid
    if not uuid:
        return None
    text = opening + "; it ".join(parts) + "." + (f" {plan}" if plan else "")
    return {"id": f"msg_{uuid}", "bite": text, "date": utc_date(last.at), "importance": "high", "kind": "task"}
