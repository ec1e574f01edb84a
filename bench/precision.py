"""Do the bites Engram injects help the prompt's work? Real prompts replayed in time order.

    python bench/precision.py [--projects-dir DIR] [--labels FILE] [--dump FILE] [--baseline-ref REF]
                              [--no-baseline] [--models-dir DIR] [--json]

The replay, per project of the projects folder (``~/.claude/projects`` layout): sessions are taken in the
order they started. Before a session is replayed, the lines every other session of the project wrote before
it started are appended to a copy of their transcripts and the real processor captures them and builds their
memories (``Processor.run_once``: capture, then episodes), so the store holds the project's earlier sessions
only, as they stood then. Then each typed prompt of the session (``bench/replay.py``: not tool results,
interruptions, shell-mode lines, slash-command plumbing or compaction summaries) goes through the code the
processor runs for a user message (``RecollectionWriter.write``: search, topic gate, the bar a bite must
clear), and every tool call the prompt's work made runs the real PreToolUse hook (a subprocess, stdin = the
tool call's event), which injects the prompt's bites once and, where the code has it, what an earlier
session left about the file or command in hand. Each session opens with the real SessionStart hook, whose
digest is recorded with the session's first prompt (``at``: ``session_start``). What each prompt would have
been shown is recorded.

``--dump FILE`` writes it: a JSON list of ``{"project", "session", "prompt_uuid", "prompt", "bites": [{"id",
"bite", "at", "tool"?, "tool_use_id"?}]}`` (``at``: ``session_start`` (the digest), ``prompt``, ``before_tool``
(the PreToolUse hook) or ``after_tool`` (the PostToolUseFailure hook, run on every call whose result failed, and
as the PostToolUse hook of every sub-agent call that returned, as Engram registers it with Claude Code); a
tool bite names the call it answered), for any projects folder, labelled or not — the replay of sessions it was
not built on, to be read and judged.

With labels (``bench/data/precision-dev.json``: per prompt the earlier messages, uuid and exact snippet, whose
content would help its work, or none), per prompt:
- a shown bite *holds* a useful snippet when its memory was made from that message and the bite carries the
  snippet's words (at least half of the smaller one's content terms, and three), or the snippet verbatim;
- helped: a shown bite holds one; clutter: bites shown, none holds one;
- silent when nothing useful existed: no label and nothing shown.
Reported: injection rate (prompts shown anything), helped (of prompts with something useful), clutter (of all
prompts), silent-when-nothing-useful, precision (bites holding a useful snippet / bites shown), bites per
prompt; prompts of a project's first session (an empty store) are counted apart.

Baseline, same run: the same replay on the code of ``--baseline-ref`` (default: the commit before the bites
work, today's rule "relevance >= 0.15, three bites"), checked out from this repository's git history into a
temporary folder and run in a subprocess with this script. ``--json`` prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.replay import Prompt, Session, ToolCall, project_sessions, projects  # noqa: E402

DEFAULT_PROJECTS = REPO.parent / "shared" / "fixtures" / "claude-projects"
DEFAULT_LABELS = REPO / "bench" / "data" / "precision-dev.json"
DEFAULT_MODELS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "engram-bench" / "models"
# Today's rule, before the bites work: every hit with relevance >= 0.15 became one of three bites.
BASELINE_REF = "33338cd"
HOOK = REPO / "recall_hook" / "pretooluse.py"
FAILURE_HOOK = REPO / "recall_hook" / "tool_failure.py"
SESSION_START_HOOK = REPO / "recall_hook" / "session_start.py"
_BITE_LINE = re.compile(r"^- \[[^\]]*\] (.*) \(id: (\S+)\)$")
_FIX_LINE = re.compile(r"^- ((?:This failed|`[^`]+` was not found) the same way .*) \(id: (\S+)\)$")
_WHERE_LINE = re.compile(r"^- (`[^`]+` is not there: this project's .* is `([^`]+)` \(worked on [^)]*\)\.)$")  # no id
_BELOW_LINE = re.compile(r"^(This call ran in `([^`]+)`, a folder of the project, .*)$")  # no id: not a memory


# --- the replay --------------------------------------------------------------------------------


def _append_until(session: Session, copy: Path, done: int, cutoff_ms: int | None) -> int:
    """Append the session's lines from index `done` that were written before cutoff; returns the new index."""
    end = done
    while end < len(session.lines):
        ts, _ = session.lines[end]
        if cutoff_ms is not None and ts is not None and ts >= cutoff_ms:
            break
        end += 1
    if end > done:
        copy.parent.mkdir(parents=True, exist_ok=True)
        with open(copy, "ab") as f:
            f.write(b"".join(raw + b"\n" for _, raw in session.lines[done:end]))
    return end


