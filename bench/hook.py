"""Whole-process wall time of the PreToolUse and PostToolUseFailure hooks against a bare interpreter start.
Goal: <= 1.2x each (issue 31; 1.25x before).

Runs, interleaved so that machine noise hits all four alike:
- baseline: ``<python> -I -S -c pass``
- inject:   the hook with a realistic recollection file whose messageUuid is fresh each run, so it
            really parses, formats, takes the lock, writes the state file and prints;
- skip:     the hook when that message was already injected (every later tool call of a turn); it still
            reads the project's lesson index (a full one, near its size limit)
            and finds nothing filed under the call's command and files;
- tell:     a call whose command an earlier session left a lesson about: the hook finds it, takes the
            lock, records it as told and prints it (the session's ``.shown`` file is reset between runs);
- failure_skip: the PostToolUseFailure hook on a failure no earlier session fixed (it reads the index's line
            for the failing program and finds no signature like it);
- failure_tell: the PostToolUseFailure hook on a failure an earlier session fixed: it matches the signature,
            takes the lock, records it as told and prints the fix.

The hook runs as exactly the command ``engram install`` registers, with the same interpreter as
the baseline: the real binary, not a shim. The PreToolUse hook of ``--baseline-ref`` (main before issue 31,
from git), and its PostToolUseFailure hook, run every case too, interleaved with the rest (``*_before``): the bare
interpreter's start moves with the machine, the hooks' difference does not. ``--json`` prints one JSON object
with every figure (the baseline's included) as the last line. ``--instructions`` counts each case's user-space
instructions once under valgrind instead of timing it: the same figure on a loaded machine (the kernel's share —
opens, the lock, the writes — is left out; the wall time has it).

    python bench/hook.py [--runs 200] [--python /path/to/python3] [--baseline-ref 5c1acfc] [--instructions] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a plain script from anywhere

from processor.install import claude  # noqa: E402
from processor.install.registration import Registration, hook_python  # noqa: E402
from processor.recall.lesson_index import LessonIndex  # noqa: E402
from processor.store.episodes import Episode  # noqa: E402
from processor.store.failures import FailureSignature  # noqa: E402
from recall_hook.pretooluse import LAUNCHER  # noqa: E402
from recall_hook.tool_failure import LAUNCHER as FAILURE_LAUNCHER  # noqa: E402

HOOK = REPO / "recall_hook" / "pretooluse.py"
FAILURE_HOOK = REPO / "recall_hook" / "tool_failure.py"
SESSION_ID = "5f1c9a52-7a43-4d0e-9f8e-3c1d2b7e6a10"
GOAL = 1.2
BASELINE_REF = "5c1acfc"  # main before issue 31 (the hooks' kit moved to processor/hook_kit/)
HOOK_CASES = ("inject", "skip", "tell", "failure_skip", "failure_tell")


def hook_of(ref: str, folder: Path) -> Path:
    """The PreToolUse hook script of commit `ref`, with the modules it imports (its sibling modules before issue
    31, the hooks' kit since), extracted under `folder`."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-tree", "--name-only", ref, "processor/"],
                            capture_output=True, text=True, check=True).stdout.split()
    paths = ["recall_hook", *(["processor/hook_kit"] if "processor/hook_kit" in listed else [])]
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, *paths], capture_output=True,
                             check=True).stdout
    target = folder / ref
    with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target / "recall_hook" / "pretooluse.py"

# Three bites, the processor's usual top-3, with summary-sized text.
BITES = [
    {
        "id": "ep_01J8ZK4W3V9Q",
        "bite": "[Memory flash: the WebSocket reconnect race was fixed by guarding the connection map "
        "with a mutex; tests in ws/test_reconnect.py cover it]",
        "date": "2026-02-20T14:03:11Z",
        "importance": "high",
    },
    {
        "id": "ep_01J8YH2M0C7T",
        "bite": "[Memory flash: the MM project uses PostgreSQL 16 (not SQLite); migrations live in "
        "db/migrations and run with `make migrate`]",
        "date": "2026-02-18",
        "importance": "normal",
    },
    {
        "id": "ep_01J8XD5R8N2F",
        "bite": "[Memory flash: the user prefers small commits with imperative subjects and no "
        "co-author trailers]",
        "date": "2026-02-11T09:41:52Z",
        "importance": "normal",
    },
]


