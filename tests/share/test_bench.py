"""bench/shared.py runs end to end on tiny inputs and prints its JSON figures last (figures: docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_shared_memory_benchmark_runs_and_reports_its_baselines(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "PG"))}
    env["ENGRAM_HOME"] = str(tmp_path / "home")
    models = os.environ.get("ENGRAM_MODELS_DIR")
    args = ["--sections", "throughput,team", "--memories", "300", "--sizes", "3000", "--queries", "10",
            "--exact-queries", "3", "--json"] + (["--models-dir", models] if models else [])
    done = subprocess.run([sys.executable, str(REPO / "bench" / "shared.py"), *args], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    throughput = report["throughput"]
    assert throughput["memories"] == 300 and throughput["push_per_s"] > 0 and throughput["bare_copy_per_s"] > 0
    assert abs(throughput["push_ratio"] - throughput["push_per_s"] / throughput["bare_copy_per_s"]) < 0.01
    team = report["team"]["3000"]
    assert team["hnsw"]["n"] == 10 and team["exact_scan"]["n"] == 3 and 0 <= team["recall_at_10_vs_exact"] <= 1


def test_the_fixes_section_compares_with_another_engram_checked_out_of_git(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "PG"))}
    env["ENGRAM_HOME"] = str(tmp_path / "home")
    models = os.environ.get("ENGRAM_MODELS_DIR")
    args = ["--sections", "fixes", "--memories", "120", "--fixes-rounds", "1", "--baseline-ref", "HEAD", "--json"] + (
        ["--models-dir", models] if models else [])
    done = subprocess.run([sys.executable, str(REPO / "bench" / "shared.py"), *args], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    fixes = json.loads(done.stdout.strip().splitlines()[-1])["fixes"]
    assert fixes["memories"] == 120 and fixes["filed_on_b"] == 119  # every memory but the one of no project
    assert fixes["baseline_ref"] == "HEAD" and fixes["baseline_push_s"] > 0 and fixes["push_s"] > 0
    # The seconds are printed to the millisecond: a ratio of rounds of a few tenths of a second agrees to ~1%.
    assert abs(fixes["push_ratio"] - fixes["push_s"] / fixes["baseline_push_s"]) < 0.05
