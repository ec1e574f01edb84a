"""Bad input: each gives one clear message naming the fix, never a password, and local memory keeps working.

A wrong URL, a wrong password (and one written into config.toml), a server without pgvector, no permission
to create the schema, TLS refused (and TLS verified with sslmode=verify-full), a clock hours off, two
machines with one machine id, a project with no git remote, a 1 MB memory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.testbed.pg_cluster import TlsFront, free_port, make_certificates
from processor.share import commands
from processor.share import connection as share_connection
from processor.share.errors import MachineIdTaken, ShareError
from processor.share.sync import Sharing
from tests.conftest import REPO
from tests.support.share_fixtures import Machine, SharedSetup, seed_memories, set_model_meta, store_of, sync


def failure(machine: Machine) -> ShareError:
    with pytest.raises(ShareError) as raised:
        sync(machine)
    error = raised.value
    assert error.fix, f"no fix named: {error}"
    return error


def with_url(shared: SharedSetup, name: str, url: str) -> Machine:
    home = shared.tmp / f"home-{name}"
    home.mkdir()
    (home / "config.toml").write_text(f'shared_database_url = "{url}"\nshare_connect_timeout_seconds = 3\n')
    return Machine(name, home, "", url, shared.tmp)


def test_a_wrong_url_names_the_fix_and_local_memory_keeps_working(shared: SharedSetup) -> None:
    shared.init()
    alice = shared.person("alice")
    unknown_host = with_url(shared, "host", f"postgresql://{alice}@no-such-host.invalid:5432/{shared.database}")
    assert "host" in failure(unknown_host).problem
    nothing_there = with_url(shared, "port", f"postgresql://{alice}@127.0.0.1:{free_port()}/{shared.database}")
    error = failure(nothing_there)
    assert "nothing answers" in error.problem and "host and port" in (error.fix or "")
    garbled = with_url(shared, "garbled", f"postgresql://{alice}@127.0.0.1:notaport/{shared.database}")
    error = failure(garbled)
    assert "not a valid libpq URL" in error.problem and "postgresql://USER@HOST" in (error.fix or "")
    no_db = with_url(shared, "nodb", shared.url(alice).replace(shared.database, "no_such_database"))
    assert "does not exist" in failure(no_db).problem
    # Local memory goes on: a memory stored and recalled while the shared database cannot be reached.
    store = store_of(nothing_there)
    memory_id, _ = store.remember("The cache warmer must run before the load test.", kind="gotcha",
                                  project="/work/app")
    assert store.recall("what must run before the load test", project="/work/app")[0].id == memory_id
    assert commands.status(nothing_there.settings, network=False).data["pending"] >= 1


def test_a_wrong_password_names_where_it_belongs_and_is_never_shown(shared: SharedSetup) -> None:
    shared.init()
    mallory = shared.person("mallory")
    with open(shared.passfile, "a") as f:  # a stale line for another role that libpq would pick
        f.write(f"127.0.0.1:{shared.cluster.port}:*:{mallory}x:whatever\n")
    shared.cluster.sql(f"ALTER ROLE {mallory} PASSWORD 'changed-elsewhere'")
    machine = shared.machine("m", mallory)
    error = failure(machine)
    assert "refused the password" in error.problem
    assert "PGPASSWORD" in (error.fix or "") and ".pgpass" in (error.fix or "")
    # A password written into config.toml's URL is refused before anything connects, and never repeated.
    leaky = with_url(shared, "leaky", f"postgresql://{mallory}:hunter2-secret@127.0.0.1:{shared.cluster.port}/"
                                      f"{shared.database}")
    error = failure(leaky)
    assert "holds a password" in error.problem and "hunter2" not in str(error)
    assert "$ENGRAM_HOME/env" in (error.fix or "")
    assert "***" in share_connection.describe("postgresql://u:hunter2@h/db")


def test_the_password_from_engram_home_env_is_used_by_the_cli(shared: SharedSetup) -> None:
    shared.init()
    alice = shared.person("alice")
    machine = shared.machine("cli", alice)
    set_model_meta(machine)
    seed_memories(machine, 3)
    (machine.home / "env").write_text(f"PGPASSWORD={shared.password(alice)}\n")
    (machine.home / "env").chmod(0o600)
    env = {**os.environ, **machine.env(), "PGPASSFILE": str(shared.tmp / "empty-pgpass")}
    env.pop("PGPASSWORD", None)
    pushed = subprocess.run([sys.executable, "-m", "processor.cli", "share", "push"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert pushed.returncode == 0, pushed.stderr
    assert "pushed 3 memories" in pushed.stdout
    (machine.home / "env").write_text("PGPASSWORD=wrong-one\n")
    status = subprocess.run([sys.executable, "-m", "processor.cli", "share", "push"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 1 and "fix:" in status.stderr and "wrong-one" not in status.stderr + status.stdout
    assert "refused the password" in status.stderr


def test_a_server_without_pgvector_or_without_the_right_to_add_it(shared: SharedSetup, pg_cluster) -> None:
    # A database whose server cannot find pgvector at all (its extension folder points nowhere).
    pg_cluster.sql(f"CREATE DATABASE {shared.database}_novector OWNER {shared.owner} TEMPLATE template0")
    pg_cluster.sql(f"ALTER DATABASE {shared.database}_novector SET extension_control_path = '/nonexistent'")
    machine = with_url(shared, "novector", pg_cluster.url(shared.owner, f"{shared.database}_novector"))
    with pytest.raises(ShareError) as raised:
        commands.init(machine.settings)
    assert "no pgvector" in raised.value.problem and "pgvector" in (raised.value.fix or "")
    # A server that has it, in a database without it, for a role that may not create it (not a superuser).
    pg_cluster.sql(f"CREATE DATABASE {shared.database}_plain OWNER {shared.owner} TEMPLATE template0")
    machine = with_url(shared, "plain", pg_cluster.url(shared.owner, f"{shared.database}_plain"))
    with pytest.raises(ShareError) as raised:
        commands.init(machine.settings)
    assert "may not create it" in raised.value.problem and "CREATE EXTENSION vector" in (raised.value.fix or "")
    error = failure(machine)  # a sync before init says what to run
    assert "engram share init" in (error.fix or "")


def test_no_permission_to_create_the_schema(shared: SharedSetup) -> None:
    alice = shared.person("alice", granted=False)
    shared.cluster.sql(f"GRANT CONNECT ON DATABASE {shared.database} TO {alice}")
    shared.cluster.sql(f"REVOKE CREATE ON SCHEMA public FROM PUBLIC; REVOKE CREATE ON DATABASE {shared.database} "
                       f"FROM PUBLIC", database=shared.database)
    machine = shared.machine("a", alice)
    with pytest.raises(ShareError) as raised:
        commands.init(machine.settings)
    assert f"role {alice} may not create Engram's schema" in raised.value.problem
    assert "database owner run `engram share init`" in (raised.value.fix or "")
    # Once the owner ran init and the printed grants, the same person syncs.
    shared.init()
    shared.grant(alice)
    seed_memories(machine, 1)
    sync(machine)


def test_tls_refused_and_tls_verified(shared: SharedSetup) -> None:
    shared.init()
    alice = shared.person("alice")
    # The test server speaks no TLS: sslmode=require is refused, with what to do.
    error = failure(shared.machine("require", alice, sslmode="require"))
    assert "does not accept TLS" in error.problem and "sslmode" in (error.fix or "")
    # Behind a TLS endpoint with a certificate from a CA of its own: verify-full without that CA is refused,
    # naming where the CA goes; with it, the machine syncs.
    ca, cert, key = make_certificates(shared.tmp / "tls")
    front = TlsFront(shared.cluster.port, cert, key)
    try:
        def through_tls(name: str, rootcert: Path) -> Machine:
            url = (f"postgresql://{alice}@127.0.0.1:{front.port}/{shared.database}?sslmode=verify-full"
                   f"&sslnegotiation=direct&sslrootcert={rootcert}")
            with open(shared.passfile, "a") as f:
                f.write(f"127.0.0.1:{front.port}:*:{alice}:{shared.password(alice)}\n")
            return with_url(shared, name, url)

        error = failure(through_tls("unverified", shared.tmp / "missing-ca.pem"))
        assert "certificate" in error.problem and "sslrootcert" in (error.fix or "")
        impostor, _, _ = make_certificates(shared.tmp / "other-ca")
        error = failure(through_tls("impostor", impostor))
        assert "certificate" in error.problem
        verified = through_tls("verified", ca)
        seed_memories(verified, 2)
        sync(verified)
        assert shared.admin_sql("SELECT count(*) FROM engram.memories") == [(2,)]
    finally:
        front.close()


def test_a_clock_hours_off_is_named_and_syncing_goes_on(shared: SharedSetup, monkeypatch: pytest.MonkeyPatch) -> None:
    import processor.share.connection as module

    shared.init()
    alice = shared.person("alice")
    a = shared.machine("a", alice)
    seed_memories(a, 2)
    real = module.now_ms
    monkeypatch.setattr(module, "now_ms", lambda: real() + 3 * 3_600_000)
    sharing = Sharing(a.settings)
    try:
        sharing.sync()
        [warning] = sharing.warnings
    finally:
        sharing.close_all()
    assert "3.0 h ahead" in warning and "timedatectl set-ntp true" in warning
    assert shared.admin_sql("SELECT count(*) FROM engram.memories") == [(2,)]
    assert "3.0 h ahead" in commands.status(a.settings).data["clock"]


def test_two_machines_with_one_machine_id(shared: SharedSetup) -> None:
    shared.init()
    alice = shared.person("alice")
    a = shared.machine("a", alice)
    seed_memories(a, 2)
    sync(a)
    # The home copied to another machine (here: another folder), machine id and all.
    copy = shared.tmp / "home-copy"
    shutil.copytree(a.home, copy)
    clone = Machine("copy", copy, alice, a.url, shared.tmp)
    with pytest.raises(MachineIdTaken) as raised:
        sync(clone)
    assert "already used by another Engram home" in raised.value.problem
    assert "engram share init --new-machine-id" in (raised.value.fix or "")
    sync(a)  # the original goes on
    outcome = commands.init(clone.settings, new_id=True)
    assert outcome.data["machine_id"] != Sharing(a.settings).machine_id
    seed_memories(clone, 1, prefix="fromcopy")
    sync(clone)
    assert shared.admin_sql(f"SELECT count(*) FROM engram.machines WHERE owner = '{alice}'") == [(2,)]


def test_a_project_with_no_git_remote_is_known_by_its_path(shared: SharedSetup, tmp_path: Path) -> None:
    shared.init()
    alice = shared.person("alice")
    shared.team("core", alice)
    a = shared.machine("a", alice)
    folder = tmp_path / "scratch"
    folder.mkdir()
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    set_model_meta(a)
    outcome = commands.share_project(a.settings, str(folder), "core")
    assert outcome.data["has_remote"] is False and outcome.data["project_key"] == f"path:{folder}"
    note = next(line for line in outcome.lines if "no git remote" in line)
    assert "git remote add origin" in note


def test_a_1_mb_memory_stays_local_with_a_message(shared: SharedSetup) -> None:
    shared.init()
    alice = shared.person("alice")
    a = shared.machine("a", alice)
    store = store_of(a)
    big = "Captured log of the outage: " + " ".join(f"line {n} of the incident log" for n in range(40_000))
    assert len(big) > 1_000_000
    big_id, _ = store.remember(big, kind="fact", project="/work/app")
    small_id, _ = store.remember("The outage was caused by an expired TLS certificate on the gateway.",
                                 kind="bugfix", project="/work/app")
    outcome = commands.push(a.settings)
    kept = [line for line in outcome.lines if big_id in line]
    assert kept and "share_max_memory_kb" in kept[0] and "Fix:" in kept[0]
    ids = {r[0] for r in shared.admin_sql("SELECT id FROM engram.memories")}
    assert small_id in ids and big_id not in ids
    status = commands.status(a.settings, network=False)
    assert status.data["kept_local"] == 1
    # `engram doctor` sends the user to `engram share status`, which names the memory and why.
    assert any(big_id in line and "kept here" in line and "share_max_memory_kb" in line for line in status.lines)
    assert store.recall("what caused the outage", project="/work/app")
