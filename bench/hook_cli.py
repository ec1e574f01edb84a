"""The PreToolUse hook's cost inside the real Claude Code CLI, per tool call: this hook against today's.

    python bench/hook_cli.py [--calls 30] [--rounds 4] [--baseline-ref REF] [--json]

The Claude Code CLI that the claude-agent-sdk wheel bundles runs `claude -p` against a fake Messages API on
loopback (``bench/testbed/fake_anthropic.py``) scripted to make ``--calls`` Bash tool calls one after another, then
answer. Three settings, in the same run, interleaved round by round so machine noise hits them alike:

- ``none``: no Engram hook registered;
- ``today``: the hook of ``--baseline-ref`` (the commit before the file-aware work), its ``recall_hook``
  folder taken from git into a temporary folder;
- ``this``: this checkout's hook, reading the session's recollection and a full lesson index (near its size
  limit) on every call, and telling one lesson once (a call whose command a lesson is filed under).

Each is registered exactly as ``engram install`` registers it (``claude.hook(registration, "PreToolUse")``), and the
session's recollection file (and, for ``this``, the project's lesson index) is written when the session's
first request arrives, so every call's hook does its real work. Per tool call: the time from the API's answer
that asks for the call to the next request (the tool's run, the hook, the CLI's own work). Reported: the
median per setting, and ``this − today`` (goal: ≤ +5 ms) and each against ``none``. ``--json`` prints one
JSON object last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.hook import BITES, write_lesson_index  # noqa: E402
from bench.testbed.claude_cli import ClaudeCLI, cli_env  # noqa: E402
from bench.testbed.fake_anthropic import FakeAnthropic, Reply, Request  # noqa: E402
from processor.install import claude  # noqa: E402
from processor.install.registration import Registration, hook_python  # noqa: E402

BASELINE_REF = "33338cd"
GOAL_MS = 5.0
TOLD = "git add dist/app.js || true"  # a command the lesson index files a lesson under


def hook_settings(script: Path | None) -> dict:
    if script is None:
        return {}
    spec = claude.hook(Registration(hook_python=hook_python(), engram_python=sys.executable, hook_script=script),
                       "PreToolUse")
    return {"hooks": {"PreToolUse": [spec.group()]}}


def one_round(cli: ClaudeCLI, setting: str, script: Path | None, calls: int, workdir: Path) -> list[float]:
    home = workdir / f"home-{setting}-{time.monotonic_ns()}"
    engram_home = home / "engram"
    recollections = engram_home / "recollections"
    recollections.mkdir(parents=True, mode=0o700)
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(json.dumps(hook_settings(script)))
    repo = home / "repo"
    repo.mkdir()
    arrivals: list[float] = []

    def prepare(request: Request) -> None:
        # The session's id is known when its first request arrives: write what the processor would have.
        session_id = request.session_id or ""
        data = {"messageUuid": "m1", "timestamp": int(time.time() * 1000), "bites": BITES}
        if setting == "this":
            write_lesson_index(recollections, str(repo))
            data.update(lessons="0123456789abcdef.index", root=str(repo))
        (recollections / f"{session_id}.json").write_text(json.dumps(data))

    def step(n: int):
        def reply(request: Request) -> Reply:
            arrivals.append(time.perf_counter())
            if n == 0:
                prepare(request)
            if n == calls:
                return Reply.text("Done.")
            command = TOLD if n == calls // 2 else f"true {n}"
            return Reply.tool("Bash", {"command": command, "description": "step"})
        return Reply.from_request(reply)

    server = FakeAnthropic().start()
    try:
        server.script.extend(step(n) for n in range(calls + 1))
        env = cli_env(home, base_url=server.base_url, extra={"ENGRAM_HOME": str(engram_home)})
        result = cli.run("Run the steps.", cwd=repo, env=env, timeout=300)
        result.check()
        seen = "\n".join(r.all_text() for r in server.conversation)
    finally:
        server.stop()
    # The hook really ran and did its work: the message's bites reached the model, and this hook's lesson.
    expected = {"none": [], "today": [BITES[0]["id"]], "this": [BITES[0]["id"], "ep_lesson_dist"]}[setting]
    missing = [marker for marker in expected if marker not in seen]
    if missing or (setting == "none" and BITES[0]["id"] in seen):
        raise SystemExit(f"the {setting} hook did not do its work (missing {missing})")
    return [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=30, help="tool calls per session")
    parser.add_argument("--rounds", type=int, default=4, help="sessions per setting, interleaved")
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    cli = ClaudeCLI.bundled()
    if cli is None:
        raise SystemExit("the installed claude-agent-sdk bundles no Claude Code CLI")
    with tempfile.TemporaryDirectory(prefix="engram-hook-cli-") as tmp:
        workdir = Path(tmp)
        today = workdir / "today"
        today.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline_ref, "recall_hook"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(today)], input=archive, check=True)
        scripts = {"none": None, "today": today / "recall_hook" / "pretooluse.py",
                   "this": REPO / "recall_hook" / "pretooluse.py"}
        gaps: dict[str, list[float]] = {name: [] for name in scripts}
        order = list(scripts)
        for n in range(args.rounds):
            for name in order[n % 3:] + order[:n % 3]:
                gaps[name] += one_round(cli, name, scripts[name], args.calls, workdir)
    medians = {name: statistics.median(values) * 1000 for name, values in gaps.items()}
    report = {"benchmark": "hook_cli", "cli": cli.version(), "calls_per_session": args.calls,
              "rounds": args.rounds, "baseline_ref": args.baseline_ref,
              "median_ms_per_call": {k: round(v, 2) for k, v in medians.items()},
              "this_minus_today_ms": round(medians["this"] - medians["today"], 2),
              "today_minus_none_ms": round(medians["today"] - medians["none"], 2),
              "this_minus_none_ms": round(medians["this"] - medians["none"], 2),
              "goal_ms": GOAL_MS}
    report["goal_met"] = report["this_minus_today_ms"] <= GOAL_MS
    print(f"per tool call, median: none {medians['none']:.1f} ms, today {medians['today']:.1f} ms, "
          f"this {medians['this']:.1f} ms; this - today {report['this_minus_today_ms']:+.1f} ms "
          f"(goal <= +{GOAL_MS:g})", file=sys.stderr)
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
