"""Nothing captured escapes redaction: every secret kind, planted in every field a session fills, is found nowhere.

One transcript carries each secret of the redaction tests' catalog (``tests/support/secret_catalog.py``: every
hand-written kind, the keys next to a service's name, the keys told by what surrounds them, a sampled token of
every generated kind) in every place capture reads: the user's prompt, the assistant's reply, a shell command
(a tool call's target), a fetched URL, a failed tool's error text, the diagnosis and fixed rerun a lesson is
mined from, a commit message (a high-signal tool call), a standing instruction, the git branch; beside it, Claude
Code's auto-memory file and a remember request. The real processor captures it (``engram backfill``) and the
remember job stores its memory. Then every file under the data home is read as bytes — the database, its WAL,
the logs, the queue — and `engram recall` / `engram expand` print what the agent would be handed: no secret, in
any form. Every field is also checked to hold a marker, so a field capture skipped cannot pass by being empty.

What leaves the machine is checked at its own doors, on a store that also holds a secret written before the
door existed (a row from an older version, put there with plain SQL): the prompts an LLM backend receives, and
every row pushed to a shared PostgreSQL database.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bench.testbed.transcripts import Conversation
from tests.conftest import REPO, run_engram
from tests.support.secret_catalog import catalog, found_in

PLANTED = catalog()
SECRETS = {secret for planted in PLANTED for secret in planted.secrets}
MARK = "[REDACTED:"
ROUND = 10  # catalog entries per prompt: a few dozen rounds in all


def _plain(text: str) -> bool:
    """Usable inside a double-quoted shell argument without escaping."""
    return not any(c in text for c in "\"'`$\\\n")


def _write_session(projects: Path, cwd: Path) -> Path:
    """The transcript: every catalog entry in every field a session fills."""
    session_id = str(uuid.uuid4())
    talk = Conversation(session_id, cwd=str(cwd))
    for start in range(0, len(PLANTED), ROUND):
        group = PLANTED[start:start + ROUND]
        listed = "\n".join(f"- {p.text}" for p in group)
        talk.user(f"Set up the deploy with these credentials:\n{listed}\nFrom now on always deploy with "
                  f"{group[0].text}")
        talk.say(f"I will use them:\n{listed}")
        for index, planted in enumerate(group):
            talk.bash(f"deploy --verbose {planted.text}", f"deploying with {planted.text}")
            if planted.text.startswith("http"):
                talk.tool("WebFetch", {"url": planted.text, "prompt": "read it"}, "ok")
            # A failure, the diagnosis, the fix and a clean rerun: a lesson, with the secret in each part.
            talk.bash(f"release --target {planted.text}", f"Error: release rejected {planted.text}\nexit code 1",
                      error=True)
            talk.say(f"The issue is that `release` rejects the value {planted.text} unless it is quoted.")
            talk.edit(str(cwd / "release.toml"), "target = 1", f"target = '{planted.text}'")
            talk.bash(f"release --target {planted.text}", "released")
            if _plain(planted.text) and index < 3:
                talk.bash(f'git commit -m "Rotate the deploy credential {planted.text}"',
                          f"[main 1a2b3c{index}] Rotate the deploy credential {planted.text}\n 1 file changed")
        talk.say("Done.", end_turn=True)
    lines = talk.lines
    # The git branch a line was written on is captured with it.
    branch = next(p.text for p in PLANTED if _plain(p.text) and " " not in p.text)
    entry = json.loads(lines[0])
    entry["gitBranch"] = f"feature/{branch}"
    lines[0] = json.dumps(entry) + "\n"
    path = projects / ("-" + str(cwd).strip("/").replace("/", "-")) / f"{session_id}.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(lines))
    return path


def _write_auto_memory(transcript: Path) -> None:
    """Claude Code's auto-memory file of the project, a section per catalog entry."""
    folder = transcript.parent / "memory"
    folder.mkdir()
    sections = [f"## Deploy credential {i}: {p.text.splitlines()[0][:80]}\n\nUse {p.text} for the deploy.\n"
                for i, p in enumerate(PLANTED)]
    (folder / "MEMORY.md").write_text("# Project memory\n\n" + "\n".join(sections))


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _leaks(blobs: dict[str, bytes]) -> dict[str, list[str]]:
    found = {name: found_in(blob, SECRETS) for name, blob in blobs.items()}
    return {name: secrets[:3] for name, secrets in found.items() if secrets}


def _wal(db: Path) -> bytes:
    wal = db.with_name(db.name + "-wal")
    return wal.read_bytes() if wal.exists() else b""


def _column(db: Path, sql: str) -> list[str]:
    import apsw

    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [str(row[0]) for row in conn.execute(sql)]
    finally:
        conn.close()


