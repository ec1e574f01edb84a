"""Freshness of recollections: a user line appended to a live transcript → its recollection file.

    python bench/freshness.py [--sizes 10000,100000] [--messages 40] [--models-dir DIR] [--json]

For each size N:
- a fresh ENGRAM_HOME gets N synthetic episodes (insert_episode, FTS triggers included, in batched
  write transactions) with random unit-vector embeddings and Zipf-distributed text that mixes
  pseudo-words with the English words of the benchmark's messages, so FTS5 has real postings to
  score; the store's meta names the real embedder, so the processor accepts the vectors;
- the real processor runs (`python -m processor.cli run`, ENGRAM_HOME and ENGRAM_PROJECTS_DIR in a
  temp dir) and one warm-up message makes it load the model and the N vectors;
- then, one at a time, a user line on a new topic is appended to the live transcript (topics are
  checked with the embedder to stay under the topic gate, so no message is skipped) and the clock
  runs until `recollections/<session>.json` holds that line's uuid (polled every 0.5 ms). An
  assistant reply follows each message and the processor is left to settle, so each measurement
  includes the capture path (watchdog → tailer → SQLite) and the memory thread's real work;
- baseline, same run, same messages: embedding the message + `matrix @ q` + argpartition over the
  same N vectors, i.e. the least any recollection could cost. Ratios are p50/p50 and p95/p95.
- also timed on the same database: the SessionStart hook (`python -I -m recall_hook.session_start`,
  whole process, best and median of 5 runs; goal < 1 s).
Goal: freshness p95 <= 250 ms at 100k. `--json` prints one JSON object as the last line.

    python bench/freshness.py --turns 10 [--baseline-ref house-kit] [--json]

Turn freshness, a row per agent (Claude Code, the Codex CLI, the Gemini CLI): the real processor runs on a fresh
home with each agent's transcripts in temp folders, and one session per agent is written a turn at a time (a
prompt and its answer, as the agent writes them, timestamped now); the clock runs from the write of a turn's
last line until its memories are built (the session's messages all captured and in episodes, polled every
20 ms). Baseline, same run, same turns: the processor of `--baseline-ref` (its code exported with `git archive`,
run from there), which built a Gemini turn's last round only at the idle sweep (5 minutes): a turn not built
within the timeout is missed. Goal: p90 <= 5 s for every agent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a plain script from anywhere

from bench.synthetic import build_store, pseudo_words  # noqa: E402
from bench.testbed.agent_transcripts import Chat, Rollout  # noqa: E402
from bench.testbed.transcripts import assistant_line, user_line  # noqa: E402
from processor.memory.embedder import load_embedder  # noqa: E402

DEFAULT_MODELS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "engram-bench" / "models"
GOAL_P95_MS_AT_100K = 250.0
TOPIC_GATE = 0.85  # the option's default; the processor runs with defaults
PSEUDO_WORDS = 50_000
SESSION = "f7e5b1a0-0000-4000-8000-00000000f00d"
PROJECT = "/bench/project-0"  # the transcript's cwd; not on disk, so it is its own project root
POLL_SECONDS = 0.0005
TIMEOUT_SECONDS = 20.0

TOPICS = [
    "rotate the TLS certificates on the staging load balancer", "the flaky checkout integration test",
    "migrating the orders table to PostgreSQL partitioning", "why the React dashboard re-renders on every keystroke",
    "the Kubernetes ingress returning 502 after deploys", "speeding up the Docker image build cache",
    "a memory leak in the websocket connection pool", "pinning numpy for the data pipeline",
    "configuring Sentry sampling for background jobs", "the cron job that sends duplicate invoice emails",
    "renaming the billing module without breaking imports", "GraphQL pagination for the search endpoint",
    "a race condition in the Redis rate limiter", "setting up pre-commit hooks with ruff",
    "the iOS push notification certificate expiry", "timezone bugs in the weekly report generator",
    "Terraform state locking on the shared S3 bucket", "the login page accessibility audit",
    "translating the onboarding emails into German", "the nightly backup restore drill",
    "Celery workers stuck on a poisoned message", "feature flags for the new pricing page",
    "the CSV export truncating unicode names", "OAuth refresh tokens expiring too early",
    "a slow N+1 query on the customer list", "upgrading Django to the next major version",
    "the mobile app crash on Android 14 camera permission", "GPU out of memory while fine-tuning the classifier",
    "webpack bundle size regression on the marketing site", "the Stripe webhook signature mismatch",
    "Elasticsearch reindex without downtime", "SSH access for the new contractor",
    "the flaky DNS resolution inside CI runners", "choosing a queue between SQS and RabbitMQ",
    "Grafana alert thresholds for disk usage", "the PDF invoice layout breaking on long addresses",
    "Go module proxy errors during the release build", "localising currency formats for Japan",
    "the Rust borrow checker error in the parser", "sourdough starter feeding schedule for the team bake-off",
    "the office Wi-Fi dropping video calls", "cleaning up stale git branches in the monorepo",
    "load testing the checkout API with k6", "GDPR data deletion requests workflow",
    "the Jupyter kernel dying on large parquet files", "vim keybindings in the web IDE",
    "SAML single sign-on with Okta", "the Helm chart values for the worker autoscaler",
]
TEMPLATES = ["How do we handle {}?", "Can you look into {} today?", "What did we decide about {}?",
             "I need help with {}.", "Remind me how {} works."]


def vocabulary(rng: np.random.Generator, english: list[str]) -> np.ndarray:
    """Pseudo-words with the messages' English words spread over ranks 20..3000."""
    ranked = pseudo_words(rng, PSEUDO_WORDS)
    rng.shuffle(ranked)
    for word, rank in zip(english, rng.integers(20, 3000, len(english)), strict=True):
        ranked.insert(int(rank), word)
    return np.array(ranked)


