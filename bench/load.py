"""Load: N live sessions writing lines at a fixed rate while readers call /recall, against the real processor.

    python bench/load.py [--mix real|synthetic] [--sessions 8] [--rate 50] [--seconds 120] [--readers 2]
                         [--cli-readers 1] [--cli-pause 2] [--new-session-seconds 0] [--runs 1]
                         [--baseline-ref 84d1884 | --no-baseline] [--models-dir DIR] [--keep DIR] [--json]

A fresh ENGRAM_HOME, the real processor (`python -m processor.cli run`), and:
- N writer threads, each appending lines to its own transcript at `rate` lines per second for `seconds`.
  `--mix real` (the default, issue 26): the real transcript lines of the fixtures (`bench/real_lines.py`:
  prompts, replies, thinking, tool uses and their results, images, the lines that carry no conversation),
  under new ids and the time of writing, with a large tool output every 2,000 lines of a session (a 1 MB
  build log, 1 MB of base64, a failed 256 KB test run, made of the fixtures' real outputs).
  `--mix synthetic` (issues 13 and 21): alternating user and assistant lines of random words;
- a watcher that reads new message rows every 20 ms and notes when each line's uuid arrived: capture
  lag (append → row committed) p50/p95/max, and whether every line was stored once;
- R reader threads calling `POST /recall` over the authenticated control plane back to back:
  latency p50/p95/max;
- C CLI readers, each running the real `engram recall QUERY` command (`python -m processor.cli recall`)
  as a subprocess, with a pause between calls: its latency p50/p95 and that every call succeeded;
- with `--new-session-seconds S`, each writer moves on to a new session (a new transcript) every S
  seconds, so the processor meets many distinct sessions that then go idle;
- a sampler (every 100 ms) of `GET /ping`'s memory_backlog (the memory thread's pending work: per
  session its newest recollection and one episode build, plus two housekeeping flags),
  memory_backlog_one_session (the most one session has waiting) and the processor's RSS: its value
  halfway through the load and at its end (flat memory: the second half adds under 10%), and its max.
Drain: seconds from the writers' stop until every line is stored and the memory thread has nothing waiting;
with the messages still outside episodes at the stop and the episodes embedded per second after it, which
say how long a drain must take when the writers outrun the embedding model.
A warm-up /recall runs first, so the model and the vectors are loaded before anything is timed.
Baseline, same run: the same /recall on the same processor once the writers have stopped and the
backlog drained (an idle processor), so the ratio shows what load costs a query.
The RSS peak is the kernel's high-water mark (VmHWM) read just before the processor stops, so a spike
between two samples counts too.
Baseline, same run: the same load against the processor of `--baseline-ref` (main before issue 26), its
tree taken from git into a temporary folder; `--runs N` repeats both, and every run's peak is reported.
`--first-start`: every processor starts with an empty models folder, as after an install, and converts the
embedding model while the load begins (the peak of issue 26: every thread that wanted the model converted it).
Goals (issues 13, 21 and 26) at 8 x 50 lines/s: backlog max <= 2 per session, recall p95 <= 250 ms, RSS peak
<= 300 MB with the real mix (<= 250 MB with the synthetic one) in every run and growing under 10% in the
second half of the load, drained within 10 s, nothing lost or doubled.
`--json` prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid as uuidlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a plain script from anywhere

from bench.real_lines import Replay, large_outputs, prompts, read_sessions  # noqa: E402
from bench.testbed.transcripts import assistant_line, user_line  # noqa: E402
from processor.capture.captured import CapturedLine  # noqa: E402
from processor.capture.claude import parse_line  # noqa: E402
from processor.service.control_client import ControlError, ping, request  # noqa: E402
from processor.service.resources import rss_bytes  # noqa: E402

BASELINE_REF = "84d1884"  # main before issue 26

DEFAULT_MODELS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "engram-bench" / "models"
WORDS = ("cache deploy migration index schema websocket retry budget token parser fixture release branch "
         "queue worker timeout lock vector embedding recall session transcript hook config test build").split()


def stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    ordered = sorted(values)
    return {"n": len(values), "p50": round(statistics.median(ordered), 1),
            "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1), "max": round(ordered[-1], 1)}


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def peak_rss_bytes(pid: int) -> int | None:
    """The process's RSS high-water mark (Linux's VmHWM), or None where /proc has none."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def stop_processor(proc: subprocess.Popen) -> None:
    """SIGTERM, a minute to exit cleanly, then SIGKILL: a benchmark never leaves a processor behind."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def code_of(ref: str, workdir: Path) -> Path:
    """The tree of git commit `ref` of this repository, in a new folder (its processor, run from there)."""
    tree = workdir / f"tree-{ref}"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


class Run:
    def __init__(self, home: Path, projects: Path, models: Path, code: Path = REPO,
                 heap_profile: Path | None = None) -> None:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")},
               "ENGRAM_HOME": str(home), "ENGRAM_PROJECTS_DIR": str(projects),
               "ENGRAM_MODELS_DIR": str(models), "ENGRAM_HTTP_PORT": "0", "ENGRAM_RECENT_DAYS": "1"}
        self.home = home
        self.env = env
        self.code = code  # the tree whose processor runs (`python -m` imports it from the working folder)
        self.log = open(home.parent / "processor.log", "w")  # noqa: SIM115 - closed in stop()
        command = [sys.executable, "-m", "processor.cli", "run"]
        if heap_profile is not None:  # memray's capture of every allocation, to read its high-water mark after
            heap_profile.parent.mkdir(parents=True, exist_ok=True)
            command[1:1] = ["-m", "memray", "run", "--quiet", "--aggregate", "-o", str(heap_profile)]
        self.proc = subprocess.Popen(command, cwd=code, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while ping(home / "run", timeout=0.5) is None:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"the processor did not start; see {home.parent / 'processor.log'}")
            time.sleep(0.1)

    def stop(self) -> None:
        stop_processor(self.proc)
        self.log.close()


def measure(sessions: int, rate: float, seconds: float, readers: int, models: Path, workdir: Path,
            seed: int, cli_readers: int = 0, cli_pause: float = 2.0, new_session_seconds: float = 0.0,
            drain_timeout: float = 120.0, mix: str = "real", code: Path = REPO,
            heap_profile: Path | None = None) -> dict:
    home, projects = workdir / "home", workdir / "projects"
    projects.mkdir(parents=True)
    real = read_sessions() if mix == "real" else []
    large = large_outputs(real) if real else []
    queries = prompts(real) if real else []
    run = Run(home, projects, models, code, heap_profile)
    cli_env = {**os.environ, **run.env}
    written: dict[str, float] = {}  # the uuid of each line that becomes a message row → when it was written
    lines_total = [0]  # every line written, conversation or not
    parts: set[str] = set()  # lines merged into the row of their message's first part (the real mix)
    arrived: dict[str, float] = {}
    recall_ms: list[float] = []
    recall_errors: list[str] = []
    depth: list[int] = []
    per_session: list[int] = []  # the most requests one session had waiting
    rss: list[tuple[float, int]] = []  # (seconds since the writers started, bytes)
    cli_ms: list[float] = []
    cli_errors: list[str] = []
    session_ids: set[str] = set()
    writing = threading.Event()
    writing.set()
    stop_all = threading.Event()

    def writer(n: int) -> None:
        rng = random.Random(seed * 100 + n)
        interval = 1.0 / rate
        next_at = time.monotonic()
        while writing.is_set():
            write_session(n, rng, interval, next_at)
            next_at = time.monotonic()

    def write_session(n: int, rng: random.Random, interval: float, next_at: float) -> None:
        """One session's transcript until the writers stop (or, with new_session_seconds, until its time is up)."""
        sid = str(uuidlib.UUID(int=rng.getrandbits(128)))
        session_ids.add(sid)
        path = projects / f"-bench-p{n % 3}" / f"{sid}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        ends = time.monotonic() + new_session_seconds if new_session_seconds > 0 else float("inf")
        if real:
            replay(n, sid, path, interval, next_at, ends)
            return
        i = 0
        with open(path, "a", encoding="utf-8") as f:
            while writing.is_set() and time.monotonic() < ends:
                uid = str(uuidlib.uuid4())
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
                if i % 2 == 0:
                    line = user_line(sentence(rng, rng.randint(6, 30)), session_id=sid, uid=uid,
                                     cwd=f"/bench/p{n % 3}", timestamp=stamp)
                else:
                    line = assistant_line(" ".join(sentence(rng, 12) for _ in range(rng.randint(1, 8))),
                                          session_id=sid, uid=uid, message_id=f"msg_{uid}", cwd=f"/bench/p{n % 3}",
                                          timestamp=stamp)
                written[uid] = time.monotonic()
                f.write(line)
                f.flush()
                lines_total[0] += 1
                i += 1
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))

    def replay(n: int, sid: str, path: Path, interval: float, next_at: float, ends: float) -> None:
        """The fixtures' real lines, as session `sid` writes them (every line counts toward the rate)."""
        lines = Replay(real, large, n, sessions).lines(sid)
        message_ids: set[str] = set()
        with open(path, "ab") as f:
            while writing.is_set() and time.monotonic() < ends:
                line = next(lines)
                outcome = parse_line(line.rstrip(b"\n"))
                if isinstance(outcome, CapturedLine):
                    # A later part of an assistant message is merged into the row of its first part.
                    if outcome.api_message_id and outcome.api_message_id in message_ids:
                        parts.add(outcome.uuid)
                    else:
                        written[outcome.uuid] = time.monotonic()
                    if outcome.api_message_id:
                        message_ids.add(outcome.api_message_id)
                f.write(line)
                f.flush()
                lines_total[0] += 1
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))

    def query(rng: random.Random) -> str:
        return rng.choice(queries) if queries else sentence(rng, 6)

    def watcher() -> None:
        db = home / "engram.db"
        while not db.exists() and not stop_all.is_set():
            time.sleep(0.05)
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        last = 0
        while not stop_all.is_set():
            try:
                rows = conn.execute("SELECT id, uuid FROM messages WHERE id > ? ORDER BY id", (last,)).fetchall()
            except sqlite3.OperationalError:
                rows = []
            now = time.monotonic()
            for row_id, uid in rows:
                arrived.setdefault(uid, now)
                last = row_id
            time.sleep(0.02)
        conn.close()

    def reader(n: int) -> None:
        rng = random.Random(seed + 1000 + n)
        while not stop_all.is_set():
            t0 = time.perf_counter()
            try:
                request(home / "run", "POST", "/recall", {"query": query(rng), "limit": 3}, timeout=30)
                if writing.is_set():
                    recall_ms.append((time.perf_counter() - t0) * 1000)
            except ControlError as exc:
                recall_errors.append(str(exc))
            time.sleep(0.05)

    def cli_reader(n: int) -> None:
        """The real `engram recall` command, as a user types it while the processor runs."""
        rng = random.Random(seed + 2000 + n)
        while writing.is_set():
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "processor.cli", "recall", query(rng), "--limit", "3"],
                                  cwd=code, env=cli_env, capture_output=True, text=True, timeout=120)
            if done.returncode == 0:
                cli_ms.append((time.perf_counter() - t0) * 1000)
            else:
                cli_errors.append(done.stderr.strip()[-300:])
            stop_all.wait(cli_pause)

    def sampler() -> None:
        while not stop_all.is_set():
            answer = ping(home / "run", timeout=2)
            if answer is not None and writing.is_set():
                depth.append(int(answer.get("memory_backlog") or 0))
                per_session.append(int(answer.get("memory_backlog_one_session") or 0))
            value = rss_bytes(run.proc.pid)
            if value:
                rss.append((time.monotonic() - started, value))
            time.sleep(0.1)

    warm_until = time.monotonic() + 120
    while True:
        try:
            request(home / "run", "POST", "/recall", {"query": "warm up", "limit": 3}, timeout=60)
            break
        except ControlError:
            if time.monotonic() > warm_until:
                raise
            time.sleep(0.5)
    threads = ([threading.Thread(target=writer, args=(n,), daemon=True) for n in range(sessions)]
               + [threading.Thread(target=watcher, daemon=True), threading.Thread(target=sampler, daemon=True)]
               + [threading.Thread(target=reader, args=(n,), daemon=True) for n in range(readers)]
               + [threading.Thread(target=cli_reader, args=(n,), daemon=True) for n in range(cli_readers)])
    started = time.monotonic()
    try:
        for thread in threads:
            thread.start()
        time.sleep(seconds)
        writing.clear()
        stopped = time.monotonic()
        at_stop = episode_progress(home / "engram.db")
        # Let capture and the memory thread catch up before the baseline: the drain time.
        deadline = time.monotonic() + drain_timeout
        drain_seconds: float | None = None
        while time.monotonic() < deadline:
            answer = ping(home / "run", timeout=2) or {}
            if len(arrived) >= len(written) and answer and not answer.get("queue_depth"):
                drain_seconds = round(time.monotonic() - stopped, 1)
                break
            time.sleep(0.2)
        waited = time.monotonic() - stopped
        after_wait = episode_progress(home / "engram.db")
        drained_rss = rss_bytes(run.proc.pid)
        stop_all.set()
        for thread in threads:
            thread.join(timeout=30)
        baseline: list[float] = []
        rng = random.Random(seed + 5)
        for _ in range(60):
            t0 = time.perf_counter()
            request(home / "run", "POST", "/recall", {"query": query(rng), "limit": 3}, timeout=30)
            baseline.append((time.perf_counter() - t0) * 1000)
        conn = sqlite3.connect(f"file:{home / 'engram.db'}?mode=ro", uri=True)
        stored, distinct = conn.execute("SELECT count(*), count(DISTINCT uuid) FROM messages").fetchone()
        kept = {row[0] for row in conn.execute("SELECT uuid FROM messages")}
        kept |= {row[0] for row in conn.execute("SELECT line_uuid FROM message_lines")}
        conn.close()
        peak = peak_rss_bytes(run.proc.pid)
    finally:
        stop_all.set()
        run.stop()
    lags = [(arrived[u] - t) * 1000 for u, t in written.items() if u in arrived]
    recall, base = stats(recall_ms), stats(baseline)
    half, end = rss_near(rss, seconds / 2), rss_near(rss, seconds)
    return {
        "sessions": sessions, "rate_per_session": rate, "seconds": seconds, "readers": readers,
        "mix": mix, "lines_total": lines_total[0], "lines_written": len(written), "rows_stored": stored,
        "distinct_rows": distinct,
        "lost": len((set(written) | parts) - kept), "merged_parts": len(parts),
        "capture_lag_ms": stats(lags),
        "recall_ms": recall, "recall_errors": len(recall_errors), "recall_idle_baseline_ms": base,
        "recall_p95_vs_idle": round(recall["p95"] / base["p95"], 2) if recall["p95"] and base["p95"] else None,
        "backlog_max": max(depth, default=0), "backlog_max_per_session": max(per_session, default=0),
        "cli_readers": cli_readers, "cli_recall_ms": stats(cli_ms), "cli_recall_errors": len(cli_errors),
        "cli_recall_error_sample": cli_errors[:1],
        "distinct_sessions": len(session_ids),
        "rss_max_mb": round(max((b for _, b in rss), default=0) / 2**20, 1),
        "rss_peak_mb": mb(peak),
        "rss_half_mb": mb(half), "rss_end_mb": mb(end),
        "rss_second_half_growth_pct": round((end / half - 1) * 100, 1) if half and end else None,
        "rss_drained_mb": mb(drained_rss),
        "drain_seconds": drain_seconds,
        # Why a drain takes as long as it does: the rounds still to embed when the writers stopped, and how
        # fast the memory thread embedded them after (episodes a second, with capture idle).
        "messages_outside_episodes_at_stop": at_stop[1],
        "episodes_at_stop": at_stop[0],
        "episodes_per_second_after_stop": round((after_wait[0] - at_stop[0]) / waited, 1) if waited else None,
    }