def test_the_catalog_holds_every_kind_the_redaction_tests_know() -> None:
    from processor.redaction import REDACTION_KINDS

    planted_kinds = {kind for kind in REDACTION_KINDS for p in PLANTED if p.kind.startswith(kind)}
    service_kinds = {"datadog-key", "twilio-key", "mailgun-key"}  # planted under their service's case ids
    assert set(REDACTION_KINDS) - planted_kinds <= service_kinds
    assert len(SECRETS) >= 150


def test_every_captured_field_is_stored_redacted(engram_home: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from processor.cli import main
    from processor.jobs import JobRunner
    from tests.support.jobs_fixtures import drain, make_settings

    projects, cwd = tmp_path / "projects", tmp_path / "shop"
    cwd.mkdir()
    transcript = _write_session(projects, cwd)
    _write_auto_memory(transcript)
    assert found_in(transcript.read_bytes(), SECRETS) == sorted(SECRETS)  # the transcript holds every secret

    run_engram("backfill", "--projects-dir", str(projects), env={"ENGRAM_HOME": str(engram_home)}, timeout=900)
    remembered = "Remember these for the deploy: " + " ; ".join(p.text for p in PLANTED if _plain(p.text))
    assert main(["remember", remembered, "--kind", "fact", "--scope", "global"]) == 0
    runner = JobRunner(make_settings())
    drain(runner)
    runner.close()

    db = engram_home / "engram.db"
    # Every field was planted, and holds a marker where the secret was.
    fields = {
        "user message": "SELECT text FROM messages WHERE role = 'user'",
        "assistant message": "SELECT text FROM messages WHERE role = 'assistant'",
        "git branch": "SELECT git_branch FROM messages WHERE git_branch IS NOT NULL",
        "tool call target": "SELECT target FROM tool_calls WHERE target IS NOT NULL",
        "fetched url": "SELECT target FROM tool_calls WHERE tool = 'WebFetch'",
        "failed result": "SELECT error FROM tool_calls WHERE error IS NOT NULL",
        "commit (pending)": "SELECT pending FROM tool_signals",
        "commit (text)": "SELECT text FROM tool_signals WHERE text IS NOT NULL",
        "verbatim memory": "SELECT full_content FROM episodes WHERE source_type = 'verbatim'",
        "lesson": "SELECT summary || full_content FROM episodes WHERE kind IN ('gotcha', 'bugfix')",
        "lesson entities": "SELECT entities FROM episodes WHERE kind IN ('gotcha', 'bugfix')",
        "standing instruction": "SELECT full_content FROM episodes WHERE kind IN ('preference', 'convention') "
                                "AND source_type = 'auto'",
        "commit memory": "SELECT full_content FROM episodes WHERE full_content LIKE 'Committed %'",
        "auto-memory section heading": "SELECT heading FROM automem_sections",
        "auto-memory memory": "SELECT full_content FROM episodes WHERE id IN "
                              "(SELECT episode_id FROM automem_sections)",
        "remembered memory": "SELECT full_content FROM episodes WHERE source_type = 'manual'",
    }
    unplanted = [name for name, sql in fields.items() if not any(MARK in value for value in _column(db, sql))]
    assert unplanted == [], f"fields the test did not reach (nothing redacted in them): {unplanted}"

    # Nowhere under the data home, in any file: the database, its WAL, logs, queue, recollections.
    blobs = _files(engram_home)
    assert "engram.db" in blobs and any(name.startswith("logs/") for name in blobs)
    assert _leaks(blobs) == {}

    # What the agent is handed: recall and expand.
    hits = json.loads(run_engram("recall", "deploy credential release rejected", "--limit", "20", "--json",
                                 env={"ENGRAM_HOME": str(engram_home)}).stdout)
    shown = json.dumps(hits)
    for hit in hits[:5]:
        shown += run_engram("expand", hit["id"], "--json", env={"ENGRAM_HOME": str(engram_home)}).stdout
    assert hits and found_in(shown.encode(), SECRETS) == []


def test_log_lines_are_redacted_message_arguments_and_traceback(engram_home: Path) -> None:
    from processor.service.logs import setup_logging
    from tests.support.jobs_fixtures import make_settings

    settings = make_settings()
    setup_logging(settings, to_stderr=False)
    log = logging.getLogger("processor.capture.tailer")
    try:
        for planted in PLANTED:
            log.warning("could not parse %s", planted.text)
        try:
            raise ValueError(f"backend echoed the prompt: {PLANTED[0].text}")
        except ValueError:
            log.exception("extraction failed for %s", PLANTED[1].text)
    finally:
        for handler in logging.getLogger().handlers:
            handler.flush()
    written = (settings.logs_dir / "engram.log").read_bytes()
    assert written.count(b"could not parse") == len(PLANTED) and b"Traceback" in written
    assert found_in(written, SECRETS) == []


def _store_with_an_old_secret(settings) -> str:
    """Messages and a memory as capture makes them, plus one row written before the door (plain SQL): a secret
    from a database an older Engram filled. Returns the old secret."""
    import numpy as np

    from processor.memory.gguf_convert import MODEL_NAME
    from processor.memory.identity import content_hash
    from processor.store import episodes as episodes_sql
    from processor.store import open_store, write_transaction
    from processor.store.episodes import NewEpisode
    from tests.support.jobs_fixtures import add_messages, now_ms

    old = PLANTED[-1].secrets[0]
    add_messages(settings, "s-old", [("user", f"the deploy uses {p.text}") for p in PLANTED[:40]]
                 + [("assistant", f"Stored the key {PLANTED[-1].text} in the vault.")],
                 project="/work/app", activity_ms=now_ms() - 600_000)
    conn = open_store(settings.db_path)
    try:
        with write_transaction(conn):
            episodes_sql.set_meta(conn, "embedding_model", MODEL_NAME)
            episodes_sql.set_meta(conn, "embedding_dim", "384")
            vector = (np.ones(384) / np.sqrt(384)).astype(np.float32)
            for index, planted in enumerate(PLANTED[:60]):
                text = f"To deploy, use {planted.text}"
                episodes_sql.insert_episode(conn, NewEpisode(
                    id=f"ep_{index:016x}", session_id="s-old", project="/work/app", scope="project",
                    summary=text, entities=[planted.text], importance="normal", kind="fact", source_type="auto",
                    full_content=text, source_uuids=[], content_hash=content_hash(text),
                    created_at=1_700_000_000_000 + index), vector.tobytes())
            # Written before the door existed: a raw statement, as an older version's store holds it.
            conn.execute("UPDATE messages SET text = ? WHERE session_id = 's-old' AND role = 'assistant'",
                         (f"Stored the key {PLANTED[-1].text} in the vault.",))
            conn.execute("UPDATE episodes SET full_content = ? WHERE id = ?",
                         (f"To deploy, use {PLANTED[-1].text}", "ep_0000000000000000"))
    finally:
        conn.close()
    return old


def test_no_llm_prompt_holds_a_secret(engram_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from processor.jobs import JobRunner
    from tests.support.fake_openai_server import FakeOpenAI
    from tests.support.jobs_fixtures import drain, make_settings

    server = FakeOpenAI(models={"gpt-4.1-nano"}).start()
    try:
        monkeypatch.setenv("ENGRAM_TEST_OPENAI_KEY", "sk-test-not-a-real-key-000000")
        settings = make_settings(extractor="openai", openai_base_url=server.base_url, openai_model="gpt-4.1-nano",
                                 openai_api_key_env="ENGRAM_TEST_OPENAI_KEY", max_prompt_tokens=4000)
        old = _store_with_an_old_secret(settings)
        runner = JobRunner(settings)
        drain(runner, timeout=60)
        runner.close()
    finally:
        server.stop()
    assert found_in(settings.db_path.read_bytes() + _wal(settings.db_path), {old}) == [old]  # written past the door
    sent = json.dumps(server.calls).encode()
    assert b"the deploy uses" in sent and b"Stored the key" in sent  # the messages did reach the model
    assert found_in(sent, SECRETS) == []


def test_nothing_pushed_to_the_shared_database_holds_a_secret(shared) -> None:
    from processor.share.sync import Sharing
    from tests.support.share_fixtures import sync

    shared.init()
    alice = shared.person("alice")
    machine = shared.machine("laptop", alice)
    Sharing(machine.settings).close_all()  # configured: every change is queued for the server from now on
    old = _store_with_an_old_secret(machine.settings)
    assert found_in(machine.settings.db_path.read_bytes() + _wal(machine.settings.db_path), {old}) == [old]
    sync(machine)
    rows = shared.admin_sql("SELECT string_agg(m::text, E'\\n') FROM engram.memories m")
    pushed = (rows[0][0] or "").encode()
    assert b"To deploy, use" in pushed  # the memories did leave
    assert found_in(pushed, SECRETS) == []


def test_a_secret_split_across_a_continued_command_line_is_redacted(tmp_path: Path) -> None:
    from processor.redaction import redact

    secret = next(s for p in PLANTED if p.kind == "cli-key-flag-hex" for s in p.secrets)
    command = f"./vault-tool decrypt \\\n  --key \\\n  {secret} \\\n  backup.tar.enc"
    assert secret not in redact(command)
    out = subprocess.run([sys.executable, "-c", "import sys; from processor.redaction import redact; "
                          "print(redact(sys.stdin.read()))"], input=command, capture_output=True, text=True,
                         cwd=REPO, check=True).stdout
    assert secret not in out