def _hook_event(session_id: str, call: ToolCall, cwd: str | None) -> bytes:
    return json.dumps({"session_id": session_id, "hook_event_name": "PreToolUse", "tool_name": call.name,
                       "tool_input": call.input, "tool_use_id": call.tool_use_id, "cwd": cwd or ""}).encode()


def _failure_event(session_id: str, call: ToolCall, cwd: str | None) -> bytes:
    return json.dumps({"session_id": session_id, "hook_event_name": "PostToolUseFailure", "tool_name": call.name,
                       "tool_input": call.input, "tool_use_id": call.tool_use_id, "error": call.error or "",
                       "is_interrupt": False, "cwd": cwd or ""}).encode()


def _returned_event(session_id: str, call: ToolCall, cwd: str | None) -> bytes:
    """The PostToolUse event of a sub-agent's call that returned (Engram's matcher: Task|Agent)."""
    return json.dumps({"session_id": session_id, "hook_event_name": "PostToolUse", "tool_name": call.name,
                       "tool_input": call.input, "tool_use_id": call.tool_use_id, "tool_response": call.output,
                       "cwd": cwd or ""}).encode()


def _session_start_event(session: Session, cwd: str | None) -> bytes:
    return json.dumps({"session_id": session.session_id, "transcript_path": str(session.path), "cwd": cwd or "",
                       "hook_event_name": "SessionStart", "source": "startup"}).encode()


# The SessionStart hook reads the clock (where the last session stopped: active in the last 72 hours; a fact
# stored on purpose: new for 48 hours). Replayed months later, its clock must say when the session started:
# libfaketime (Debian's `faketime`) sets it for that one process.
FAKETIME_LIBS = tuple(f"/usr/lib/{arch}faketime/libfaketime.so.1"
                      for arch in ("x86_64-linux-gnu/", "aarch64-linux-gnu/", "", "../local/lib/"))


def session_clock() -> str | None:
    """The libfaketime that sets a replayed hook's clock, None when it is not installed."""
    return next((lib for lib in FAKETIME_LIBS if os.path.exists(lib)), None)


HOOK_CLOCK_NOTE = ("the hooks ran on the replayed clock: SessionStart at each session's start, a tool call's at its "
                   "time (libfaketime)" if session_clock() else
                   "the hooks ran on today's clock: where the last session stopped, what was new and what a session "
                   "left running are never shown (install libfaketime: apt-get install faketime)")


def run_hook(home: Path, event: bytes, hook: Path = HOOK, at_ms: int | None = None) -> list[tuple[str, str]]:
    """A real hook (SessionStart, PreToolUse, or PostToolUseFailure), as Claude Code runs it: (id, bite) of what
    it told; `at_ms`: the time its clock says, when libfaketime is installed."""
    env = {"ENGRAM_HOME": str(home), "PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")}
    lib = session_clock() if at_ms is not None else None
    if lib is not None:
        env.update(LD_PRELOAD=lib, TZ="UTC",
                   FAKETIME="@" + time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at_ms / 1000)))  # type: ignore
    out = subprocess.run([sys.executable, "-I", "-S", str(hook)], input=event, capture_output=True, env=env,
                         timeout=30).stdout
    if not out.strip():
        return []
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    told = [(m.group(2), m.group(1)) for m in map(_BITE_LINE.match, context.splitlines()) if m]
    told += [(m.group(2), m.group(1)) for m in map(_FIX_LINE.match, context.splitlines()) if m]
    told += [("cwd:" + m.group(2), m.group(1)) for m in map(_BELOW_LINE.match, context.splitlines()) if m]
    return told + [("where:" + m.group(2), m.group(1)) for m in map(_WHERE_LINE.match, context.splitlines()) if m]


def _call_text(call: ToolCall) -> str:
    shown = {k: v for k, v in call.input.items() if k in ("file_path", "notebook_path", "path", "pattern", "command")}
    return f"{call.name} {json.dumps(shown, ensure_ascii=False)[:200]}"


