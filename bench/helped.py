"""Was Engram told what a later session needed, at the moment it needed it? Real sessions replayed in time order.

    python bench/helped.py [--projects-dir DIR ...] [--opportunities FILE] [--dump FILE] [--baseline-ref REF]
                           [--no-baseline] [--models-dir DIR] [--json]

The replay is ``bench/precision.py``'s: per project, each session's prompts go through the processor's code for
a user message with the store holding only what the project's other sessions wrote before it started, and
every tool call runs the real PreToolUse hook, every call whose result failed the real PostToolUseFailure hook.
What was told, and where (``at``: ``prompt``, ``before_tool``, ``after_tool``, with the ``tool_use_id``), is
then checked against two sets of moments where a later session needed what an earlier one knew:

- **automatic**: every failed call of a later session that fails the way a call of an earlier session of the
  project failed and was got past (``recall_hook/failure_keys.py``: same program, same signature; got past: a
  later go at the same program ran clean in the same prompt's work, after something changed — the command, or
  a step before it). Helped: a tell at that call (before it, or right after the failure), or earlier in the
  session, of a memory made from that earlier failure or its fix (its source lines). A failure that recurs
  across sessions is counted once per later session (the first time it fails there).
- **labelled** (``bench/data/opportunities-dev.json``, two independent readers): per moment, the earlier lines
  that hold the knowledge and the later moment (a prompt, or a tool call) that needed it. Helped: told at or
  before the moment (at its prompt, before its call or earlier in its session), or right after its failure, by
  a memory made from one of those lines. Reported for the moments both readers found, and for either's.

Also reported: **precision** (bites that carry what an automatic or labelled moment needed, over bites shown,
in later sessions), **silent when nothing was needed** (later sessions' prompts with no moment in their work
that were shown nothing), and the cost the helped moments had paid (failed calls, exploration calls, user
corrections, as the readers counted them).

Baseline, same run: the same replay on the code of ``--baseline-ref`` (main before issue 28), in a subprocess of
its own tree. ``--json`` prints one JSON object last; ``--dump FILE`` writes every replayed prompt with what was
told (the format of ``bench/precision.py --dump``), for sessions the sets were not built on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.precision import DEFAULT_MODELS, replay, replay_baseline  # noqa: E402
from bench.replay import ToolCall, project_sessions, projects  # noqa: E402
from recall_hook.failure_keys import another_go, call_key, not_a_failure, same_failure, signature  # noqa: E402
from recall_hook.tool_keys import command_keys  # noqa: E402

FIXTURES = REPO.parent / "shared" / "fixtures"
DEFAULT_PROJECT_DIRS = [FIXTURES / "claude-projects", FIXTURES / "bookminder"]
DEFAULT_OPPORTUNITIES = REPO / "bench" / "data" / "opportunities-dev.json"
BASELINE_REF = "84d1884"  # main before issue 28
_LOOK = frozenset({"Read", "Grep", "Glob", "LS", "TodoWrite", "TodoRead", "WebSearch", "WebFetch", "Task"})


# --- the automatic moments: a later failure an earlier session got past -----------------------------------


@dataclass
class Failed:
    session: str
    prompt_uuid: str
    call: ToolCall
    key: str
    signature: list[str]
    fixed_by: ToolCall | None = None
    uuids: set[str] = field(default_factory=set)  # the lines a memory of it would be made from


def _key(call: ToolCall) -> str | None:
    command = call.input.get("command") if call.name == "Bash" else call.input.get("file_path")
    return call_key(call.name, command if isinstance(command, str) else None, call.error or "")


def _failures_of_prompt(session: str, prompt_uuid: str, calls: list[ToolCall]) -> list[Failed]:
    """The prompt's failed calls, each with the later call that got past it after something changed, if any."""
    found = []
    for index, call in enumerate(calls):
        if call.error is None or not_a_failure(call.name, call.error):
            continue
        key, sig = _key(call), signature(call.error)
        if key is None or not sig:
            continue
        failed = Failed(session, prompt_uuid, call, key, sig, uuids={call.uuid})
        between: list[ToolCall] = []
        for later in calls[index + 1:]:
            other = _key(later)
            same_target = call.name == "Bash" or later.input.get("file_path") == call.input.get("file_path")
            if other is not None and another_go(key, other) and same_target:
                if later.error is not None and same_failure(signature(later.error), sig):
                    between = []
                    continue
                changed = later.input != call.input or any(
                    b.name not in _LOOK and (b.name != "Bash" or any(
                        k.startswith("cmd:") for k in command_keys(str(b.input.get("command", ""))))) for b in between)
                if later.error is None and changed:
                    failed.fixed_by = later
                    failed.uuids.add(later.uuid)
                break
            between.append(later)
        found.append(failed)
    return found