def messages_under_the_gate(embedder, count: int, rng: np.random.Generator) -> list[str]:
    """`count` + 1 messages (the first is the warm-up) whose neighbours stay under the topic gate."""
    out: list[str] = []
    previous = None
    order = rng.permutation(len(TOPICS) * len(TEMPLATES))
    for k in order:
        topic, template = TOPICS[k % len(TOPICS)], TEMPLATES[k // len(TOPICS)]
        text = template.format(topic)
        vector = embedder.embed_query(text)
        if previous is not None and float(previous @ vector) > TOPIC_GATE - 0.1:
            continue  # keep a margin: the processor must not take it for the same topic
        out.append(text)
        previous = vector
        if len(out) == count + 1:
            return out
    raise SystemExit(f"only {len(out)} distinct-topic messages available; use --messages <= {len(out) - 1}")


def iso_now() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def wait_for_uuid(path: Path, uid: bytes, timeout: float) -> float | None:
    """perf_counter() when `path` first holds `uid`; None on timeout."""
    deadline = time.perf_counter() + timeout
    while True:
        try:
            with open(path, "rb") as f:
                if uid in f.read():
                    return time.perf_counter()
        except FileNotFoundError:
            pass
        if time.perf_counter() > deadline:
            return None
        time.sleep(POLL_SECONDS)


@contextlib.contextmanager
def running_processor(code: Path, env: dict[str, str], home: Path, log_path: Path) -> Iterator[None]:
    """`engram run` of the code in `code`, from when its control plane listens until it is stopped (SIGTERM)."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "processor.cli", "run"], cwd=code, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while not (home / "run" / "engram.port").exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the processor did not start; see {log_path}")
                time.sleep(0.05)
            yield
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def stats(ms: list[float]) -> dict:
    if not ms:
        return {"p50_ms": None, "p95_ms": None, "max_ms": None}
    return {"p50_ms": round(float(np.percentile(ms, 50)), 1), "p95_ms": round(float(np.percentile(ms, 95)), 1),
            "max_ms": round(max(ms), 1)}


# What a project's digest holds: the user's rules and decisions (mined from their words) and global preferences.
DIGEST_RULES = 8


def seed_digest(home: Path) -> None:
    """The rules and preferences a digest is made of, as the miners record them (their origin says the user
    said them): the synthetic store's memories are rounds, which the digest never lists."""
    from processor.redaction import redact
    from processor.store import open_store, write_transaction
    from processor.store import origins as origins_sql
    from processor.store.episodes import NewEpisode, insert_episode

    conn = open_store(home / "engram.db")
    now = int(time.time() * 1000)
    try:
        with write_transaction(conn):
            for i in range(DIGEST_RULES):
                scope, project = ("global", None) if i % 4 == 0 else ("project", PROJECT)
                text = redact(f"Always run the service's contract tests before pushing a change to module {i}")
                insert_episode(conn, NewEpisode(
                    id=f"ep_rule{i:04d}", session_id=None, project=project, scope=scope, summary=text, entities=[],
                    importance="high", kind="convention", source_type="auto", full_content=text, source_uuids=[],
                    content_hash=f"rule{i}", created_at=now - i * 3_600_000), None)
                origins_sql.set_origin(conn, f"ep_rule{i:04d}", "standing")
    finally:
        conn.close()


def time_session_start(home: Path, runs: int = 5) -> dict:
    seed_digest(home)
    event = json.dumps({"session_id": SESSION, "cwd": PROJECT, "hook_event_name": "SessionStart",
                        "source": "startup"}).encode()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env["ENGRAM_HOME"] = str(home)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        out = subprocess.run([sys.executable, "-I", "-m", "recall_hook.session_start"], input=event,
                             capture_output=True, timeout=60, env=env, cwd="/")
        times.append((time.perf_counter() - started) * 1000)
        if out.returncode != 0 or not out.stdout:
            raise SystemExit(f"SessionStart hook printed nothing: {out.stderr.decode()[-500:]}")
    return {"best_ms": round(min(times), 1), "median_ms": round(statistics.median(times), 1), "goal_ms": 1000}


def measure(n: int, count: int, workdir: Path, embedder, seed: int, verbose: bool) -> dict:
    rng = np.random.default_rng(seed)
    texts = messages_under_the_gate(embedder, count, rng)
    english = sorted({w.strip("?.,").lower() for t in TOPICS for w in t.split() if len(w) > 3})
    words = vocabulary(rng, english)
    home, projects = workdir / f"home-{n}", workdir / f"projects-{n}"
    build_seconds, vectors = build_store(home / "engram.db", n, embedder.dim, embedder.model_id, rng, words,
                                         varied=True)
    if verbose:
        print(f"[{n}] built in {build_seconds:.1f} s", file=sys.stderr)

    transcript = projects / "-bench-project-0" / f"{SESSION}.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text(json.dumps({"type": "permission-mode", "permissionMode": "default"}) + "\n")
    recollection = home / "recollections" / f"{SESSION}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(ENGRAM_HOME=str(home), ENGRAM_PROJECTS_DIR=str(projects), ENGRAM_HTTP_PORT="0",
               ENGRAM_MODELS_DIR=str(embedder.path.parent))
    latencies: list[float] = []
    missed = 0
    log_path = workdir / f"processor-{n}.log"
    with running_processor(REPO, env, home, log_path):
        def append(line: str) -> None:
            with open(transcript, "a") as f:
                f.write(line)

        started = time.perf_counter()
        uid = str(uuidlib.uuid4())
        append(user_line(texts[0], session_id=SESSION, uid=uid, cwd=PROJECT, timestamp=iso_now()))
        if wait_for_uuid(recollection, uid.encode(), 600) is None:
            raise SystemExit(f"no recollection for the warm-up message; see {log_path}")
        warmup = time.perf_counter() - started
        for i, text in enumerate(texts[1:], 1):
            append(assistant_line(f"Answer {i}: noted, looking into it.", session_id=SESSION,
                                  message_id=f"msg_{i}", cwd=PROJECT, timestamp=iso_now()))
            time.sleep(0.4)  # the processor settles (captures the reply, builds the finished round)
            uid = str(uuidlib.uuid4())
            line = user_line(text, session_id=SESSION, uid=uid, cwd=PROJECT, timestamp=iso_now())
            t0 = time.perf_counter()
            append(line)
            t1 = wait_for_uuid(recollection, uid.encode(), TIMEOUT_SECONDS)
            if t1 is None:
                missed += 1
            else:
                latencies.append((t1 - t0) * 1000)

    # Baseline: the least a recollection costs, on the same vectors and messages.
    matrix = np.ascontiguousarray(vectors)
    baseline = []
    for text in texts[1:]:
        t0 = time.perf_counter()
        q = embedder.embed_query(text)
        sims = matrix @ q
        best = np.argpartition(-sims, 2)[:3]
        best[np.argsort(-sims[best])]
        baseline.append((time.perf_counter() - t0) * 1000)
    result = {
        "episodes": n, "messages": len(texts) - 1, "missed": missed,
        "build_seconds": round(build_seconds, 1), "warmup_seconds": round(warmup, 2),
        "freshness": stats(latencies), "baseline": stats(baseline),
        "session_start": time_session_start(home),
    }
    for key in ("p50_ms", "p95_ms"):
        f, b = result["freshness"][key], result["baseline"][key]
        result["freshness"][key.replace("_ms", "_vs_baseline")] = round(f / b, 1) if f and b else None
    return result