def stores_in_time(sessions: list[Session], root: Path, settings: object) -> Iterator[tuple[int, Session, object]]:
    """Each of a project's sessions (`number`, `session`, an open store connection or None) with the store as it
    stood when the session started: the other sessions' lines written by then captured by the real processor
    (copies under `root`), and what the hooks told the sessions before it recorded as the running processor's
    injection watcher records it (what a memory was told before decides whether it is told again)."""
    from processor.recall.injections import ingest
    from processor.service.run_loop import Processor
    from processor.store import open_store

    done = {s.session_id: 0 for s in sessions}
    for number, session in enumerate(sessions):
        added = False
        for other in sessions:
            if other is not session:
                end = _append_until(other, root / other.path.parent.name / other.path.name,
                                    done[other.session_id], session.start_ms)
                added |= end > done[other.session_id]
                done[other.session_id] = end
        if added:
            Processor(settings).run_once(None)
        conn = open_store(settings.db_path) if session.prompts and settings.db_path.exists() else None
        if conn is not None:
            ingest(conn, settings.recollections_dir)
        try:
            yield number, session, conn
        finally:
            if conn is not None:
                conn.close()


def session_project(conn: object, cwd: str, branch: str | None) -> str:
    """The session's project as the processor names it for its lines: capture's resolver, reading the store as it
    stands (what earlier sessions showed of the repository). A tree from before project identity (a baseline)
    names it by the folder's git root."""
    try:
        from processor.capture.project import ProjectResolver
    except ImportError:
        ProjectResolver = None  # noqa: N806 - the class, when this tree has it
    if ProjectResolver is not None and conn is not None:
        return ProjectResolver(conn).lookup(cwd, branch).project
    from processor.capture.project import project_root

    return project_root(cwd)


def replay_project(project_dir: Path, workdir: Path, models_dir: Path, embedder: object) -> list[dict]:
    from processor.config import load_settings
    try:
        from processor.memory.episode_store import EpisodeStore
    except ImportError:  # a baseline tree from before mining and reading were apart (5c1acfc)
        from processor.memory.episodes import EpisodeStore
    from processor.recall.recollections import RecollectionWriter
    from processor.store import episodes as episodes_sql

    sessions = project_sessions(project_dir)
    if not sessions:
        return []
    home, root = workdir / "homes" / project_dir.name, workdir / "roots"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(ENGRAM_HOME=str(home), ENGRAM_PROJECTS_DIR=str(root), ENGRAM_MODELS_DIR=str(models_dir),
               ENGRAM_AUTOMEM="0")
    settings = load_settings(env)
    writer = RecollectionWriter(settings)
    records: list[dict] = []
    for number, session, conn in stores_in_time(sessions, root, settings):
        if not session.prompts:
            continue
        store = EpisodeStore(settings, conn, embedder=embedder) if conn is not None else None
        cwd = next((p.cwd for p in session.prompts if p.cwd), None)
        project = session_project(conn, cwd, next((p.branch for p in session.prompts if p.branch), None)) \
            if cwd else None
        def sources(ids: list[str], conn=conn) -> dict[str, list[str]]:
            """Each told memory's source lines: its messages and every transcript line merged into them."""
            episodes = [episodes_sql.get_episode(conn, i) for i in ids] if conn is not None else []
            return {e.id: e.source_uuids + _merged_lines(conn, e.source_uuids) for e in episodes if e is not None}

        # The session starts: the SessionStart hook's digest (what the agent reads before the first prompt).
        opening = run_hook(home, _session_start_event(session, cwd), SESSION_START_HOOK, session.start_ms) \
            if conn is not None else []
        for index, prompt in enumerate(session.prompts):
            records.append(_replay_prompt(home, writer, store, session, prompt, project, first=number == 0,
                                          sources=sources, opening=opening if index == 0 else []))
    return records


def _merged_lines(conn, message_uuids: list[str]) -> list[str]:
    """The transcript lines merged into these messages (an assistant message's later parts). Plain SQL here, so
    the same replay runs on an older tree's store for the baseline."""
    if not message_uuids:
        return []
    marks = ",".join("?" * len(message_uuids))
    return [row[0] for row in conn.execute(
        f"SELECT line_uuid FROM message_lines WHERE message_uuid IN ({marks})", message_uuids)]