NO_UPSTREAM = "fatal: The current branch {b} has no upstream branch.\nTo push the current branch and set the " \
              "remote as upstream, use\n\n    git push --set-upstream origin {b}\n"


def failure_bytes(cwd: str, command: str, error: str) -> bytes:
    """The stdin Claude Code gives a PostToolUseFailure hook."""
    event = {
        "session_id": SESSION_ID,
        "transcript_path": f"/home/user/.claude/projects/-home-user-mm/{SESSION_ID}.jsonl",
        "cwd": cwd, "permission_mode": "default", "hook_event_name": "PostToolUseFailure", "tool_name": "Bash",
        "tool_input": {"command": command, "description": "Run it"},
        "tool_use_id": "toolu_01ABCDEFGHJKLMNPQRSTUVWY", "error": error, "is_interrupt": False,
    }
    return json.dumps(event).encode()


def event_bytes(cwd: str, command: str = "pytest -q tests/test_reconnect.py") -> bytes:
    """The stdin Claude Code gives a PreToolUse hook."""
    event = {
        "session_id": SESSION_ID,
        "transcript_path": f"/home/user/.claude/projects/-home-user-mm/{SESSION_ID}.jsonl",
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "Run it"},
        "tool_use_id": "toolu_01ABCDEFGHJKLMNPQRSTUVWX",
    }
    return json.dumps(event).encode()


INDEX_NAME = "0123456789abcdef.index"
TOLD_COMMAND = "git add dist/app.js && git commit -m 'Build the bundle'"


def write_recollection(directory: Path, message_uuid: str) -> None:
    data = {"messageUuid": message_uuid, "timestamp": int(time.time() * 1000), "bites": BITES,
            "lessons": INDEX_NAME, "root": str(directory.parent)}
    temp = directory / f".{SESSION_ID}.tmp"
    temp.write_text(json.dumps(data))
    os.replace(temp, directory / f"{SESSION_ID}.json")


def write_lesson_index(directory: Path, root: str) -> None:
    """A project's lesson index as the processor writes it (LessonIndex), full: near its size limit."""
    lesson = {"bite": "The `dist/` folder is git-ignored, so the generated `dist/app.js` must be force-added with "
                      "`git add -f`.", "date": "2026-11-01", "importance": "normal", "kind": "gotcha"}
    memories = [Episode(n + 2, f"ep_{n:016x}", None, root, "project",
                        f"Lesson {n}: the handler in src/module_{n} must close its connection before the retry, "
                        "or the pool runs dry under load.", [f"src/module_{n}/handlers_{n}.py", f"$ tool{n} run"],
                        "normal", "gotcha", "auto", "x", [], 1_760_000_000_000, 0, 0, 0, None, None, "active")
                for n in range(1_000)]
    newest = Episode(1, "ep_lesson_dist", None, root, "project", lesson["bite"], ["$ git add dist/app.js"],
                     "normal", "gotcha", "auto", "x", [], 1_762_000_000_000, 0, 0, 0, None, None, "active")
    # What fixed a failure, filed under its program with its signature (the failure hook's case).
    fix = Episode(0, "ep_fix_push", "other-session", root, "project", "`git push` failed: fatal: The current branch "
                  "feat has no upstream branch. What fixed it: `git push --set-upstream origin feat`.",
                  ["$ git push"], "normal", "gotcha", "auto", "x", [], 1_762_000_000_000, 0, 0, 0, None, None,
                  "active")
    signature = FailureSignature(1, root, "fail:git", "cmd:git push",
                                 ["fatal the current branch feat has no upstream branch"], {"other-session": 1},
                                 None, None, None, "ep_fix_push", "`git push --set-upstream origin feat`")
    others = [FailureSignature(n + 2, root, "fail:git", "cmd:git commit", [f"error {n} hook {n} rejected the commit"],
                               {}, None, None, None, f"ep_{n:016x}", "x") for n in range(15)]
    path = LessonIndex(directory).write(root, root, [fix, newest, *memories],
                                        {s.memory_id: [s] for s in [signature, *others]},
                                        {"ep_fix_push": "error_fix"})
    os.replace(path, directory / "lessons" / INDEX_NAME)


