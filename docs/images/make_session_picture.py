"""What does Engram tell an agent, and when? The README's picture, remade from a real project replayed in time order.

    python docs/images/make_session_picture.py [--projects-dir DIR] [--session ID] [--call TOOL_USE_ID]
                                               [--out FILE] [--models-dir DIR] [--list]

The replay is ``bench/precision.py``'s, through the real processor and the real hooks: the project's sessions
(``~/.claude/projects`` layout; default: the BookMinder fixture, ten real Claude Code sessions) are taken in the
order they started; before each one, the lines the other sessions wrote before it started are captured by the
processor (``Processor.run_once``: capture, episodes, lessons, the lesson index), and then its prompts go through
the processor's code for a user message while every tool call runs the real PreToolUse hook and every failed
call the real PostToolUseFailure hook, each a subprocess reading the tool call's event as Claude Code sends it.

The picture is one call of ``--session`` (default: the BookMinder session of 2025-05-29) that Engram answered:
``--call`` names it by its ``tool_use_id``; without it, the session's first failed call that was told what fixed
the same failure in an earlier session. It shows, as a terminal would, the prompt, the call, its error, the one
line the user sees (the hook's ``systemMessage``) and what the model is told (its ``additionalContext``), word for
word. A call that nothing was told for is refused, with the calls of that session that were told something.
``--list`` prints every call told something, in every session, and draws nothing.

The image is an SVG written with Jinja2 (no browser needed); the same inputs make the same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from jinja2 import Environment  # noqa: E402

from bench.precision import (  # noqa: E402
    DEFAULT_MODELS,
    FAILURE_HOOK,
    HOOK,
    _failure_event,
    _hook_event,
    stores_in_time,
)
from bench.replay import Prompt, Session, ToolCall, project_sessions, projects  # noqa: E402

DEFAULT_PROJECTS = REPO.parent / "shared" / "fixtures" / "bookminder"
DEFAULT_SESSION = "406ba9a2-97e9-5fed-9f64-1389d8cfe9e3"  # BookMinder, 2025-05-29: pytest not found, again
DEFAULT_OUT = REPO / "docs" / "images" / "session.svg"
COLUMNS = 100  # characters a line of the picture holds
ERROR_LINES = 3


@dataclass
class Told:
    """One hook's answer to one tool call of the replay."""

    session: Session
    prompt: Prompt
    call: ToolCall
    event: str  # PreToolUse or PostToolUseFailure
    answer: dict  # the hook's JSON output: hookSpecificOutput.additionalContext, systemMessage


# --- the replay ----------------------------------------------------------------------------------------


def run_hook(home: Path, event: bytes, hook: Path) -> dict | None:
    """A real hook, as Claude Code runs it (``-I -S``, the event on stdin): its JSON answer, or None when silent."""
    env = {"ENGRAM_HOME": str(home), "PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")}
    out = subprocess.run([sys.executable, "-I", "-S", str(hook)], input=event, capture_output=True, env=env,
                         timeout=30, check=True).stdout
    return json.loads(out) if out.strip() else None


def replay(project_dir: Path, workdir: Path, models_dir: Path, until: str | None) -> list[Told]:
    """Every hook answer of the project's sessions, in time order, up to and including session `until`."""
    from processor.capture.project import project_root
    from processor.config import load_settings
    from processor.memory.embedder import load_embedder
    from processor.memory.episode_store import EpisodeStore
    from processor.memory.gguf_convert import ensure_default_gguf
    from processor.recall.recollections import RecollectionWriter

    sessions = project_sessions(project_dir)
    home, root = workdir / "home", workdir / "projects"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    # Only this project's Claude Code transcripts: never the machine's own Codex or Gemini sessions.
    env.update(ENGRAM_HOME=str(home), ENGRAM_PROJECTS_DIR=str(root), ENGRAM_MODELS_DIR=str(models_dir),
               ENGRAM_AUTOMEM="0", ENGRAM_AGENTS="claude")
    settings = load_settings(env)
    ensure_default_gguf(models_dir)
    embedder = load_embedder(settings.embedding_model, models_dir)
    writer = RecollectionWriter(settings)
    told: list[Told] = []
    for _, session, conn in stores_in_time(sessions, root, settings):
        if conn is not None:
            store = EpisodeStore(settings, conn, embedder=embedder)
            cwd = next((p.cwd for p in session.prompts if p.cwd), None)
            project = project_root(cwd) if cwd else None
            for prompt in session.prompts:
                writer.write(store, session.session_id, prompt.uuid, prompt.text, project)
                for call in prompt.tool_calls:
                    told += _answers(home, session, prompt, call)
        if session.session_id == until:
            break
    return told