def _replay_prompt(home: Path, writer: object, store: object, session: Session, prompt: Prompt,
                   project: str | None, first: bool, sources, opening: list[tuple[str, str]] = ()) -> dict:
    bites: list[dict] = [{"id": bite_id, "bite": text, "at": "session_start"} for bite_id, text in opening]
    started = time.perf_counter()
    path = writer.write(store, session.session_id, prompt.uuid, prompt.text, project) if store else None
    recollect_ms = (time.perf_counter() - started) * 1000
    shown: set[str] = {b["id"] for b in bites}
    if path is not None:
        for bite in json.loads(Path(path).read_text(encoding="utf-8")).get("bites", []):
            bites.append({"id": bite["id"], "bite": bite["bite"], "at": "prompt"})
            shown.add(bite["id"])
    for call in prompt.tool_calls:
        # On the call's clock, as the real hooks run: what a session left running is told for hours, not days.
        for bite_id, text in run_hook(home, _hook_event(session.session_id, call, call.cwd or prompt.cwd), HOOK,
                                      call.ts_ms):
            if bite_id not in shown:
                shown.add(bite_id)
                bites.append({"id": bite_id, "bite": text, "at": "before_tool", "tool": _call_text(call),
                              "tool_use_id": call.tool_use_id})
        after = _failure_event(session.session_id, call, call.cwd or prompt.cwd) if call.error is not None else \
            _returned_event(session.session_id, call, call.cwd or prompt.cwd) if call.output is not None else None
        if after is not None and FAILURE_HOOK.exists():
            for bite_id, text in run_hook(home, after, FAILURE_HOOK, call.ts_ms):
                if bite_id not in shown:
                    shown.add(bite_id)
                    bites.append({"id": bite_id, "bite": text, "at": "after_tool", "tool": _call_text(call),
                                  "tool_use_id": call.tool_use_id})
    found = sources([b["id"] for b in bites])
    for bite in bites:
        bite["sources"] = found.get(bite["id"], [])
    return {"project": session.path.parent.name, "session": session.session_id, "prompt_uuid": prompt.uuid,
            "prompt": prompt.text[:2000], "first_session": first, "tool_calls": len(prompt.tool_calls),
            "recollect_ms": round(recollect_ms, 1), "bites": bites}


def replay(projects_dir: Path, workdir: Path, models_dir: Path) -> list[dict]:
    from processor.config import load_settings
    from processor.memory.embedder import load_embedder
    from processor.memory.gguf_convert import ensure_default_gguf

    ensure_default_gguf(models_dir)
    embedder = load_embedder(load_settings({}).embedding_model, models_dir)
    records: list[dict] = []
    for project_dir in projects(projects_dir):
        records += replay_project(project_dir, workdir, models_dir, embedder)
    return records


