"""Faults: a processor killed mid-push, the server killed mid-sync, a change delivered twice, a schema newer than
the client, bad rows from the server — no gap, no duplicate, nothing half-applied, local memory goes on."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import apsw
import pytest

from bench.testbed.pg_cluster import PostgresCluster
from processor.share.errors import SchemaTooNew, ShareError
from processor.share.sync import ShareThread, Sharing
from processor.store import open_store
from processor.store import share as share_sql
from tests.conftest import REPO
from tests.support.share_fixtures import Machine, SharedSetup, seed_memories, set_model_meta, stalled_pull, sync


def local_ids(machine: Machine) -> list[str]:
    conn = open_store(machine.settings.db_path)
    try:
        return [r[0] for r in conn.execute("SELECT id FROM episodes ORDER BY id")]
    finally:
        conn.close()


def outbox(machine: Machine) -> int:
    conn = open_store(machine.settings.db_path)
    try:
        return share_sql.pending_count(conn)
    finally:
        conn.close()


def wait_for(check, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def pair(shared: SharedSetup) -> tuple[Machine, Machine]:
    shared.init()
    alice = shared.person("alice")
    a = shared.machine("a", alice, extra="share_batch = 50\n")
    b = shared.machine("b", alice, extra="share_batch = 50\n")
    for machine in (a, b):
        set_model_meta(machine)
    return a, b


def test_a_processor_killed_between_the_server_commit_and_the_local_one_leaves_no_gap_and_no_duplicate(
        pair: tuple[Machine, Machine], shared: SharedSetup) -> None:
    a, b = pair
    sync(a)  # first contact done (machine registered, names mirrored)
    ids = seed_memories(a, 200)  # all 200 queued
    # Hold the local write lock: the push commits its first batch on the server, then waits to clear it locally.
    blocker = apsw.Connection(str(a.settings.db_path))
    blocker.execute("BEGIN IMMEDIATE")
    push = subprocess.Popen([sys.executable, "-m", "processor.cli", "share", "push"], cwd=REPO,
                            env={**os.environ, **a.env()}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        count = lambda: shared.admin_sql("SELECT count(*) FROM engram.memories")[0][0]  # noqa: E731
        wait_for(lambda: count() >= 50, what="the first batch on the server")
        push.send_signal(signal.SIGKILL)
        push.wait(timeout=30)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert count() == 50 and outbox(a) == 200  # committed there, not yet cleared here
    first = dict(shared.admin_sql("SELECT id, seq FROM engram.memories"))
    sync(a)
    after = dict(shared.admin_sql("SELECT id, seq FROM engram.memories"))
    assert sorted(after) == sorted(ids) and outbox(a) == 0
    assert all(after[i] == seq for i, seq in first.items())  # the batch sent again changed nothing there
    sync(b)
    assert local_ids(b) == sorted(ids)


def test_the_server_killed_mid_sync_loses_nothing(tmp_path: Path, shared: SharedSetup) -> None:
    # A server of this test's own, killed (SIGKILL) while a pull is half done and while the processor runs.
    cluster = PostgresCluster()
    try:
        cluster.sql("CREATE ROLE dana LOGIN PASSWORD 'pw-dana' CREATEDB")
        cluster.sql("CREATE DATABASE shared OWNER dana")
        cluster.sql("CREATE EXTENSION vector", database="shared")
        with open(shared.passfile, "a") as f:
            f.write(f"127.0.0.1:{cluster.port}:*:dana:pw-dana\n")
        machines = []
        for name in ("a", "b"):
            home = tmp_path / f"home-{name}"
            home.mkdir()
            (home / "config.toml").write_text(f'shared_database_url = "{cluster.url("dana", "shared")}"\n'
                                              f'share_batch = 50\nshare_interval_seconds = 0.2\n'
                                              f'share_backoff_max_seconds = 2.0\n')
            machines.append(Machine(name, home, "dana", cluster.url("dana", "shared"), tmp_path))
        a, b = machines
        from processor.share import commands

        set_model_meta(a)
        set_model_meta(b)
        commands.init(a.settings)
        ids = seed_memories(a, 300)
        sync(a)
        # B's pull applies its first batch, then waits for the local write lock while the server dies.
        stalled = stalled_pull(b)
        time.sleep(1.0)  # the first batch is fetched and waits for the lock
        cluster.kill()
        stalled.release()
        assert stalled.failure, "the pull should have met the dead server"
        assert isinstance(stalled.failure[0], Exception)
        applied = local_ids(b)
        assert 0 < len(applied) < 300  # half done: the batch before the failure is in, with its cursor
        # The processor's sync thread meets the dead server, local work goes on, and it catches up after.
        stop = threading.Event()
        thread = ShareThread(a.settings, stop)
        thread.start()
        try:
            later = seed_memories(a, 20, prefix="later")
            wait_for(lambda: thread.last_error is not None, what="the sync thread to see the server down")
            assert "nothing answers" in thread.last_error or "connection" in thread.last_error
            cluster.start()
            wait_for(lambda: outbox(a) == 0, what="the outbox to drain after the restart")
        finally:
            stop.set()
            thread.stop()
        sync(b)
        assert local_ids(b) == sorted(ids + later)
        state = share_sql.state(open_store(a.settings.db_path))
        assert state.last_error is None  # cleared by the first sync that worked
    finally:
        cluster.remove()


def test_a_change_delivered_twice_is_applied_once(pair: tuple[Machine, Machine], shared: SharedSetup) -> None:
    a, b = pair
    ids = seed_memories(a, 120)
    sync(a)
    sync(b)
    conn = open_store(b.settings.db_path)
    before = conn.execute("SELECT id, status, full_content, rowid FROM episodes ORDER BY id").fetchall()
    outbox_before = share_sql.pending_count(conn)
    # Everything again from the start, as after a lost cursor: same states, nothing new, nothing pushed back.
    from processor.store import write_transaction

    with write_transaction(conn):
        share_sql.reset_cursor(conn)
    sharing = Sharing(b.settings)
    try:
        report = sharing.pull()
    finally:
        sharing.close_all()
    assert report.received == len(ids) and report.applied == 0
    assert conn.execute("SELECT id, status, full_content, rowid FROM episodes ORDER BY id").fetchall() == before
    assert share_sql.pending_count(conn) == outbox_before
    conn.close()


def test_a_schema_newer_than_the_client_is_refused_and_local_memory_goes_on(
        pair: tuple[Machine, Machine], shared: SharedSetup) -> None:
    a, _ = pair
    seed_memories(a, 3)
    sync(a)
    shared.cluster.sql("INSERT INTO engram.migrations (version, name) VALUES (99, 'p099_from_the_future')",
                       database=shared.database, role=shared.owner, password=shared.password(shared.owner))
    with pytest.raises(SchemaTooNew) as raised:
        sync(a)
    assert "schema version 99" in raised.value.problem and "upgrade Engram" in (raised.value.fix or "")
    from processor.share import commands

    with pytest.raises(SchemaTooNew):
        commands.init(a.settings)
    assert shared.admin_sql("SELECT max(version) FROM engram.migrations") == [(99,)]  # left as it was
    seed_memories(a, 2, prefix="offline")  # local memory keeps working, and its changes wait
    assert outbox(a) == 2


def test_bad_rows_from_the_server_are_refused_one_by_one_and_never_half_applied(
        pair: tuple[Machine, Machine], shared: SharedSetup, caplog: pytest.LogCaptureFixture) -> None:
    a, b = pair
    ids = seed_memories(a, 10)
    sync(a)
    # The server's data goes bad behind Engram's back (a tampered or broken database: its vector index, which
    # would refuse a vector of the wrong size, dropped first).
    from processor.share.postgres.migrations import DEFAULT_MODEL, vector_index_name

    shared.admin_sql(f"DROP INDEX engram.{vector_index_name(DEFAULT_MODEL[0])}")
    shared.admin_sql(f"UPDATE engram.memories SET embedding = '[1,2,3]' WHERE id = '{ids[2]}'")
    shared.admin_sql(f"UPDATE engram.memories SET entities = '{{\"not\": \"a list\"}}' WHERE id = '{ids[5]}'")
    with caplog.at_level(logging.WARNING, logger="processor.share.pull"):
        sharing = Sharing(b.settings)
        try:
            report = sharing.pull()
        finally:
            sharing.close_all()
    refused = dict(report.refused)
    assert set(refused) == {ids[2], ids[5]}
    assert "3 dimensions" in refused[ids[2]] and "entities" in refused[ids[5]]
    assert sorted(local_ids(b)) == sorted(set(ids) - {ids[2], ids[5]})
    lines = [r.getMessage() for r in caplog.records if "refused memory" in r.getMessage()]
    assert len(lines) == 2
    from processor.share import commands

    assert commands.status(b.settings, network=False).data["refused"] == 2


def test_a_sync_failure_is_a_share_error_naming_its_fix(pair: tuple[Machine, Machine], shared: SharedSetup) -> None:
    a, _ = pair
    shared.cluster.sql(f"REVOKE INSERT ON engram.memories FROM {a.role}", database=shared.database,
                       role=shared.owner, password=shared.password(shared.owner))
    seed_memories(a, 1)
    with pytest.raises(ShareError) as raised:
        sync(a)
    assert "grants" in (raised.value.fix or "")