def automatic_moments(projects_dirs: list[Path]) -> list[dict]:
    """Per project, in session order: each later session's first failure of each kind that an earlier session had
    got past."""
    moments = []
    for projects_dir in projects_dirs:
        for project_dir in projects(projects_dir):
            fixed: list[Failed] = []
            for session in project_sessions(project_dir):
                mine = [f for p in session.prompts for f in _failures_of_prompt(session.session_id, p.uuid,
                                                                                 p.tool_calls)]
                counted: list[Failed] = []
                for failure in mine:
                    earlier = [f for f in fixed if another_go(f.key, failure.key) and
                               same_failure(f.signature, failure.signature)]
                    if earlier and not any(same_failure(c.signature, failure.signature) for c in counted):
                        counted.append(failure)
                        moments.append({"project": project_dir.name, "session": session.session_id,
                                        "prompt_uuid": failure.prompt_uuid, "tool_use_id": failure.call.tool_use_id,
                                        "key": failure.key, "signature": failure.signature,
                                        "sources": sorted(set().union(*(f.uuids for f in earlier))),
                                        "sessions_before": len({f.session for f in earlier})})
                fixed += [f for f in mine if f.fixed_by is not None]
    return moments


# --- scoring ---------------------------------------------------------------------------------------------


def _tells(records: list[dict]) -> dict[str, list[tuple[int, int, dict]]]:
    """session → its tells in order: (prompt index, position in the prompt's work, bite)."""
    by_session: dict[str, list[tuple[int, int, dict]]] = {}
    for record in records:
        tells = by_session.setdefault(record["session"], [])
        index = record["prompt_index"]
        for position, bite in enumerate(record["bites"]):
            tells.append((index, position, bite))
    return by_session


def _told_by(bite: dict, sources: set[str]) -> bool:
    return bool(sources & set(bite.get("sources", [])))


def _helped(moment: dict, records_by_prompt: dict[str, dict], tells: dict[str, list], sources: set[str]) -> bool:
    """Told at or before the moment (its prompt, before its call, or earlier in its session), or right after
    its failure, by a memory made from the knowledge's lines."""
    record = records_by_prompt.get(moment["prompt_uuid"])
    if record is None:
        return False
    index = record["prompt_index"]
    call = moment.get("tool_use_id")
    for at_index, _, bite in tells.get(moment["session"], []):
        if at_index > index or not _told_by(bite, sources):
            continue
        if at_index < index or call is None or bite["at"] == "prompt" or bite.get("tool_use_id") == call:
            return True
        # A tell about an earlier call of the same prompt's work came before the moment too.
        order = [c for c in record.get("calls", [])]
        if call in order and bite.get("tool_use_id") in order[:order.index(call)]:
            return True
    return False


def score(records: list[dict], automatic: list[dict], labelled: list[dict]) -> dict:
    by_prompt = {r["prompt_uuid"]: r for r in records}
    tells = _tells(records)
    auto_helped = [m for m in automatic if _helped(m, by_prompt, tells, set(m["sources"]))]
    recurring = [m for m in automatic if m["sessions_before"] >= 1]
    label_rows = []
    for moment in labelled:
        sources = {s["uuid"] for s in moment["sources"]}
        label_rows.append((moment, _helped(moment["moment"], by_prompt, tells, sources)))
    both = [(m, h) for m, h in label_rows if len(m["readers"]) == 2]
    # Precision and silence over later sessions (the store held something then).
    needed_sources: dict[str, set[str]] = {}
    for moment in automatic:
        needed_sources.setdefault(moment["session"], set()).update(moment["sources"])
    for moment, _ in label_rows:
        needed_sources.setdefault(moment["moment"]["session"], set()).update(s["uuid"] for s in moment["sources"])
    moment_prompts = {m["prompt_uuid"] for m in automatic} | {m["moment"]["prompt_uuid"] for m, _ in label_rows}
    later = [r for r in records if not r["first_session"]]
    shown = [b for r in later for b in r["bites"]]
    useful = [b for r in later for b in r["bites"] if _told_by(b, needed_sources.get(r["session"], set()))]
    quiet = [r for r in later if r["prompt_uuid"] not in moment_prompts]
    cost = {"failed_calls": 0, "exploration_calls": 0, "user_corrections": 0}
    for moment, helped in label_rows:
        if helped:
            paid = next(iter(moment["cost"].values()), {})
            for name in cost:
                cost[name] += int(paid.get(name, 0) or 0)
    return {
        "automatic": {"moments": len(automatic), "helped": _share(len(auto_helped), len(automatic)),
                      "recurring_errors": len(recurring),
                      "recurring_told": _share(sum(m in auto_helped for m in recurring), len(recurring)),
                      "told_before_call": sum(any(b.get("tool_use_id") == m["tool_use_id"] and b["at"] ==
                                                  "before_tool" and _told_by(b, set(m["sources"]))
                                                  for r in records if r["session"] == m["session"]
                                                  for b in r["bites"]) for m in auto_helped)},
        "labelled": {"moments": len(label_rows), "helped": _share(sum(h for _, h in label_rows), len(label_rows)),
                     "moments_both_readers": len(both), "helped_both_readers": _share(sum(h for _, h in both),
                                                                                       len(both)),
                     "by_kind": _by_kind(label_rows), "cost_saved": cost},
        "precision": _share(len(useful), len(shown)), "bites_shown": len(shown), "bites_useful": len(useful),
        "silent_when_nothing_needed": _share(sum(not r["bites"] for r in quiet), len(quiet)),
        "prompts_later_sessions": len(later),
    }


