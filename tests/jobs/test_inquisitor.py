"""The inquisitor against a real git repository: stale, auto-fixed, valid, reviews, the LLM check and its limits."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from processor.jobs.backends.mock_backend import MockBackend
from processor.jobs.backends.readonly_tools import bash_allowed, can_use_tool
from processor.jobs.costs import record_call
from processor.jobs.inquisitor import find_due
from processor.jobs.queue import JobRunner
from processor.memory.citations import extract
from processor.memory.episode_store import EpisodeStore
from processor.recall.recollections import RecollectionWriter
from processor.store import cold as cold_sql
from processor.store import episodes as episodes_sql
from processor.store import open_store
from processor.store.jobs import LLMCall
from tests.support.jobs_fixtures import drain, make_settings, now_ms, query


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "old.py").write_text("def parse_legacy(text):\n    return text\n")
    (root / "src" / "config.py").write_text("def load_settings(path):\n    return open(path).read()\n")
    (root / "src" / "store.py").write_text("def open_store(path):\n    return path\n\ndef drop_cache():\n    pass\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "start")
    return root


def remember(store: EpisodeStore, text: str, project: Path) -> str:
    episode_id, _ = store.remember(text, kind="fact", project=str(project))
    return episode_id


def status(settings, episode_id: str) -> str:
    return query(settings, "SELECT status FROM episodes WHERE id = ?", (episode_id,))[0][0]


def test_deleted_file_goes_stale_renames_are_fixed_and_bites_leave_them_out(engram_home: Path, repo: Path) -> None:
    settings = make_settings(cold_path=True)
    store = EpisodeStore(settings, open_store(settings.db_path))
    stale_id = remember(store, "The legacy parser lives in src/old.py and handles the v1 format.", repo)
    renamed_id = remember(store, "Configuration is read by `load_settings()` in src/config.py.", repo)
    valid_id = remember(store, "The database is opened by `open_store` in src/store.py.", repo)
    plain_id = remember(store, "The team prefers short commit messages written in English.", repo)
    gone_id = remember(store, "Cache invalidation is done by `drop_cache` after each write.", repo)

    git(repo, "rm", "-q", "src/old.py")
    git(repo, "commit", "-q", "-m", "drop the legacy parser")
    config = repo / "src" / "config.py"
    config.write_text(config.read_text().replace("load_settings", "read_settings"))
    store_py = repo / "src" / "store.py"
    store_py.write_text("def open_store(path):\n    return path\n")
    git(repo, "commit", "-q", "-am", "rename load_settings, drop drop_cache")

    runner = JobRunner(settings, backend=None)
    drain(runner)

    assert status(settings, stale_id) == "stale"
    assert status(settings, valid_id) == "active"
    assert status(settings, plain_id) == "active"  # cites no code: never checked
    assert not query(settings, "SELECT 1 FROM memory_checks WHERE episode_id = ?", (plain_id,))
    head = git(repo, "rev-parse", "HEAD").strip()
    verdict, commit, reason = query(settings, "SELECT verdict, head_commit, reason FROM memory_checks "
                                              "WHERE episode_id = ?", (valid_id,))[0]
    assert verdict == "valid" and commit == head
    assert "src/old.py was deleted" in query(settings, "SELECT reason FROM memory_checks WHERE episode_id = ?",
                                             (stale_id,))[0][0]
    # The renamed function: a new version with the new name, the old one kept and superseded.
    old_status, new_id = query(settings, "SELECT status, superseded_by FROM episodes WHERE id = ?", (renamed_id,))[0]
    assert old_status == "superseded" and new_id
    assert "read_settings" in query(settings, "SELECT full_content FROM episodes WHERE id = ?", (new_id,))[0][0]
    # A function removed with nothing in its place: a person decides.
    [review] = cold_sql.open_reviews(store.conn)
    assert review.episode_id == gone_id and "drop_cache" in review.context and review.created_commit == head
    assert status(settings, gone_id) == "active"

    # Recall still finds the stale memory, and says why; the next recollection never shows it.
    hits = store.recall("legacy parser v1 format", limit=5, project=str(repo))
    stale_hit = next(h for h in hits if h.id == stale_id)
    assert stale_hit.note and stale_hit.note.startswith("stale: ") and "deleted" in stale_hit.note
    writer = RecollectionWriter(settings)
    path = writer.write(store, "s1", "u1", "where does the legacy parser for the v1 format live?", project=str(repo))
    assert path is not None and stale_id not in path.read_text()

    # Checked at this commit within the hour: nothing is due again.
    assert find_due(_check(store, settings)) == []
    store.conn.close()


def _check(store: EpisodeStore, settings):
    from processor.jobs.base import DueCheck
    return DueCheck(store.conn, settings, now_ms(), None, llm_available=False)


def test_a_bite_citing_a_deleted_file_is_dropped_before_the_job_runs(engram_home: Path, repo: Path) -> None:
    settings = make_settings(cold_path=True)
    store = EpisodeStore(settings, open_store(settings.db_path))
    gone = remember(store, "The legacy parser in src/old.py handles the v1 import format.", repo)
    (repo / "src" / "old.py").unlink()  # not even committed: the cheap check looks at the disk
    path = RecollectionWriter(settings).write(store, "s2", "u1", "how is the v1 import format parsed by the legacy "
                                              "parser?", project=str(repo))
    assert path is not None and gone not in path.read_text()
    assert status(settings, gone) == "active"  # only the inquisitor decides on the memory itself
    store.conn.close()


def test_not_a_repository_and_detached_head_are_handled(engram_home: Path, repo: Path, tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings(cold_path=True)
    store = EpisodeStore(settings, open_store(settings.db_path))
    plain = tmp_path / "not-a-repo"
    plain.mkdir()
    lost = remember(store, "The build script is `scripts/build.sh` in this folder.", plain)
    missing = remember(store, "Settings come from src/settings.toml here.", tmp_path / "gone-project")
    git(repo, "checkout", "-q", "--detach")
    detached = remember(store, "The database is opened by `open_store` in src/store.py.", repo)
    runner = JobRunner(settings, backend=None)
    drain(runner)
    assert status(settings, lost) == "active" and status(settings, missing) == "active"
    verdicts = dict(query(settings, "SELECT episode_id, verdict FROM memory_checks"))
    assert verdicts[lost] == "skipped" and verdicts[missing] == "skipped" and verdicts[detached] == "valid"
    assert "detached HEAD" in query(settings, "SELECT reason FROM memory_checks WHERE episode_id = ?",
                                    (detached,))[0][0]
    # Not repeated on the next run: checked (skipped) within the hour.
    runner.wake()
    assert runner.run_until_idle() == 0
    assert sum("not a git repository" in r.message for r in caplog.records) == 1
    store.conn.close()


def test_the_llm_check_decides_uncertain_ones_and_a_wrong_id_goes_to_a_person(engram_home: Path, repo: Path) -> None:
    settings = make_settings(cold_path=True)
    store = EpisodeStore(settings, open_store(settings.db_path))
    first = remember(store, "Cache invalidation is done by `drop_cache` after each write.", repo)
    second = remember(store, "The `open_store` helper in src/store.py calls `drop_cache` on open.", repo)
    (repo / "src" / "store.py").write_text("def open_store(path):\n    return path\n")
    git(repo, "commit", "-q", "-am", "drop drop_cache")
    backend = MockBackend([{"id": first, "verdict": "stale", "reason": "drop_cache was removed", "rewritten": ""},
                           {"id": "ep_someone_else", "verdict": "valid", "reason": "fine", "rewritten": ""}])
    runner = JobRunner(settings, backend=backend)
    drain(runner)
    assert len(backend.requests) == 2
    request = backend.requests[0]
    assert request.read_only_root == str(repo) and request.schema_name == "engram_inquiry"
    assert status(settings, first) == "stale"
    assert status(settings, second) == "active"
    [review] = cold_sql.open_reviews(store.conn)
    assert review.episode_id == second
    assert query(settings, "SELECT job_type FROM llm_calls") == [("inquisitor",), ("inquisitor",)]
    store.conn.close()


def test_the_budget_stops_the_inquisitors_llm_calls(engram_home: Path, repo: Path) -> None:
    settings = make_settings(cold_path=True, daily_budget_usd=0.01, model_prices={"paid": [100.0, 100.0]})
    store = EpisodeStore(settings, open_store(settings.db_path))
    uncertain = remember(store, "Cache invalidation is done by `drop_cache` after each write.", repo)
    (repo / "src" / "store.py").write_text("def open_store(path):\n    return path\n")
    git(repo, "commit", "-q", "-am", "drop drop_cache")
    record_call(store.conn, LLMCall(None, "extract", "mock", "paid", now_ms(), 10, 100, 10, 0.02, True, None))
    backend = MockBackend(model="paid")
    runner = JobRunner(settings, backend=backend)
    runner.open()
    runner.wake()
    runner.run_until_idle()
    assert backend.requests == []  # no call was made
    state, error = query(settings, "SELECT state, last_error FROM jobs WHERE type = 'inquisitor'")[0]
    assert state == "pending" and "budget" in error
    assert status(settings, uncertain) == "active" and cold_sql.open_reviews(store.conn) == []
    runner.close()
    store.conn.close()


@pytest.mark.parametrize("command", [
    "rm -rf /", "git push origin main", "git checkout main", "git log; rm -rf ~", "git log && rm x",
    "git log | sh", "git log $(rm -rf ~)", "git log `rm -rf ~`", "git -c core.pager=rm log", "git diff --output=/tmp/x",
    "git log > /tmp/x", "git reset --hard", "bash -c 'git log'", "git", "git show --ext-diff HEAD", "",
])
def test_the_bash_allow_list_rejects(command: str) -> None:
    ok, why = bash_allowed(command)
    assert not ok and why
    decision = asyncio.run(can_use_tool("Bash", {"command": command}, None))
    assert decision.behavior == "deny"


@pytest.mark.parametrize("command", ["git log --oneline -5 -- src/store.py", "git show HEAD:src/store.py",
                                     "git diff HEAD~1 HEAD", "git blame -L 1,5 src/store.py",
                                     "git --no-pager log -S drop_cache", "git -C /tmp/p log"])
def test_the_bash_allow_list_allows_read_only_git(command: str) -> None:
    assert bash_allowed(command)[0]
    assert asyncio.run(can_use_tool("Bash", {"command": command}, None)).behavior == "allow"
    assert asyncio.run(can_use_tool("Read", {"file_path": "/x"}, None)).behavior == "allow"
    assert asyncio.run(can_use_tool("Write", {"file_path": "/x"}, None)).behavior == "deny"


def test_the_claude_check_runs_with_read_only_tools_in_engrams_work_dir(engram_home: Path, repo: Path) -> None:
    from processor.jobs.backends.base import LLMRequest
    from processor.jobs.backends.claude_backend import ClaudeBackend

    settings = make_settings(cold_path=True)
    backend = ClaudeBackend(settings)
    request = LLMRequest("s", "p", {"type": "object"}, "engram_inquiry", 100, 5.0, read_only_root=str(repo))
    options = backend.read_only_options(request)
    assert options.setting_sources == [] and options.cwd == str(settings.agent_workdir)
    assert set(options.tools) == {"Read", "Glob", "Grep", "Bash"} and options.allowed_tools == ["Read", "Glob", "Grep"]
    assert options.add_dirs == [str(repo)] and options.can_use_tool is can_use_tool
    assert options.mcp_servers == {} and options.strict_mcp_config
    assert "Bash" not in options.disallowed_tools and "Write" in options.disallowed_tools


def test_citations() -> None:
    c = extract("Use `engram run --once` and `JobRunner.enqueue()`; see processor/jobs/queue.py and README.md. "
                "The max_line_bytes setting; ~/.engram/engram.db is not in the repo.", ["sqlite"])
    assert "processor/jobs/queue.py" in c.paths and "README.md" in c.paths
    assert not any(".engram" in p for p in c.paths)
    assert {"enqueue", "max_line_bytes"} <= set(c.symbols) and "sqlite" not in c.symbols
    assert c.commands == ("engram run --once",)
    assert not extract("We prefer short answers and tabs over spaces.")
    assert episodes_sql  # the module the inquisitor's store functions build on


def test_every_git_call_is_bounded_in_time_and_output(repo: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from processor.memory.code_check import RepoSnapshot, RepoUnavailable
    from processor.memory.code_check import git as run_git

    code, out = run_git(str(repo), ["ls-files"], 10, cap=5)
    assert code == 0 and len(out) == 5
    slow = tmp_path / "slow-bin"
    slow.mkdir()
    (slow / "git").write_text("#!/bin/sh\nexec sleep 30\n")
    (slow / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{slow}:{__import__('os').environ['PATH']}")
    started = now_ms()
    with pytest.raises(RepoUnavailable, match="longer than 0.5 s"):
        RepoSnapshot(str(repo), timeout=0.5)
    assert now_ms() - started < 5000


@pytest.mark.parametrize("path", ["/repo/.env", "/repo/.env.production", "config/prod.pem", "/home/me/.ssh/id_rsa",
                                  "deploy/credentials.json", "infra/prod.tfvars", "/repo/.npmrc"])
def test_the_checking_agent_never_reads_a_credentials_file(path: str) -> None:
    """What a tool reads goes to the model without passing the redaction door: credentials files are not read."""
    for tool, key in (("Read", "file_path"), ("Grep", "path"), ("Glob", "pattern")):
        decision = asyncio.run(can_use_tool(tool, {key: path}, None))
        assert decision.behavior == "deny" and "credentials" in decision.message
    assert asyncio.run(can_use_tool("Read", {"file_path": "/repo/src/env.py"}, None)).behavior == "allow"
    assert asyncio.run(can_use_tool("Read", {"file_path": "/repo/docs/keys.md"}, None)).behavior == "allow"