def timed(argv: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, bytes]:
    start = time.perf_counter()
    done = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, env=env, check=True)
    return time.perf_counter() - start, done.stdout


def counted(argv: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, bytes]:
    """The instructions the process runs in user space (valgrind's callgrind): the same count for the same
    binary and inputs whatever else the machine does, so a loaded machine can still compare two hooks. It
    leaves out the kernel's share (file opens, the lock, the write), which the wall time has."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv], input=stdin,
                          capture_output=True, env=env, check=True)
    collected = [line for line in done.stderr.decode().splitlines() if "Collected :" in line]
    if not collected:
        raise SystemExit(f"valgrind printed no instruction count: {done.stderr[-400:]!r}")
    return float(collected[-1].rsplit(":", 1)[1]), done.stdout


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def figures(values: list[float]) -> dict[str, float]:
    return {"median_ms": statistics.median(values) * 1000, "p95_ms": p95(values) * 1000}


def bench(python: str, runs: int, warmup: int = 10, baseline_ref: str | None = BASELINE_REF,
          instructions: bool = False) -> dict:
    """Wall time of `runs` interleaved runs of each case; with `instructions`, the instructions of one run each
    (after the warm-up), which a loaded machine does not move."""
    measure = counted if instructions else timed
    runs = 1 if instructions else runs
    with tempfile.TemporaryDirectory(prefix="engram-bench-hook-") as home:
        directory = Path(home) / "recollections"
        directory.mkdir(mode=0o700)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "ENGRAM_HOME": home}
        stdin = event_bytes(home)
        told_stdin = event_bytes(home, TOLD_COMMAND)
        write_lesson_index(directory, home)
        write_recollection(directory, "msg-warm")
        baseline_argv = [python, "-I", "-S", "-c", "pass"]
        # Exactly the command `engram install` registers (Claude Code adds a shell around it).
        registration = Registration(hook_python=python, engram_python=python, hook_script=HOOK)
        hook_argv = shlex.split(claude.hook(registration, "PreToolUse").command)
        failure_argv = shlex.split(claude.hook(registration, "PostToolUseFailure").command)
        failure_tell = failure_bytes(home, "git push", NO_UPSTREAM.format(b="feat-billing"))
        failure_skip = failure_bytes(home, "git push", "fatal: unable to access 'https://example.com/x.git/': "
                                                       "Could not resolve host: example.com")
        cases = ["baseline", "inject", "skip", "tell", "failure_skip", "failure_tell"]
        argv_of = {case: failure_argv if case.startswith("failure") else hook_argv for case in HOOK_CASES}
        if baseline_ref:
            old_hook = hook_of(baseline_ref, Path(home) / "before")
            old_failure_hook = old_hook.with_name("tool_failure.py")
            for case in HOOK_CASES:
                argv_of[f"{case}_before"] = (
                    [python, "-I", "-S", "-c", FAILURE_LAUNCHER, str(old_failure_hook)] if case.startswith("failure")
                    else [python, "-I", "-S", "-c", LAUNCHER, str(old_hook)])
                cases.append(f"{case}_before")
        samples: dict[str, list[float]] = {c: [] for c in cases}
        counter = 0

        def run_case(case: str) -> float:
            nonlocal counter
            if case == "baseline":
                return measure(baseline_argv, stdin, env)[0]
            kind = case.removesuffix("_before")
            if kind == "inject":
                counter += 1
                write_recollection(directory, f"msg-{counter:06d}")  # outside the timed region
            if kind in ("inject", "tell", "failure_tell"):
                (directory / f"{SESSION_ID}.shown").unlink(missing_ok=True)  # a new session, as far as told goes
            if kind.startswith("failure"):
                elapsed, out = measure(argv_of[case], failure_tell if kind == "failure_tell" else failure_skip, env)
                if (b"git push --set-upstream origin feat" in out) != (kind == "failure_tell"):
                    raise SystemExit(f"failure hook misbehaved on the {case} path: {out[:200]!r}")
                return elapsed
            elapsed, out = measure(argv_of[case], told_stdin if kind == "tell" else stdin, env)
            injected = b'"additionalContext"' in out
            if injected != (kind in ("inject", "tell")) or b"permissionDecision" in out:
                raise SystemExit(f"hook misbehaved on the {case} path: {out[:200]!r}")
            if kind == "tell" and b"ep_lesson_dist" not in out:
                raise SystemExit(f"hook did not tell the lesson: {out[:200]!r}")
            return elapsed

        for _ in range(1 if instructions else warmup):
            for case in cases:
                run_case(case)
        for i in range(runs):
            # Rotate the order so no case always runs right after another (cache, scheduler).
            for case in cases[i % len(cases):] + cases[: i % len(cases)]:
                samples[case].append(run_case(case))

    result = {name: ({"instructions": values[0], "median_ms": values[0]} if instructions else figures(values))
              for name, values in samples.items()}
    base = result["baseline"]["median_ms"]
    return {
        "benchmark": "pretooluse_hook",
        "measure": "instructions" if instructions else "wall time",
        "python": python,
        "runs": runs,
        "baseline": result["baseline"],
        "inject": result["inject"],
        "skip": result["skip"],
        "tell": result["tell"],
        "failure_skip": result["failure_skip"],
        "failure_tell": result["failure_tell"],
        "ratio_inject": result["inject"]["median_ms"] / base,
        "ratio_skip": result["skip"]["median_ms"] / base,
        "ratio_tell": result["tell"]["median_ms"] / base,
        "ratio_failure_skip": result["failure_skip"]["median_ms"] / base,
        "ratio_failure_tell": result["failure_tell"]["median_ms"] / base,
        "goal_ratio": GOAL,
        "meets_goal": max(result[c]["median_ms"] for c in ("inject", "skip", "tell", "failure_skip",
                                                            "failure_tell")) / base <= GOAL,
        **({"baseline_ref": baseline_ref, **{f"{c}_before": result[f"{c}_before"] for c in HOOK_CASES},
            **{f"ratio_{c}_before": result[f"{c}_before"]["median_ms"] / base for c in HOOK_CASES},
            **{f"{c}_vs_before": result[c]["median_ms"] / result[f"{c}_before"]["median_ms"] for c in HOOK_CASES}}
           if baseline_ref else {}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="timed runs of each case (default 200)")
    parser.add_argument("--python", default=None, help="interpreter (default: the one install registers)")
    parser.add_argument("--baseline-ref", default=BASELINE_REF,
                        help=f"the commit whose PreToolUse hook runs beside this one (default {BASELINE_REF}; "
                             "'' for none)")
    parser.add_argument("--instructions", action="store_true",
                        help="count each case's user-space instructions once (valgrind) instead of timing it: "
                             "repeatable on a loaded machine, blind to the kernel's share")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    result = bench(args.python or hook_python(), args.runs, baseline_ref=args.baseline_ref or None,
                   instructions=args.instructions)
    if args.json:
        print(json.dumps(result))
        return 0
    each = "instructions of one run" if args.instructions else f"{args.runs} interleaved runs"
    print(f"python: {result['python']}  ({each} per case)")
    for case in ("baseline", "inject", "skip", "tell", "failure_skip", "failure_tell"):
        f = result[case]
        print(f"  {case:<12} " + (f"{f['instructions']:,.0f} instructions" if args.instructions else
                                  f"median {f['median_ms']:6.2f} ms   p95 {f['p95_ms']:6.2f} ms"))
    print(f"  ratio of medians: inject {result['ratio_inject']:.3f}x, skip {result['ratio_skip']:.3f}x, "
          f"tell {result['ratio_tell']:.3f}x, failure skip {result['ratio_failure_skip']:.3f}x, "
          f"failure tell {result['ratio_failure_tell']:.3f}x "
          f"(goal <= {GOAL}x: {'met' if result['meets_goal'] else 'NOT met'})")
    if "baseline_ref" in result:
        unit = "" if args.instructions else " ms"
        print(f"  {result['baseline_ref']}'s hook: " + ", ".join(
            f"{c} {result[c + '_before']['median_ms']:.2f}{unit} ({result['ratio_' + c + '_before']:.3f}x; this "
            f"{result[c + '_vs_before']:.3f}x of it)" for c in HOOK_CASES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