def _answers(home: Path, session: Session, prompt: Prompt, call: ToolCall) -> list[Told]:
    found = []
    before = run_hook(home, _hook_event(session.session_id, call, prompt.cwd), HOOK)
    if before is not None:
        found.append(Told(session, prompt, call, "PreToolUse", before))
    if call.error is not None:
        after = run_hook(home, _failure_event(session.session_id, call, prompt.cwd), FAILURE_HOOK)
        if after is not None:
            found.append(Told(session, prompt, call, "PostToolUseFailure", after))
    return found


def choose(told: list[Told], session_id: str, call_id: str | None) -> list[Told]:
    """The answers to the pictured call: the one named, else the session's first failed call told a fix."""
    mine = [t for t in told if t.session.session_id == session_id]
    if call_id is None:
        call_id = next((t.call.tool_use_id for t in mine if t.event == "PostToolUseFailure"), None)
    chosen = [t for t in mine if t.call.tool_use_id == call_id]
    if not chosen:
        listed = "\n".join(f"  {t.call.tool_use_id}  {t.event:<18}  {_call_text(t.call)[:80]}" for t in mine)
        raise SystemExit(f"session {session_id}: no call {call_id or 'told a fix after it failed'}; the calls Engram "
                         f"told something in that session:\n{listed or '  (none)'}")
    return chosen


# --- the picture ---------------------------------------------------------------------------------------

Line = list[tuple[str, str]]  # (text, style) pieces of one line of the picture


def _call_text(call: ToolCall) -> str:
    target = next((str(call.input[k]) for k in ("command", "file_path", "path", "pattern") if k in call.input), "")
    return f"{call.name}({' '.join(target.split())})"


def _wrapped(text: str, style: str, first: str, rest: str, width: int = COLUMNS) -> list[Line]:
    """`text` wrapped to the picture's width, each line led by `first` (then `rest`) in the dim style."""
    lines: list[Line] = []
    for number, part in enumerate(textwrap.wrap(text, width - len(first), break_on_hyphens=False,
                                                replace_whitespace=False, drop_whitespace=True) or [""]):
        lines.append([(first if number == 0 else rest, "dim"), (part, style)])
    return lines


def said_before(session: Session, call: ToolCall) -> str | None:
    """What the assistant said right before the call, in the same stretch of work (its first paragraph)."""
    uuids = [json.loads(raw).get("uuid") for _, raw in session.lines]
    if call.uuid not in uuids:
        return None
    for _, raw in reversed(session.lines[:uuids.index(call.uuid) + 1]):
        entry = json.loads(raw)
        content = (entry.get("message") or {}).get("content")
        if entry.get("type") == "user" and not (isinstance(content, list) and content
                                                 and all(b.get("type") == "tool_result" for b in content)):
            return None  # the prompt: nothing was said since
        if entry.get("type") == "assistant" and isinstance(content, list):
            texts = [b["text"] for b in content if b.get("type") == "text" and b.get("text", "").strip()]
            if texts:
                return " ".join(texts[-1].strip().split("\n\n")[0].split())
            if any(b.get("type") == "tool_use" and b.get("id") != call.tool_use_id for b in content):
                return None  # another call came between
    return None


