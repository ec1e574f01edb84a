"""A burst of real clients against the real processor's control plane: all answered, none refused.

    python bench/burst.py [--clients 200] [--slow 40] [--rounds 3] [--baseline-ref 84d1884 | --no-baseline]
                          [--models-dir DIR] [--json]

A fresh ENGRAM_HOME with a few memories and the real processor (`python -m processor.cli run`). Then, for
`/status` and for `/recall` in turn, `--clients` authenticated requests (the token, a loopback Host), each on
a connection of its own, released at the same moment; `--rounds` times each. Meanwhile `--slow`
unauthenticated clients hold connections open without ever finishing a request (half idle, half trickling
a byte at a time), as a flood of hostile local clients would.
Each /recall asks a query of its own. Per endpoint: answered (200), refused (503, with whether Retry-After
was sent), failed otherwise, and the latency of the answered ones p50/p95/max from the burst's start.
Baseline, same run: the same request alone, one at a time (p50/p95), so the ratio says what arriving
together costs; and the same bursts against the processor of `--baseline-ref` (main before issue 26), its tree
taken from git into a temporary folder.
Goal (issue 21): every request of a 200-client burst answered, p95 <= 1 s.
`--json` prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a plain script from anywhere

from bench.load import BASELINE_REF, DEFAULT_MODELS, code_of, stats, stop_processor  # noqa: E402
from processor.capture.remember_inbox import RememberRequest, write_remember_file  # noqa: E402
from processor.service.control_client import ping, request  # noqa: E402
from processor.service.control_files import read_port, read_token  # noqa: E402

GOAL_P95_MS = 1000
QUERY_TAILS = ("for the deploy", "in the tests", "on staging", "after the reconnect fix", "with uv")
MEMORIES = [
    "The staging database is PostgreSQL 16 behind pgbouncer on port 6543",
    "Deploys go through the release branch; never push to main directly",
    "Checkout tests are flaky unless time is frozen with freezegun",
    "The WebSocket reconnect race was fixed with a mutex on the connection map",
    "User prefers uv over pip for installing Python packages",
]


def one_request(port: int, token: str, method: str, path: str, body: bytes | None, start: threading.Event,
                started: list[float], out: list[tuple[int | str, float, str | None]]) -> None:
    headers = {"Authorization": f"Bearer {token}", "Host": "localhost"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    start.wait()
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        out.append((response.status, time.perf_counter() - started[0], response.getheader("Retry-After")))
    except (OSError, http.client.HTTPException) as exc:
        out.append((type(exc).__name__, time.perf_counter() - started[0], None))
    finally:
        conn.close()


def burst(port: int, token: str, clients: int, method: str, path: str, body: dict | None) -> list:
    """`clients` requests released at once; a /recall body gets a query of its own per client."""
    start = threading.Event()
    started = [0.0]
    out: list[tuple[int | str, float, str | None]] = []

    def body_of(n: int) -> bytes | None:
        if body is None:
            return None
        return json.dumps({**body, "query": f"{body['query']} ({QUERY_TAILS[n % len(QUERY_TAILS)]} {n})"}).encode()

    threads = [threading.Thread(target=one_request, args=(port, token, method, path, body_of(n), start, started, out))
               for n in range(clients)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)  # every thread waits at the start line
    started[0] = time.perf_counter()
    start.set()
    for thread in threads:
        thread.join(timeout=60)
    return out


def hold_connections(port: int, stop: threading.Event, count: int) -> list[threading.Thread]:
    def hostile(trickle: bool) -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=6) as sock:
                    sock.sendall(b"GET /status HTTP/1.1\r\nHost: localhost\r\n")
                    while not stop.is_set():
                        if trickle:
                            sock.sendall(b"X")
                        elif not sock.recv(1):
                            break
                        time.sleep(0.1)
            except OSError:
                time.sleep(0.01)

    threads = [threading.Thread(target=hostile, args=(i % 2 == 0,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads


def measure(clients: int, slow: int, rounds: int, models: Path, workdir: Path, code: Path = REPO) -> dict:
    home, projects = workdir / "home", workdir / "projects"
    projects.mkdir(parents=True)
    home.mkdir(mode=0o700)
    for text in MEMORIES:
        write_remember_file(home / "queue", RememberRequest(text, kind="fact", scope="global", project=None))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(ENGRAM_HOME=str(home), ENGRAM_PROJECTS_DIR=str(projects), ENGRAM_MODELS_DIR=str(models),
               ENGRAM_HTTP_PORT="0")
    with open(workdir / "processor.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "processor.cli", "run"], cwd=code, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            return _measure(proc, home / "run", clients, slow, rounds)
        finally:
            stop_processor(proc)


def _measure(proc: subprocess.Popen, run_dir: Path, clients: int, slow: int, rounds: int) -> dict:
    deadline = time.monotonic() + 180
    while True:  # started, model loaded, memories stored
        answer = ping(run_dir, timeout=1)
        if answer is not None and not answer.get("memory_backlog"):
            try:
                if len(request(run_dir, "POST", "/recall", {"query": "staging database"}, timeout=60)["bites"]) >= 1:
                    break
            except Exception:  # noqa: BLE001 - not ready yet
                pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the processor did not start (see processor.log)")
        time.sleep(0.2)
    port, token = read_port(run_dir), read_token(run_dir)
    assert port is not None and token is not None
    cases = {"status": ("GET", "/status", None),
             "recall": ("POST", "/recall", {"query": "which port does staging use", "limit": 3})}
    report: dict = {}
    for name, (method, path, body) in cases.items():
        alone = []
        for _ in range(30):
            result = burst(port, token, 1, method, path, body)
            alone.append(result[0][1] * 1000)
        stop = threading.Event()
        hostile = hold_connections(port, stop, slow)
        time.sleep(0.5)
        results = []
        try:
            for _ in range(rounds):
                results += burst(port, token, clients, method, path, body)
                time.sleep(0.5)
        finally:
            stop.set()
            for thread in hostile:
                thread.join(timeout=10)
        answered = [seconds * 1000 for status, seconds, _ in results if status == 200]
        refused = [retry for status, _, retry in results if status == 503]
        latency, base = stats(answered), stats(alone)
        report[name] = {
            "requests": len(results), "answered": len(answered), "refused_503": len(refused),
            "refused_with_retry_after": sum(1 for retry in refused if retry), "failed_otherwise":
                len(results) - len(answered) - len(refused),
            "latency_ms": latency, "alone_ms": base,
            "p95_vs_alone": round(latency["p95"] / base["p95"], 1) if latency["p95"] and base["p95"] else None,
        }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=200, help="authenticated requests sent at the same moment")
    parser.add_argument("--slow", type=int, default=40, help="unauthenticated clients holding connections meanwhile")
    parser.add_argument("--rounds", type=int, default=3, help="bursts per endpoint")
    parser.add_argument("--models-dir", type=Path,
                        default=Path(os.environ["ENGRAM_MODELS_DIR"]) if os.environ.get("ENGRAM_MODELS_DIR")
                        else DEFAULT_MODELS, help=f"converted models (default $ENGRAM_MODELS_DIR or {DEFAULT_MODELS})")
    parser.add_argument("--baseline-ref", default=BASELINE_REF, help="the git commit whose processor is the baseline")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    baseline = None
    with tempfile.TemporaryDirectory(prefix="engram-burst-") as tmp:
        result = measure(args.clients, args.slow, args.rounds, args.models_dir, Path(tmp) / "this")
        if not args.no_baseline:
            baseline = measure(args.clients, args.slow, args.rounds, args.models_dir, Path(tmp) / "baseline",
                               code_of(args.baseline_ref, Path(tmp)))
    goals = {f"{name}_all_answered": r["answered"] == r["requests"] for name, r in result.items()}
    goals.update({f"{name}_p95_le_1s": (r["latency_ms"]["p95"] or 0) <= GOAL_P95_MS for name, r in result.items()})
    report = {"benchmark": "burst", "clients": args.clients, "slow_clients": args.slow, "rounds": args.rounds,
              **result, "baseline_ref": None if args.no_baseline else args.baseline_ref, "baseline": baseline,
              "goals": goals, "goal_met": all(goals.values()), "python": sys.version.split()[0],
              "cpus": os.cpu_count()}
    for label, measured in (("this", result), ("baseline", baseline)):
        for name, r in (measured or {}).items():
            print(f"{label} /{name}: {r['answered']}/{r['requests']} answered, {r['refused_503']} refused (503), "
                  f"{r['failed_otherwise']} failed; p50 {r['latency_ms']['p50']} ms, p95 {r['latency_ms']['p95']} ms "
                  f"({r['p95_vs_alone']}x alone: p95 {r['alone_ms']['p95']} ms)", file=sys.stderr)
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
