"""Was Engram told what a later session needed, at the moment it needed it? Real sessions replayed in time order.

    python bench/helped.py [--set dev|cipher-box ...] [--dump FILE] [--audit-out FILE] [--baseline-ref REF]
                           [--no-baseline] [--models-dir DIR] [--json]
    python bench/helped.py --projects-dir DIR ... --opportunities FILE ...   # held-out sessions
    python bench/helped.py --audit-in FILLED.json ...                        # the read figures of a reading

Two labelled dev sets (``SETS``): ``dev`` (the fixture projects the rules of issue 28 were written on,
``bench/data/opportunities-dev.json``) and ``cipher-box`` (a second project labelled by two independent readers
before any rule was written for it, ``bench/data/opportunities-cipher-box.json``). Every figure is given per set:
design on one, measure the other without changing anything.

The replay is ``bench/precision.py``'s: per project, each session opens with the real SessionStart hook (its
digest), its prompts go through the processor's code for a user message with the store holding only what the
project's other sessions wrote before it started, and every tool call runs the real PreToolUse hook, every call
whose result failed the real PostToolUseFailure hook.
What was told, and where (``at``: ``prompt``, ``before_tool``, ``after_tool``, with the ``tool_use_id``), is
then checked against two sets of moments where a later session needed what an earlier one knew:

- **automatic**: every failed call of a later session that fails the way a call of an earlier session of the
  project failed and was got past (``processor/hook_kit/failure_keys.py``: same program, same signature; got past: a
  later go at the same program ran clean in the same prompt's work, after something changed — the command, or
  a step before it). Helped: a tell at that call (before it, or right after the failure), or earlier in the
  session, of a memory made from that earlier failure or its fix (its source lines). A failure that recurs
  across sessions is counted once per later session (the first time it fails there).
- **labelled** (``bench/data/opportunities-dev.json``, two independent readers): per moment, the earlier lines
  that hold the knowledge and the later moment (a prompt, or a tool call) that needed it. Helped: told at or
  before the moment (at its prompt, before its call or earlier in its session), or right after its failure, by
  a memory made from one of those lines. Reported for the moments both readers found, and for either's.

Also reported: **precision** (bites that carry what an automatic or labelled moment needed, over bites shown,
in later sessions; and ``precision_at_moments``, the digest left out), **prompt bites per prompt**, **silent when
nothing was needed** (later sessions' prompts with no moment in their work that were shown nothing after the
digest), and the cost the helped moments had paid (failed calls, exploration calls, user corrections, as the
readers counted them).

The judge above counts shared words, which flatters: ``--audit-out FILE`` writes, per set, a reading sample of
``AUDIT_BITES`` random bites and ``AUDIT_MOMENTS`` random moments for an independent reader
(``../shared/bench/RUBRIC.md``), and ``--audit-in`` turns the filled-in sample into the read figures.

Baseline, same run: the same replay on the code of ``--baseline-ref`` (main before issue 35), in a subprocess of
its own tree. ``--json`` prints one JSON object last; ``--dump FILE`` writes every replayed prompt with what was
told (the format of ``bench/precision.py --dump``; each bite with the moments of its session it carries), for
sessions the sets were not built on.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.precision import DEFAULT_MODELS, HOOK_CLOCK_NOTE, replay, replay_baseline, session_clock  # noqa: E402
from bench.replay import ToolCall, project_sessions, projects  # noqa: E402
from processor.hook_kit.failure_keys import (  # noqa: E402
    another_go,
    call_key,
    failure_key,
    not_a_failure,
    same_failure,
    signature,
)
from processor.hook_kit.tool_keys import command_keys  # noqa: E402

FIXTURES = REPO.parent / "shared" / "fixtures"
DATA = REPO / "bench" / "data"
# The labelled dev projects: the fixtures the rules were written on (issue 28), and a second project labelled by
# two readers before any rule was written for it (issue 35). Design on one, measure the other unchanged.
SETS = {
    "dev": ([FIXTURES / "claude-projects", FIXTURES / "bookminder"], DATA / "opportunities-dev.json"),
    "cipher-box": ([FIXTURES / "cipher-box"], DATA / "opportunities-cipher-box.json"),
}
BASELINE_REF = "5c1acfc"  # main before issue 35 (and the round's other issues)
AUDIT_BITES = AUDIT_MOMENTS = 20  # what an independent reader reads of each set (../shared/bench/RUBRIC.md)
_LOOK = frozenset({"Read", "Grep", "Glob", "LS", "TodoWrite", "TodoRead", "WebSearch", "WebFetch", "Task"})


# --- the automatic moments: a later failure an earlier session got past -----------------------------------


@dataclass
class Failed:
    session: str
    prompt_uuid: str
    call: ToolCall
    key: str
    fail_key: str
    signature: list[str]
    fixed_by: ToolCall | None = None
    uuids: set[str] = field(default_factory=set)  # the lines a memory of it would be made from


def _command(call: ToolCall) -> str:
    value = call.input.get("command") if call.name == "Bash" else call.input.get("file_path")
    return value if isinstance(value, str) else ""


def _key(call: ToolCall) -> str | None:
    return call_key(call.name, _command(call) or None, call.error or "")


def _core(call: ToolCall) -> str:
    first = (_command(call).strip().splitlines() or [""])[0]
    while first.startswith("cd ") and "&&" in first:
        first = first.split("&&", 1)[1].strip()
    return first


def _inspects(call: ToolCall) -> bool:
    return any(w in ("--help", "-h", "--version", "-V", "help") for w in _command(call).split())


def _failures_of_prompt(session: str, prompt_uuid: str, calls: list[ToolCall]) -> list[Failed]:
    """The prompt's failed calls, each with the call that got past it, when the prompt's work ends with the same
    call running clean: the first later go at the same program (the same file, for other tools) that ran clean,
    or that kept the failed command whole and added a step to it; retries that fail the same way and calls
    that read about the program (--help) passed over. A rerun with nothing changed is flaky, not fixed."""
    found = []
    for index, call in enumerate(calls):
        if call.error is None or not_a_failure(call.name, call.error):
            continue
        key, sig = _key(call), signature(call.error)
        if key is None or not sig:
            continue
        failed = Failed(session, prompt_uuid, call, key, failure_key(key, call.error), sig, uuids={call.uuid})
        later = calls[index + 1:]
        tries = [i for i, c in enumerate(later) if (other := _key(c)) is not None and another_go(key, other)
                 and (call.name == "Bash" or c.input.get("file_path") == call.input.get("file_path"))
                 and not _inspects(c)]
        resolved = None
        if any(later[i].error is None for i in tries):
            for i in tries:
                if later[i].error is None:
                    resolved = i
                    break
                if same_failure(signature(later[i].error), sig):
                    continue
                if _core(call) and _core(call) in _command(later[i]) and _core(call) != _core(later[i]):
                    resolved = i
                    break
        if resolved is not None:
            by = later[resolved]
            steps = [b for b in later[:resolved] if b.error is None and b.name not in _LOOK and not _inspects(b)
                     and (b.name != "Bash" or any(k.startswith("cmd:") for k in command_keys(_command(b))))]
            if " ".join(_command(by).split()) != " ".join(_command(call).split()) or steps:
                failed.fixed_by = by
                failed.uuids.add(by.uuid)
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
                    earlier = [f for f in fixed if f.fail_key == failure.fail_key and
                               same_failure(f.signature, failure.signature)]
                    if earlier and not any(c.fail_key == failure.fail_key and same_failure(c.signature,
                                                                                           failure.signature)
                                           for c in counted):
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


_WORD = re.compile(r"[a-z][a-z0-9_.-]+")
_STOP = frozenset("the and for with that this from into are was were not but its it's you your can will when then "
                  "also only each every been have has had use used run runs ran what which there their them they "
                  "so as of to in on at by or an a is be do does did fixed failed same way earlier session".split())


def _terms(text: str) -> set[str]:
    return {w.strip(".-") for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 2}


def holds(bite: dict, moment: dict) -> bool:
    """Does this bite carry what the moment needed? A memory made from its lines; a fix told right after its
    failure (the failure hook tells only a fix of the same failure); or the knowledge itself — a line's exact
    snippet, or most of a reader's statement of it (four content words or more, and at least 40% of the bite's)."""
    sources = moment["source_uuids"]
    if sources & set(bite.get("sources", [])):
        return True
    if moment.get("kind") == "same_error" and bite["at"] == "after_tool" and bite.get("tool_use_id") == \
            moment.get("tool_use_id"):
        return True
    text = " ".join(bite["bite"].lower().split())
    if any(len(snippet) >= 15 and " ".join(snippet.lower().split()) in text for snippet in moment["snippets"]):
        return True
    have = _terms(bite["bite"])
    for statement in moment["statements"]:
        shared = have & _terms(statement)
        if len(shared) >= 4 and len(shared) >= 0.4 * len(have):
            return True
    return False


def _moment_of(labelled: dict) -> dict:
    return {**labelled["moment"], "kind": labelled["kind"].get("a") or labelled["kind"].get("b"),
            "source_uuids": {s["uuid"] for s in labelled["sources"]},
            "snippets": [s["snippet"] for s in labelled["sources"]], "statements": list(labelled["knowledge"].values())}


def _auto_moment(moment: dict) -> dict:
    return {**moment, "kind": "same_error", "source_uuids": set(moment["sources"]), "snippets": [], "statements": []}


def _helped(moment: dict, records_by_prompt: dict[str, dict], tells: dict[str, list]) -> bool:
    """Told at or before the moment (its prompt, before its call, or earlier in its session), or right after
    its failure, by a bite that carries what it needed."""
    record = records_by_prompt.get(moment["prompt_uuid"])
    if record is None:
        return False
    index = record["prompt_index"]
    call = moment.get("tool_use_id")
    order = record.get("calls", [])
    for at_index, _, bite in tells.get(moment["session"], []):
        if at_index > index or not holds(bite, moment):
            continue
        if at_index < index or call is None or bite["at"] in ("prompt", "session_start") or \
                bite.get("tool_use_id") == call:
            return True
        if call in order and bite.get("tool_use_id") in order[:order.index(call)]:
            return True  # about an earlier call of the same prompt's work: before the moment too
    return False


def score(records: list[dict], automatic: list[dict], labelled: list[dict]) -> dict:
    by_prompt = {r["prompt_uuid"]: r for r in records}
    tells = _tells(records)
    auto = [_auto_moment(m) for m in automatic]
    auto_helped = [m for m in auto if _helped(m, by_prompt, tells)]
    recurring = [m for m in auto if m["sessions_before"] >= 1]
    label_rows = [(moment, _helped(_moment_of(moment), by_prompt, tells)) for moment in labelled]
    both = [(m, h) for m, h in label_rows if len(m["readers"]) == 2]
    # Precision and silence over later sessions (the store held something then).
    moments_of = moments_by_session(automatic, labelled)
    moment_prompts = {m["prompt_uuid"] for m in automatic} | {m["moment"]["prompt_uuid"] for m, _ in label_rows}
    later = [r for r in records if not r["first_session"]]
    shown = [b for r in later for b in r["bites"]]
    useful = [b for r in later for b in r["bites"] if any(holds(b, m) for m in moments_of.get(r["session"], []))]
    # The digest opens every session whatever it is about; the bites after it answer a moment (a prompt, a call).
    at_moments = [b for b in shown if b["at"] != "session_start"]
    useful_at_moments = [b for b in useful if b["at"] != "session_start"]
    quiet = [r for r in later if r["prompt_uuid"] not in moment_prompts]
    cost = {"failed_calls": 0, "exploration_calls": 0, "user_corrections": 0}
    for moment, helped in label_rows:
        if helped:
            paid = next(iter(moment["cost"].values()), {})
            for name in cost:
                cost[name] += int(paid.get(name, 0) or 0)
    return {
        "automatic": {"moments": len(auto), "helped": _share(len(auto_helped), len(auto)),
                      "recurring_errors": len(recurring),
                      "recurring_told": _share(sum(m in auto_helped for m in recurring), len(recurring)),
                      "told_before_call": sum(any(b.get("tool_use_id") == m["tool_use_id"] and b["at"] ==
                                                  "before_tool" and holds(b, m) for _, _, b in tells.get(
                                                      m["session"], [])) for m in auto_helped)},
        "labelled": {"moments": len(label_rows), "helped": _share(sum(h for _, h in label_rows), len(label_rows)),
                     "moments_both_readers": len(both), "helped_both_readers": _share(sum(h for _, h in both),
                                                                                       len(both)),
                     "by_kind": _by_kind(label_rows), "cost_saved": cost},
        "precision": _share(len(useful), len(shown)), "bites_shown": len(shown), "bites_useful": len(useful),
        "precision_at_moments": _share(len(useful_at_moments), len(at_moments)),
        "bites_at_session_start": len(shown) - len(at_moments),
        "prompt_bites_per_prompt": round(sum(b["at"] == "prompt" for b in shown) / len(later), 3) if later else None,
        "silent_when_nothing_needed": _share(sum(not [b for b in r["bites"] if b["at"] != "session_start"]
                                                 for r in quiet), len(quiet)),
        "prompts_later_sessions": len(later),
    }


def moments_by_session(automatic: list[dict], labelled: list[dict]) -> dict[str, list[dict]]:
    moments_of: dict[str, list[dict]] = {}
    for moment in [*(_auto_moment(m) for m in automatic), *(_moment_of(m) for m in labelled)]:
        moments_of.setdefault(moment["session"], []).append(moment)
    return moments_of


def annotate(records: list[dict], automatic: list[dict], labelled: list[dict]) -> list[dict]:
    """The records with each later session's bite marked with the moments of its session it carries (for a
    reader of ``--dump``: which bites counted as useful, and for what)."""
    moments_of = moments_by_session(automatic, labelled)
    for record in records:
        for bite in record["bites"]:
            bite["carries"] = [f"{m['kind']}@{m['prompt_uuid'][:8]}" for m in moments_of.get(record["session"], [])
                               if holds(bite, m)]
    return records


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


# --- the read audit: what an independent reader judges (../shared/bench/RUBRIC.md) -------------------------


def _told_by(moment: dict, record: dict | None, tells: dict[str, list]) -> list[dict]:
    """Every bite told in the moment's session at or before the moment (what a reader checks the moment
    against), whatever it carries."""
    if record is None:
        return []
    index, call, order = record["prompt_index"], moment.get("tool_use_id"), record.get("calls", [])
    before = order[:order.index(call) + 1] if call in order else order
    return [bite for at_index, _, bite in tells.get(moment["session"], [])
            if at_index < index or (at_index == index and (call is None or bite["at"] in ("session_start", "prompt")
                                                            or bite.get("tool_use_id") in before))]


def audit_sample(name: str, records: list[dict], labelled: list[dict], seed: int = 35) -> dict:
    """A reading sample of one set: ``AUDIT_BITES`` bites shown in later sessions and ``AUDIT_MOMENTS`` labelled
    moments, drawn at random (seeded), each with what a reader needs and an empty verdict to fill in."""
    import random

    rng = random.Random(f"{seed}-{name}")
    by_prompt = {r["prompt_uuid"]: r for r in records}
    tells = _tells(records)
    shown = [(r, b) for r in records if not r["first_session"] for b in r["bites"]]
    bites = [{"project": r["project"], "session": r["session"], "prompt_uuid": r["prompt_uuid"],
              "prompt": r["prompt"][:800], "at": b["at"], "tool": b.get("tool"), "tool_use_id": b.get("tool_use_id"),
              "id": b["id"], "bite": b["bite"], "verdict": None}
             for r, b in rng.sample(shown, min(AUDIT_BITES, len(shown)))]
    moments = []
    # The moments are drawn by a generator of their own: the same moments are read whatever the bites told (a
    # sample drawn after the bites changed with their number, so two runs' readings were of other moments).
    for m in random.Random(f"{seed}-{name}-moments").sample(labelled, min(AUDIT_MOMENTS, len(labelled))):
        record = by_prompt.get(m["moment"]["prompt_uuid"])
        moments.append({"id": m["id"], "kind": m["kind"], "knowledge": m["knowledge"], "moment": m["moment"],
                        "prompt": record["prompt"][:800] if record else None,
                        "told": [{"at": b["at"], "tool": b.get("tool"), "bite": b["bite"]}
                                 for b in _told_by(_moment_of(m), record, tells)],
                        "verdict": None})
    return {"set": name, "rubric": "../shared/bench/RUBRIC.md",
            "how": "bites: verdict useful | related | noise, as the engineer reading it in the agent's context at "
                   "that moment (open the session's transcript by its id for the context); moments: verdict told "
                   "| partly | not, from what was told at or before the moment ('told' lists it) — a shared word is "
                   "not telling; add a 'why' to each verdict",
            "bites": bites, "moments": moments}


def audit_figures(audit: dict) -> dict:
    """The read figures of a filled-in sample: precision (useful bites / bites read) and helped (moments told,
    and with partly as half)."""
    bites = [b for b in audit["bites"] if b.get("verdict")]
    moments = [m for m in audit["moments"] if m.get("verdict")]
    told = sum(m["verdict"] == "told" for m in moments)
    partly = sum(m["verdict"] == "partly" for m in moments)
    return {"set": audit["set"], "bites_read": len(bites), "moments_read": len(moments),
            "read_precision": _share(sum(b["verdict"] == "useful" for b in bites), len(bites)),
            "read_related": _share(sum(b["verdict"] == "related" for b in bites), len(bites)),
            "read_helped": _share(told, len(moments)),
            "read_helped_partly_half": round((told + partly / 2) / len(moments), 3) if moments else None}


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_set(name: str, dirs: list[Path], opportunities: Path, models_dir: Path, tmp: Path, baseline_ref: str | None,
            dump: Path | None, audit_out: Path | None) -> dict:
    """Replay one set's projects (and the baseline's), score them against its moments."""
    labelled = json.loads(opportunities.read_text())["opportunities"] if opportunities.exists() else []
    automatic = automatic_moments(dirs)
    started = time.perf_counter()
    records = [r for i, d in enumerate(dirs) for r in replay(d, _folder(tmp / f"{name}-run-{i}"), models_dir)]
    seconds = time.perf_counter() - started
    records = _index(records, dirs)
    if dump:
        dump.write_text(json.dumps(annotate(records, automatic, labelled), indent=1, ensure_ascii=False,
                                   default=sorted), encoding="utf-8")
    if audit_out:
        audit_out.write_text(json.dumps(audit_sample(name, records, labelled), indent=1, ensure_ascii=False),
                             encoding="utf-8")
    report = {"projects_dirs": [str(d) for d in dirs], "opportunities": str(opportunities),
              "prompts_replayed": len(records), "replay_seconds": round(seconds, 1),
              "engram": score(records, automatic, labelled)}
    if baseline_ref:
        baseline = [r for i, d in enumerate(dirs)
                    for r in replay_baseline(baseline_ref, d, models_dir, _folder(tmp / f"{name}-base-{i}"))]
        report["baseline"] = {"ref": baseline_ref, **score(_index(baseline, dirs), automatic, labelled)}
    return report


def _named(path: Path | None, name: str) -> Path | None:
    """FILE for one set, FILE with the set's name before its suffix when several sets run."""
    return None if path is None else path.with_name(f"{path.stem}-{name}{path.suffix}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", action="append", dest="sets", choices=sorted(SETS),
                        help="a labelled dev set (default: every one)")
    parser.add_argument("--projects-dir", type=Path, action="append", dest="projects_dirs",
                        help="replay these projects instead (held-out sessions), with --opportunities")
    parser.add_argument("--opportunities", type=Path, help="the moments of --projects-dir")
    parser.add_argument("--dump", type=Path, help="write what each replayed prompt was told (FILE-<set>.json)")
    parser.add_argument("--audit-out", type=Path, help="write a reading sample for an independent reader")
    parser.add_argument("--audit-in", type=Path, action="append", default=[],
                        help="a filled-in reading sample: print its read figures (no replay)")
    parser.add_argument("--models-dir", type=Path, default=Path(os.environ["ENGRAM_MODELS_DIR"])
                        if os.environ.get("ENGRAM_MODELS_DIR") else DEFAULT_MODELS)
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    if args.audit_in:
        read = [audit_figures(json.loads(path.read_text(encoding="utf-8"))) for path in args.audit_in]
        print(json.dumps({"benchmark": "helped-read", "read": read}) if args.json else json.dumps(read, indent=2))
        return 0
    if args.projects_dirs:
        chosen = {"custom": (args.projects_dirs, args.opportunities or Path("/nonexistent"))}
    else:
        chosen = {name: SETS[name] for name in (args.sets or sorted(SETS))}
    report: dict = {"benchmark": "helped", "hook_clock": HOOK_CLOCK_NOTE, "sets": {}}
    if session_clock() is None:
        print(f"warning: {HOOK_CLOCK_NOTE}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="engram-helped-") as tmp:
        for name, (dirs, opportunities) in chosen.items():
            several = len(chosen) > 1
            report["sets"][name] = run_set(
                name, dirs, opportunities, args.models_dir, Path(tmp), None if args.no_baseline else args.baseline_ref,
                _named(args.dump, name) if several else args.dump,
                _named(args.audit_out, name) if several else args.audit_out)
    for name, result in report["sets"].items():
        for who in ("engram", "baseline"):
            if who in result:
                r = result[who]
                print(f"{name:>10} {who:>8}: recurring errors told {r['automatic']['recurring_told']} of "
                      f"{r['automatic']['recurring_errors']}, labelled helped {r['labelled']['helped']} of "
                      f"{r['labelled']['moments']} (both readers {r['labelled']['helped_both_readers']}), precision "
                      f"{r['precision']} ({r['bites_useful']}/{r['bites_shown']}; at moments "
                      f"{r['precision_at_moments']}), prompt bites/prompt {r['prompt_bites_per_prompt']}, silent when "
                      f"nothing needed {r['silent_when_nothing_needed']}", file=sys.stderr)
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