def episode_progress(db: Path) -> tuple[int, int]:
    """(episodes stored, captured messages not in an episode yet), read-only."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        episodes = conn.execute("SELECT count(*) FROM episodes").fetchone()[0]
        waiting = conn.execute("SELECT count(*) FROM messages m JOIN sessions s ON s.session_id = m.session_id "
                               "WHERE m.id > s.episodized_through").fetchone()[0]
        return episodes, waiting
    finally:
        conn.close()


def mb(value: int | None) -> float | None:
    return round(value / 2**20, 1) if value else None


def rss_near(samples: list[tuple[float, int]], at: float) -> int | None:
    """The RSS sampled closest before `at` seconds into the load (the sampler runs every 100 ms)."""
    before = [value for when, value in samples if when <= at]
    return before[-1] if before else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--rate", type=float, default=50.0, help="lines per second per session")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--readers", type=int, default=2, help="threads calling /recall back to back")
    parser.add_argument("--cli-readers", type=int, default=1,
                        help="threads running the `engram recall` command, with --cli-pause between calls")
    parser.add_argument("--cli-pause", type=float, default=2.0, help="seconds between one CLI reader's calls")
    parser.add_argument("--new-session-seconds", type=float, default=0.0,
                        help="each writer starts a new session this often (0: one session per writer)")
    parser.add_argument("--models-dir", type=Path,
                        default=Path(os.environ["ENGRAM_MODELS_DIR"]) if os.environ.get("ENGRAM_MODELS_DIR")
                        else DEFAULT_MODELS, help=f"converted models (default $ENGRAM_MODELS_DIR or {DEFAULT_MODELS})")
    parser.add_argument("--drain-timeout", type=float, default=120.0,
                        help="seconds to wait for the backlog to drain after the writers stop (then: not drained)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--mix", choices=("real", "synthetic"), default="real",
                        help="the fixtures' real lines (default) or random user/assistant lines")
    parser.add_argument("--runs", type=int, default=1, help="repeat the load (and its baseline) this many times")
    parser.add_argument("--baseline-ref", default=BASELINE_REF, help="the git commit whose processor is the baseline")
    parser.add_argument("--baseline-runs", type=int, help="runs of the baseline (default: --runs)")
    parser.add_argument("--no-baseline", action="store_true", help="measure this tree only")
    parser.add_argument("--first-start", action="store_true",
                        help="every run's processor starts with an empty models folder, as after an install: it "
                             "converts the model while the load begins")
    parser.add_argument("--heap-profile", type=Path,
                        help="run this tree's processor under memray, its capture in this folder (memray installed)")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--keep", type=Path, help="run in this (new) folder and keep it, to look into afterwards")
    args = parser.parse_args(argv)
    logging.getLogger("processor").setLevel(logging.ERROR)  # the bench parses lines too: its warnings are noise
    with contextlib.ExitStack() as stack:
        workdir = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="engram-load-")))
        workdir.mkdir(parents=True, exist_ok=True)
        trees = {"this": REPO}
        if not args.no_baseline:
            trees["baseline"] = code_of(args.baseline_ref, workdir)
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for n in range(args.runs):
            for name, code in trees.items():  # interleaved: a busy spell of the machine hits both
                if name == "baseline" and args.baseline_runs is not None and n >= args.baseline_runs:
                    continue
                folder = workdir / f"{name}-{n + 1}"
                models = folder / "models" if args.first_start else args.models_dir
                result = measure(args.sessions, args.rate, args.seconds, args.readers, models, folder,
                                 args.seed + n, args.cli_readers, args.cli_pause, args.new_session_seconds,
                                 args.drain_timeout, args.mix, code,
                                 args.heap_profile / f"{name}-{n + 1}.bin" if args.heap_profile and name == "this"
                                 else None)
                runs[name].append(result)
                print(f"[{name} run {n + 1}] {summary(result)}", file=sys.stderr)
    rss_goal = 300 if args.mix == "real" else 250
    mine = runs["this"]
    goals = {"backlog_per_session_le_2": all(r["backlog_max_per_session"] <= 2 for r in mine),
             "recall_p95_le_250ms": all((r["recall_ms"]["p95"] or 0) <= 250 for r in mine),
             f"rss_peak_le_{rss_goal}mb_every_run": all((r["rss_peak_mb"] or r["rss_max_mb"]) <= rss_goal
                                                        for r in mine),
             "rss_second_half_growth_lt_10pct": all((r["rss_second_half_growth_pct"] or 0) < 10 for r in mine),
             "drained_within_10s": all(r["drain_seconds"] is not None and r["drain_seconds"] <= 10 for r in mine),
             "cli_recall_all_answered": all(r["cli_recall_errors"] == 0 for r in mine),
             "nothing_lost_or_doubled": all(r["lost"] == 0 and r["rows_stored"] == r["distinct_rows"] for r in mine)}
    report = {"benchmark": "load", "mix": args.mix, "runs": args.runs, "first_start": args.first_start,
              "rss_peaks_mb": {name: [r["rss_peak_mb"] for r in results] for name, results in runs.items()},
              **mine[-1], "each_run": runs["this"], "baseline_ref": None if args.no_baseline else args.baseline_ref,
              "baseline": runs.get("baseline"), "goals": goals, "goal_met": all(goals.values()),
              "python": sys.version.split()[0], "cpus": os.cpu_count()}
    for name, results in runs.items():
        print(f"{name}: RSS peaks {[r['rss_peak_mb'] for r in results]} MB; /recall p95 "
              f"{[r['recall_ms']['p95'] for r in results]} ms; drained in {[r['drain_seconds'] for r in results]} s; "
              f"episodes/s after the stop {[r['episodes_per_second_after_stop'] for r in results]}", file=sys.stderr)
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0


def summary(result: dict) -> str:
    lag, recall = result["capture_lag_ms"], result["recall_ms"]
    return (f"{result['sessions']} sessions x {result['rate_per_session']:g} lines/s for {result['seconds']:g} s "
            f"({result['mix']}): {result['lines_total']} lines, {result['lost']} lost; capture lag p50 {lag['p50']} "
            f"ms, "
            f"p95 {lag['p95']} ms; /recall p95 {recall['p95']} ms ({result['recall_p95_vs_idle']}x idle); memory "
            f"backlog max {result['backlog_max']}; RSS {result['rss_half_mb']} MB halfway, {result['rss_end_mb']} MB "
            f"at the end, peak {result['rss_peak_mb']} MB; drained in {result['drain_seconds']} s; `engram recall` "
            f"p50 {result['cli_recall_ms']['p50']} ms")


if __name__ == "__main__":
    sys.exit(main())