def _day(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d") if ms is not None else "?"


def picture_lines(chosen: list[Told]) -> list[Line]:
    """The exchange as a terminal shows it, with what Engram said and to whom."""
    first = chosen[0]
    prompt, call = first.prompt, first.call
    lines: list[Line] = []
    prompt_text = " ".join(prompt.text.split())
    lines += _wrapped(prompt_text[:2 * COLUMNS], "user", "> ", "  ")[:2]
    earlier = prompt.tool_calls.index(call)
    if earlier:
        lines.append([("  ⋯ ", "dim"), (f"{earlier} tool call{'s' if earlier > 1 else ''} later", "dim")])
    lines.append([])
    said = said_before(first.session, call)
    if said:
        lines += _wrapped(said, "said", "● ", "  ") + [[]]
    for told in chosen:
        if told.event == "PreToolUse":
            lines += _told(told, "before the call (PreToolUse)")
    lines += _wrapped(_call_text(call), "tool", "● ", "  ")
    if call.error is not None:
        error = [line for line in call.error.splitlines() if line.strip()][:ERROR_LINES]
        for number, line in enumerate(error):
            lines += _wrapped(line, "error", "  └  " if number == 0 else "     ", "     ")
    for told in chosen:
        if told.event == "PostToolUseFailure":
            lines += _told(told, "right after the failure (PostToolUseFailure)")
    return lines


def _told(told: Told, moment: str) -> list[Line]:
    lines: list[Line] = []
    shown = told.answer.get("systemMessage")
    if shown:
        lines += _wrapped(shown, "engram", "  └  ", "     ")
        lines.append([("     ", "dim"), ("↑ the line you see in the terminal; the model never sees it", "note")])
    lines.append([])
    lines.append([("  ", "dim"), (f"What Engram told the model, {moment}:", "note")])
    context = told.answer.get("hookSpecificOutput", {}).get("additionalContext", "")
    for line in context.splitlines():
        lines += _wrapped(line, "told", "  ┃ ", "  ┃   ")
    lines.append([])
    return lines


SVG = Environment(autoescape=True, keep_trailing_newline=True).from_string("""\
<svg xmlns="http://www.w3.org/2000/svg" width="{{ width }}" height="{{ height }}" \
viewBox="0 0 {{ width }} {{ height }}" role="img" aria-labelledby="title">
<title id="title">{{ label }}</title>
<style>
text { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", "Liberation Mono", monospace; \
font-size: 14px; white-space: pre; fill: #e6edf3; }
.dim { fill: #7d8590; } .said { fill: #e6edf3; } .user { fill: #ffffff; font-weight: bold; }
.tool { fill: #7ee787; font-weight: bold; } .error { fill: #ff7b72; } .engram { fill: #d2a8ff; }
.note { fill: #79c0ff; } .told { fill: #f2cc60; }
.title { fill: #9da7b3; font-size: 13px; } .foot { fill: #7d8590; font-size: 12px; }
</style>
<rect width="{{ width }}" height="{{ height }}" rx="10" fill="#0d1117"/>
<path d="M0 10 a10 10 0 0 1 10 -10 h{{ width - 20 }} a10 10 0 0 1 10 10 v22 h-{{ width }} z" fill="#161b22"/>
<circle cx="20" cy="16" r="6" fill="#ff5f57"/><circle cx="40" cy="16" r="6" fill="#febc2e"/>\
<circle cx="60" cy="16" r="6" fill="#28c840"/>
<text class="title" x="{{ width // 2 }}" y="21" text-anchor="middle">{{ title }}</text>
{% for line in lines %}<text x="{{ left }}" y="{{ top + loop.index0 * step }}" xml:space="preserve">\
{% for text, style in line %}<tspan class="{{ style }}">{{ text }}</tspan>{% endfor %}</text>
{% endfor %}<text class="foot" x="{{ left }}" y="{{ height - 14 }}" xml:space="preserve">{{ foot }}</text>
</svg>
""")


def render_svg(chosen: list[Told], project: str) -> str:
    session = chosen[0].session
    title = f"{project} · session {session.session_id[:8]} · {_day(chosen[0].prompt.ts_ms)}"
    lines = picture_lines(chosen)
    step, top, left = 20, 58, 16
    width = left * 2 + round(COLUMNS * 8.45) + 8
    height = top + step * len(lines) + 24
    label = (f"A Claude Code session of {project}: a tool call fails and Engram tells the model what fixed the same "
             "failure in an earlier session")
    foot = "Replayed through Engram's processor and hooks: python docs/images/make_session_picture.py"
    return SVG.render(width=width, height=height, lines=lines, title=title, label=label, foot=foot, step=step,
                      top=top, left=left)


# --- the command ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects-dir", type=Path, default=DEFAULT_PROJECTS,
                        help="a folder in ~/.claude/projects layout; its first project is replayed")
    parser.add_argument("--session", default=DEFAULT_SESSION, help="the session pictured (its id)")
    parser.add_argument("--call", help="the tool call pictured (its tool_use_id); default: the session's first "
                                       "failed call told what fixed the same failure")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the SVG file to write")
    parser.add_argument("--models-dir", type=Path, default=DEFAULT_MODELS,
                        help="where the converted embedding model is kept between runs")
    parser.add_argument("--list", action="store_true", help="print every call told something, draw nothing")
    args = parser.parse_args(argv)
    found = projects(args.projects_dir)
    if not found:
        raise SystemExit(f"{args.projects_dir}: no project folder in it (expected ~/.claude/projects layout)")
    project_dir = found[0]
    with tempfile.TemporaryDirectory(prefix="engram-picture-") as work:
        told = replay(project_dir, Path(work), args.models_dir, None if args.list else args.session)
    if args.list:
        for t in told:
            context = t.answer.get("hookSpecificOutput", {}).get("additionalContext", "").splitlines()
            print(f"{t.session.session_id}  {t.call.tool_use_id}  {t.event:<18}  {_call_text(t.call)[:60]}")
            said = next((line for line in context if line.startswith("- ")), context[1] if len(context) > 1 else "")
            print(f"    {said[:110]}")
        return 0
    if not any(s.session_id == args.session for s in project_sessions(project_dir)):
        raise SystemExit(f"{project_dir}: no session {args.session} (pass --session with one of its ids)")
    chosen = choose(told, args.session, args.call)
    name = project_dir.name.rsplit("-", 1)[-1] or project_dir.name
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_svg(chosen, name), encoding="utf-8")
    print(f"wrote {args.out} ({chosen[0].event} to {_call_text(chosen[0].call)[:60]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