# ---------------------------------------------------------------- turn freshness, per agent

TURN_GOAL_P90_S = 5.0
TURN_TIMEOUT_S = 20.0
TURN_AGENTS = ("claude", "codex", "gemini")


class TurnWriter:
    """One agent's session, a turn (a prompt and its answer) at a time, appended as the agent writes it."""

    def __init__(self, agent: str, root: Path) -> None:
        self.agent, self.root = agent, root
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        self.written = 0
        if agent == "claude":
            self.session_id = str(uuidlib.uuid4())
            self.path = root / "projects" / "-bench-turns" / f"{self.session_id}.jsonl"
            self.lines: list[str] = []
        elif agent == "codex":
            self.rollout = Rollout(root / "codex-home", cwd="/bench/turns", start=start)
            self.session_id, self.path, self.lines = self.rollout.session_id, self.rollout.path, self.rollout.lines
        else:
            self.chat = Chat(root / "gemini-home" / ".gemini", project="/bench/turns", slug="turns", start=start)
            self.session_id, self.path, self.lines = self.chat.session_id, self.chat.path, self.chat.lines

    def turn(self, k: int) -> None:
        """Append turn `k`'s lines to the transcript (in one write, as a finished answer lands)."""
        prompt, answer = f"Turn {k}: which port does the staging API use?", f"Turn {k}: staging listens on 80{k:02d}."
        if self.agent == "claude":
            now = iso_now()
            self.lines.append(user_line(prompt, session_id=self.session_id, cwd="/bench/turns", timestamp=now))
            entry = json.loads(assistant_line(answer, session_id=self.session_id, message_id=f"msg_{k}",
                                              cwd="/bench/turns", timestamp=now))
            entry["message"]["stop_reason"] = "end_turn"
            self.lines.append(json.dumps(entry) + "\n")
        elif self.agent == "codex":
            self.rollout.turn()
            self.rollout.prompt(prompt)
            self.rollout.answer(answer)
            self.rollout.done()
        else:
            self.chat.prompt(prompt)
            self.chat.reply(answer)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write("".join(self.lines[self.written:]))
        self.written = len(self.lines)