def _by_kind(rows: list[tuple[dict, bool]]) -> dict[str, str]:
    kinds: dict[str, list[bool]] = {}
    for moment, helped in rows:
        kind = moment["kind"].get("a") or moment["kind"].get("b")
        kinds.setdefault(kind, []).append(helped)
    return {kind: f"{sum(v)}/{len(v)}" for kind, v in sorted(kinds.items())}


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 3) if whole else None


def _index(records: list[dict], projects_dirs: list[Path]) -> list[dict]:
    """Each record with its prompt's place in its session and the ids of its calls, in order."""
    calls: dict[str, tuple[int, list[str]]] = {}
    for projects_dir in projects_dirs:
        for project_dir in projects(projects_dir):
            for session in project_sessions(project_dir):
                for index, prompt in enumerate(session.prompts):
                    calls[prompt.uuid] = (index, [c.tool_use_id for c in prompt.tool_calls])
    for record in records:
        record["prompt_index"], record["calls"] = calls.get(record["prompt_uuid"], (0, []))
    return records


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--projects-dir", type=Path, action="append", dest="projects_dirs")
    parser.add_argument("--opportunities", type=Path, default=DEFAULT_OPPORTUNITIES)
    parser.add_argument("--dump", type=Path, help="write what each replayed prompt was told")
    parser.add_argument("--models-dir", type=Path, default=Path(os.environ["ENGRAM_MODELS_DIR"])
                        if os.environ.get("ENGRAM_MODELS_DIR") else DEFAULT_MODELS)
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    dirs = args.projects_dirs or DEFAULT_PROJECT_DIRS
    labelled = json.loads(args.opportunities.read_text())["opportunities"] if args.opportunities.exists() else []
    automatic = automatic_moments(dirs)
    with tempfile.TemporaryDirectory(prefix="engram-helped-") as tmp:
        started = time.perf_counter()
        records = [r for i, d in enumerate(dirs) for r in replay(d, _folder(Path(tmp) / f"run-{i}"),
                                                                   args.models_dir)]
        seconds = time.perf_counter() - started
        if args.dump:
            args.dump.write_text(json.dumps(records, indent=1, ensure_ascii=False), encoding="utf-8")
        baseline = None
        if not args.no_baseline:
            baseline = [r for i, d in enumerate(dirs)
                        for r in replay_baseline(args.baseline_ref, d, args.models_dir,
                                                 _folder(Path(tmp) / f"base-{i}"))]
    report = {"benchmark": "helped", "projects_dirs": [str(d) for d in dirs], "prompts_replayed": len(records),
              "replay_seconds": round(seconds, 1), "engram": score(_index(records, dirs), automatic, labelled)}
    if baseline is not None:
        report["baseline"] = {"ref": args.baseline_ref, **score(_index(baseline, dirs), automatic, labelled)}
    for name in ("engram", "baseline"):
        if name in report:
            r = report[name]
            print(f"{name:>8}: recurring errors told {r['automatic']['recurring_told']} of "
                  f"{r['automatic']['recurring_errors']}, labelled helped {r['labelled']['helped']} of "
                  f"{r['labelled']['moments']} (both readers {r['labelled']['helped_both_readers']}), precision "
                  f"{r['precision']} ({r['bites_useful']}/{r['bites_shown']}), silent when nothing needed "
                  f"{r['silent_when_nothing_needed']}", file=sys.stderr)
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