def replay_baseline(ref: str, projects_dir: Path, models_dir: Path, workdir: Path) -> list[dict]:
    """The same replay on the code of `ref`: its tree from git, this replay copied into it, a subprocess."""
    tree = workdir / "baseline-tree"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    for name in ("precision.py", "replay.py"):
        shutil.copy2(REPO / "bench" / name, tree / "bench" / name)
    out = workdir / "baseline-dump.json"
    subprocess.run([sys.executable, str(tree / "bench" / "precision.py"), "--replay-only", "--dump", str(out),
                    "--projects-dir", str(projects_dir), "--models-dir", str(models_dir)], check=True, cwd=tree,
                   env={k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")})
    return json.loads(out.read_text(encoding="utf-8"))


# --- scoring -----------------------------------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset("a an and are as at be but by can do for from had has have how i if in into is it its me my no "
                  "not of on or our so that the then there this to was we were what when which will with you".split())


def _terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def _flat(text: str) -> str:
    return " ".join(text.lower().split())


def holds(bite: dict, useful: dict) -> bool:
    """Does this shown bite carry this labelled snippet? (see the module docstring)."""
    snippet = useful["text"]
    if _flat(snippet) in _flat(bite["bite"]):
        return True
    if useful["uuid"] not in bite.get("sources", []):
        return False
    want, have = _terms(snippet), _terms(bite["bite"])
    shared = len(want & have)
    return shared >= min(3, len(want)) and shared >= 0.5 * min(len(want), len(have))


def score(records: list[dict], labels: list[dict]) -> dict:
    by_prompt = {label["prompt_uuid"]: label for label in labels}
    rows = []
    for record in records:
        label = by_prompt.get(record["prompt_uuid"])
        if label is None and not record["first_session"]:
            continue  # an unlabelled prompt of a later session: not scored
        useful = label["useful"] if label else []
        holding = [b for b in record["bites"] if any(holds(b, u) for u in useful)]
        rows.append({"first": record["first_session"], "useful": bool(useful), "shown": len(record["bites"]),
                     "holding": len(holding), "at_tool": sum(b["at"] != "prompt" for b in record["bites"])})

    def measures(subset: list[dict]) -> dict:
        with_useful = [r for r in subset if r["useful"]]
        without = [r for r in subset if not r["useful"]]
        shown = sum(r["shown"] for r in subset)
        return {
            "prompts": len(subset), "prompts_with_useful": len(with_useful),
            "injection_rate": _share(sum(r["shown"] > 0 for r in subset), len(subset)),
            "helped": _share(sum(r["holding"] > 0 for r in with_useful), len(with_useful)),
            "clutter": _share(sum(r["shown"] > 0 and r["holding"] == 0 for r in subset), len(subset)),
            "silent_when_nothing_useful": _share(sum(r["shown"] == 0 for r in without), len(without)),
            "precision": _share(sum(r["holding"] for r in subset), shown),
            "bites_shown": shown, "bites_useful": sum(r["holding"] for r in subset),
            "bites_per_prompt": round(shown / len(subset), 2) if subset else None,
            "tool_bites": sum(r["at_tool"] for r in subset),
        }

    later = measures([r for r in rows if not r["first"]])
    return {**later, "first_sessions": measures([r for r in rows if r["first"]])}


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


# --- the command -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--projects-dir", type=Path, default=DEFAULT_PROJECTS)
    parser.add_argument("--labels", type=Path, default=DEFAULT_LABELS)
    parser.add_argument("--dump", type=Path, help="write what each replayed prompt would have been shown")
    parser.add_argument("--models-dir", type=Path, default=Path(os.environ["ENGRAM_MODELS_DIR"])
                        if os.environ.get("ENGRAM_MODELS_DIR") else DEFAULT_MODELS)
    parser.add_argument("--baseline-ref", default=BASELINE_REF, help="the git commit of today's rule")
    parser.add_argument("--no-baseline", action="store_true", help="skip the baseline replay")
    parser.add_argument("--replay-only", action="store_true", help=argparse.SUPPRESS)  # the baseline's subprocess
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="engram-precision-") as tmp:
        started = time.perf_counter()
        records = replay(args.projects_dir, Path(tmp), args.models_dir)
        seconds = time.perf_counter() - started
        if args.dump:
            args.dump.write_text(json.dumps(records, indent=1, ensure_ascii=False), encoding="utf-8")
        if args.replay_only:
            return 0
        baseline = None if args.no_baseline else replay_baseline(args.baseline_ref, args.projects_dir,
                                                                  args.models_dir, Path(tmp))
    labels = json.loads(args.labels.read_text(encoding="utf-8")) if args.labels.exists() else []
    report: dict = {"benchmark": "precision", "projects_dir": str(args.projects_dir), "labels": str(args.labels),
                    "prompts_replayed": len(records), "replay_seconds": round(seconds, 1)}
    if labels:
        report["engram"] = score(records, labels)
        if baseline is not None:
            report["baseline"] = {"ref": args.baseline_ref, **score(baseline, labels)}
    else:
        report["engram"] = {"injection_rate": _share(sum(bool(r["bites"]) for r in records), len(records)),
                            "bites_per_prompt": round(sum(len(r["bites"]) for r in records) / len(records), 2)
                            if records else None}
    for name in ("engram", "baseline"):
        if name in report:
            r = report[name]
            print(f"{name:>8}: prompts {r.get('prompts', len(records))}, injected {r['injection_rate']}, "
                  f"helped {r.get('helped')}, clutter {r.get('clutter')}, silent-when-nothing "
                  f"{r.get('silent_when_nothing_useful')}, precision {r.get('precision')}, "
                  f"bites/prompt {r['bites_per_prompt']}", file=sys.stderr)
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