def built(db: sqlite3.Connection, session_id: str, messages: int) -> bool:
    """The session's `messages` messages are captured and all in episodes."""
    row = db.execute("SELECT (SELECT count(*) FROM messages WHERE session_id = s.session_id), s.episodized_through, "
                     "(SELECT max(id) FROM messages WHERE session_id = s.session_id) FROM sessions s "
                     "WHERE session_id = ?", (session_id,)).fetchone()
    return row is not None and row[0] >= messages and row[2] is not None and row[1] >= row[2]


def measure_turns(code: Path, agent: str, turns: int, workdir: Path, models: Path) -> dict:
    """Seconds from each turn's last line to its memories, with the processor of `code` capturing `agent`."""
    root = Path(tempfile.mkdtemp(prefix=f"turns-{agent}-", dir=workdir))
    home = root / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "CODEX_", "GEMINI_"))}
    env.update(ENGRAM_HOME=str(home), ENGRAM_PROJECTS_DIR=str(root / "projects"), ENGRAM_HTTP_PORT="0",
               ENGRAM_MODELS_DIR=str(models), CODEX_HOME=str(root / "codex-home"),
               GEMINI_CLI_HOME=str(root / "gemini-home"), PYTHONPATH=str(code))
    writer = TurnWriter(agent, root)
    writer.path.parent.mkdir(parents=True, exist_ok=True)
    writer.path.write_text("")  # the session's folder exists from the start: no wait for its appearance
    seconds: list[float] = []
    missed = 0
    with running_processor(code, env, home, root / "processor.log"):
        while not (home / "engram.db").exists():
            time.sleep(0.05)
        db = sqlite3.connect(f"file:{home / 'engram.db'}?mode=ro", uri=True, timeout=10)
        try:
            for k in range(1, turns + 1):
                writer.turn(k)
                t0 = time.perf_counter()
                while not built(db, writer.session_id, 2 * k):
                    if time.perf_counter() - t0 > TURN_TIMEOUT_S:
                        break
                    time.sleep(0.02)
                else:
                    seconds.append(time.perf_counter() - t0)
                    continue
                missed += 1
                if missed >= 2 and not seconds:
                    missed = turns - len(seconds)  # never built in time: the rest would wait as long
                    break
        finally:
            db.close()
    # A missed turn counts as never built: p90 only when none was missed (p90_built_s: of those built).
    p90 = round(float(np.percentile(seconds, 90)), 2) if len(seconds) == turns else None
    return {"turns": turns, "built": len(seconds), "missed": missed, "p90_s": p90,
            "p90_built_s": round(float(np.percentile(seconds, 90)), 2) if seconds else None,
            "p50_s": round(float(np.percentile(seconds, 50)), 2) if seconds else None}


def exported(ref: str, workdir: Path) -> Path:
    """The code of git ref `ref`, exported into `workdir` (run from there: its `processor` is imported)."""
    target = workdir / f"code-{ref.replace('/', '-')}"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def turn_freshness(turns: int, baseline_ref: str, models: Path, verbose: bool,
                   agents: tuple[str, ...] = TURN_AGENTS) -> dict:
    rows = {}
    with tempfile.TemporaryDirectory(prefix="engram-turns-") as tmp:
        work = Path(tmp)
        baseline = exported(baseline_ref, work)
        for agent in agents:
            mine = measure_turns(REPO, agent, turns, work, models)
            theirs = measure_turns(baseline, agent, turns, work, models)
            rows[agent] = {"engram": mine, "baseline": theirs}
            if verbose:
                print(f"{agent:>7}: turn → memories p90 {mine['p90_s']} s (p50 {mine['p50_s']} s, "
                      f"{mine['missed']} missed of {turns}); {baseline_ref}: p90 {theirs['p90_s']} s "
                      f"({theirs['missed']} missed within {TURN_TIMEOUT_S:g} s; p90 of those built "
                      f"{theirs['p90_built_s']} s)", file=sys.stderr)
    return {"benchmark": "turn_freshness", "baseline_ref": baseline_ref, "goal_p90_s": TURN_GOAL_P90_S,
            "timeout_s": TURN_TIMEOUT_S,
            "goal_met": all(r["engram"]["p90_s"] is not None and r["engram"]["p90_s"] <= TURN_GOAL_P90_S
                            for r in rows.values()),
            "python": sys.version.split()[0], "cpus": os.cpu_count(), "agents": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated episode counts")
    parser.add_argument("--messages", type=int, default=40, help="timed messages per size (default 40)")
    parser.add_argument("--models-dir", type=Path,
                        default=Path(os.environ["ENGRAM_MODELS_DIR"]) if os.environ.get("ENGRAM_MODELS_DIR")
                        else DEFAULT_MODELS, help=f"converted models (default $ENGRAM_MODELS_DIR or {DEFAULT_MODELS})")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--turns", type=int, default=0,
                        help="instead: turn freshness, this many turns per agent (a row per agent)")
    parser.add_argument("--baseline-ref", default="house-kit", help="the code --turns compares with (a git ref)")
    parser.add_argument("--agents", default=",".join(TURN_AGENTS), help="--turns: the agents, comma-separated")
    args = parser.parse_args(argv)
    if args.turns:
        turn_report = turn_freshness(args.turns, args.baseline_ref, args.models_dir, verbose=not args.json,
                                     agents=tuple(args.agents.split(",")))
        print(json.dumps(turn_report) if args.json else json.dumps(turn_report, indent=2))
        return 0
    embedder = load_embedder("default", args.models_dir)
    results = []
    with tempfile.TemporaryDirectory(prefix="engram-freshness-") as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            result = measure(n, args.messages, Path(tmp), embedder, args.seed, verbose=not args.json)
            results.append(result)
            f, b, s = result["freshness"], result["baseline"], result["session_start"]
            print(f"{n:>7} episodes: freshness p50 {f['p50_ms']} ms, p95 {f['p95_ms']} ms, max {f['max_ms']} ms "
                  f"({result['missed']} missed of {result['messages']}); baseline p50 {b['p50_ms']} ms, "
                  f"p95 {b['p95_ms']} ms; ratio p50 {f['p50_vs_baseline']}x, p95 {f['p95_vs_baseline']}x; "
                  f"SessionStart hook {s['best_ms']} ms best, {s['median_ms']} ms median", file=sys.stderr)
    at_100k = next((r for r in results if r["episodes"] == 100_000), None)
    report = {
        "benchmark": "freshness", "goal_p95_ms_at_100k": GOAL_P95_MS_AT_100K,
        "goal_met": (at_100k["freshness"]["p95_ms"] is not None and at_100k["missed"] == 0
                     and at_100k["freshness"]["p95_ms"] <= GOAL_P95_MS_AT_100K) if at_100k else None,
        "python": sys.version.split()[0], "cpus": os.cpu_count(), "results": results,
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
