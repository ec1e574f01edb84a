"""One machine's end of shared memory (`Sharing`: open, push, pull), and the processor's sync thread.

The sync runs in a thread of its own, not as a job type on the LLM worker: that worker runs one LLM call
at a time, often for tens of seconds, and a memory made on one machine must be found on another within
seconds; the sync also waits on the network, which must never hold up a job or the hot path. The thread
owns its SQLite connection and one Postgres connection, on which it LISTENs: another machine's push wakes
it at once. Local changes are looked for every ``share_interval_seconds`` (one indexed read of the outbox).
While the server is down, slow or refusing, local work goes on; the thread retries with a backoff that
doubles up to ``share_backoff_max_seconds``, and the last error with its fix is kept for ``engram status``,
``engram doctor`` and the viewer.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import apsw

from processor.clock import now_ms
from processor.config import Settings, SettingsSource
from processor.memory.episode_store import EpisodeStore
from processor.recall.lesson_index import LessonIndex
from processor.recall.recollections import drop_bites
from processor.share import connection as share_connection
from processor.share import lessons
from processor.share.connection import SharedDatabase
from processor.share.errors import ShareError, explain_connection_error, is_psycopg_error
from processor.share.lessons import Filed
from processor.share.machine import fingerprint, hostname, new_machine_id
from processor.share.postgres import statements as pg
from processor.share.projects import project_key
from processor.share.pull import PullReport, owner_check, pull_new, reconcile_replicas
from processor.share.push import PushReport, push_pending
from processor.store import episodes as episodes_sql
from processor.store import open_store, write_transaction
from processor.store import share as sql

log = logging.getLogger(__name__)

RECONCILE_SECONDS = 600.0  # how often copies of teammates' memories are checked against what is still shared
FULL_PULL_SECONDS = 30.0  # a pull even without a notification (a notification can be lost with a connection)
CONTACT_SECONDS = 60.0  # how often an idle, connected sync notes that it is current (status: "last sync")


def machine_id(conn: apsw.Connection) -> str:
    """This home's machine id, made on first use."""
    current = sql.state(conn).machine_id
    if current:
        return current
    with write_transaction(conn):
        current = sql.state(conn).machine_id or new_machine_id()
        sql.set_machine_id(conn, current)
    return current


@dataclass
class SyncReport:
    push: PushReport
    pull: PullReport


class Sharing:
    """This machine's end of shared memory: its store, its machine id and, once opened, the shared database."""

    def __init__(self, settings: SettingsSource, conn: apsw.Connection | None = None) -> None:
        self._settings = settings
        self.conn = conn if conn is not None else open_store(self.settings.db_path)
        self._owns_conn = conn is None
        self.store = EpisodeStore(settings, self.conn)
        self.db: SharedDatabase | None = None
        self._placed: set[str] = set()  # project roots whose pulled memories were moved to them in this run
        self.machine_id = machine_id(self.conn)
        self.warnings: list[str] = []
        if share_connection.configured(self.settings):
            self.enable()

    def enable(self) -> None:
        """Queue changes from now on (and, the first time, every memory): no server needed for that."""
        if sql.state(self.conn).enabled:
            return
        with write_transaction(self.conn):
            sql.ensure_triggers(self.conn)
            queued = sql.enable(self.conn, now_ms())
        if queued:
            log.info("shared memory on: %d memories queued for their first push", queued)

    @property
    def settings(self) -> Settings:
        return self._settings.current

    def open(self) -> SharedDatabase:
        """Connect, check, register this machine, start queueing changes and mirror teams and machine names."""
        if self.db is not None:
            return self.db
        db = share_connection.connect(self.settings)
        try:
            model = self._model()[0]
            share_connection.check_machine(db, self.machine_id, hostname(), fingerprint(self.settings.home), model)
            warning = share_connection.clock_warning(db)
            if warning:
                log.warning("%s", warning)
                self.warnings.append(str(warning))
            instance = pg.instance_id(db.conn)
            if (sql.triggers_missing(self.conn) or sql.state(self.conn).role != db.role
                    or sql.server_id(self.conn) != instance):
                with write_transaction(self.conn):
                    sql.ensure_triggers(self.conn)
                    sql.set_role(self.conn, db.role)
                    moved = sql.change_server(self.conn, instance)
                if moved:
                    log.warning("shared_database_url now names another shared database (%s): pulling it from the "
                                "start and pushing every memory to it", db.where)
            self.enable()
            self.db = db
            self._refresh_teams(db)
        except BaseException as exc:
            self.db = None
            db.close()
            if is_psycopg_error(exc):
                raise explain_connection_error(exc, db.where) from None
            raise
        return db

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None

    def close_all(self) -> None:
        self.close()
        if self._owns_conn:
            self.conn.close()

    def _model(self) -> tuple[str, int]:
        """(model id, dims) of this machine's vectors: as stored, else the configured model's (recorded now)."""
        model = episodes_sql.get_meta(self.conn, "embedding_model")
        if model is None:
            with write_transaction(self.conn):
                self.store.record_model()
            model = episodes_sql.get_meta(self.conn, "embedding_model")
        return str(model), int(episodes_sql.get_meta(self.conn, "embedding_dim") or 0)

    @contextlib.contextmanager
    def _talking(self) -> Iterator[SharedDatabase]:
        """The open shared database; a failure on it is a ShareError naming its fix, and the connection is
        dropped (the next step reconnects)."""
        db = self.open()
        try:
            yield db
        except ShareError:
            self.close()
            raise
        except Exception as exc:
            if not is_psycopg_error(exc):
                raise
            self.close()
            raise explain_connection_error(exc, db.where) from None

    def refresh_teams(self) -> None:
        """Mirror this person's team projects and machine names; queue memories of a newly shared project."""
        with self._talking() as db:
            self._refresh_teams(db)

    def _refresh_teams(self, db: SharedDatabase) -> None:
        mapping = pg.shared_projects(db.conn)
        names = pg.machines(db.conn)
        if mapping == sql.team_projects(self.conn) and set(names) <= set(sql.machine_names(self.conn)):
            return  # nothing new: no write (the local database may be busy)
        with write_transaction(self.conn):
            before = sql.team_projects(self.conn)
            changed = sql.set_team_projects(self.conn, mapping)
            sql.set_machines(self.conn, names)
            if changed:
                keys = {k for k in set(mapping) | set(before) if mapping.get(k) != before.get(k)}
                roots = [root for root, (key, _) in sql.project_keys(self.conn).items() if key in keys]
                sql.queue(self.conn, sql.memories_of_projects(self.conn, roots), now_ms())

    def push(self, *, max_batches: int | None = None) -> PushReport:
        with self._talking() as db:
            report = push_pending(self.conn, db, self.settings, self.machine_id, max_batches=max_batches)
        if report.forgotten_here:
            drop_bites(self.settings.recollections_dir, set(report.forgotten_here))
        return report

    def learn_projects(self, role: str) -> Filed:
        """Project keys of the projects worked on here (git, once each); memories pulled before a project was
        known here move to its local root (their paths with them), and their failures are filed there. A root is
        looked at once per run of the sync, and again whenever it is new: a push may have learned its key first."""
        filed = Filed()
        known = sql.project_keys(self.conn)
        roots = sql.session_projects(self.conn)
        new = {root: project_key(root) for root in roots if root not in known}
        unchecked = {root: (new.get(root) or known[root])[0] for root in roots if root not in self._placed}
        if not new and not any(sql.replicas_to_relocate(self.conn, key, root) for root, key in unchecked.items()):
            self._placed.update(unchecked)
            return filed  # nothing to write: no lock taken
        stamp = now_ms()
        with write_transaction(self.conn):
            sql.set_applying(self.conn, True)
            owns = owner_check(self.conn, role, {})
            for root, (key, has_remote) in new.items():
                sql.set_project_key(self.conn, root, key, has_remote, stamp)
            for root, key in unchecked.items():
                moving = sql.replicas_to_relocate(self.conn, key, root)
                if moving:
                    lessons.relocated(self.conn, moving, root, owns, stamp, filed)
            sql.queue(self.conn, sorted(filed.queued), stamp)
            sql.set_applying(self.conn, False)
        self._placed.update(unchecked)
        return filed

    def pull(self, *, max_batches: int | None = None) -> PullReport:
        with self._talking() as db:
            relocated = self.learn_projects(db.role)
            model, dims = self._model()
            report = pull_new(self.conn, db, self.settings, self.machine_id, model, dims, self.store.vectors_for,
                              max_batches=max_batches)
            report.filed.roots |= relocated.roots
            if self.settings.share_messages and report.own_from_elsewhere:
                self._pull_messages(db, report.own_from_elsewhere)
        if report.erased:
            drop_bites(self.settings.recollections_dir, set(report.erased))
        self.refresh_lessons(report.filed.roots)
        return report

    def refresh_lessons(self, roots: set[str]) -> None:
        """Rewrite the lesson index of projects whose fixes came from elsewhere: the next failure there (or call, in
        a session already running) is told them, as it would be a fix learned here."""
        index = LessonIndex(self.settings.recollections_dir)
        for root in sorted(roots):
            index.refresh(self.conn, root, root)

    def _pull_messages(self, db: SharedDatabase, memory_ids: list[str]) -> None:
        """The transcript messages of this person's memories made elsewhere (share_messages = true)."""
        rows = []
        for start in range(0, len(memory_ids), 500):
            rows += [(m.memory_id, m.uuid, m.session_id, m.role, m.ts_ms, m.text)
                     for m in pg.pulled_messages(db.conn, memory_ids[start:start + 500])]
        if rows:
            with write_transaction(self.conn):
                sql.save_pulled_messages(self.conn, rows)

    def sync(self) -> SyncReport:
        """Push what waits here, then pull what waits there."""
        return SyncReport(self.push(), self.pull())

    def reconcile(self) -> list[str]:
        with self._talking() as db:
            erased = reconcile_replicas(self.conn, db, self.settings.share_team_replicate)
        if erased:
            log.info("%d copies of teammates' memories erased: no longer shared with this person", len(erased))
            drop_bites(self.settings.recollections_dir, set(erased))
        return erased

    def record_contact(self) -> None:
        with write_transaction(self.conn):
            sql.record_contact(self.conn, now_ms())

    def record_error(self, error: ShareError | None) -> None:
        with write_transaction(self.conn):
            sql.record_error(self.conn, error.problem if error else None, error.fix if error else None, now_ms())


def explain(exc: BaseException, where: str) -> ShareError:
    """Any failure of a sync step as a ShareError (psycopg's, the database's, a bug's)."""
    if isinstance(exc, ShareError):
        return exc
    try:
        import psycopg
    except ImportError:  # pragma: no cover - a dependency
        psycopg = None
    if psycopg is not None and isinstance(exc, psycopg.Error):
        return explain_connection_error(exc, where)
    return ShareError(f"shared memory failed: {type(exc).__name__}: {exc}.", "see the processor's log")


class ShareThread:
    """The running processor's sync: push local changes, pull others', until stopped."""

    def __init__(self, settings: SettingsSource, stop: threading.Event) -> None:
        self._settings = settings
        self._stop = stop
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self.state = "off"  # off | connecting | syncing | waiting | retrying
        self.last_error: str | None = None
        self.synced_at: float | None = None
        self._checked_off = False

    @property
    def settings(self) -> Settings:
        return self._settings.current

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="engram-share", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        sharing: Sharing | None = None
        backoff = 1.0
        try:
            while not self._stop.is_set():
                if not share_connection.configured(self.settings):
                    if sharing is not None or not self._checked_off:
                        sharing = self._off(sharing)
                        self._checked_off = True
                    self._sleep(5.0)
                    continue
                self._checked_off = False
                try:
                    if sharing is None:
                        sharing = Sharing(self._settings)
                    self.state = "connecting" if sharing.db is None else "syncing"
                    self._serve(sharing)
                except Exception as exc:  # every failure: logged once, kept with its fix, retried
                    where = share_connection.describe(self.settings.shared_database_url)
                    error = explain(exc, where)
                    if str(error) != self.last_error:
                        log.error("shared memory: %s", error)
                        if not isinstance(exc, ShareError) and not is_psycopg_error(exc):
                            log.exception("shared memory: unexpected failure")
                    self.last_error = str(error)
                    self.state = "retrying"
                    if sharing is not None:
                        sharing.close()
                        with contextlib.suppress(apsw.Error):
                            sharing.record_error(error)
                    self._sleep(backoff)
                    backoff = min(backoff * 2, self.settings.share_backoff_max_seconds)
                    continue
                backoff = 1.0
        finally:
            if sharing is not None:
                sharing.close_all()
            self.state = "off"

    def _off(self, sharing: Sharing | None) -> None:
        """Not configured (or no longer): stop queueing changes; nothing is lost of what was queued."""
        if sharing is not None:
            sharing.close_all()
        self.state = "off"
        conn = open_store(self.settings.db_path)
        try:
            if sql.state(conn).enabled:
                with write_transaction(conn):
                    sql.disable(conn)
                log.info("shared memory is not configured: changes are no longer queued for it")
        finally:
            conn.close()
        return None

    def _serve(self, sharing: Sharing) -> None:
        """Connected: sync now, then whenever a change waits on either side, until stopped or failing."""
        db = sharing.open()
        pg.listen(db.conn)
        url = self.settings.shared_database_url
        # Read before the sync: a change queued while it runs (the first pull can embed for seconds) is then
        # newer than what was seen, and pushed at the next wake instead of waiting for another change.
        seen_outbox = sql.newest_outbox_seq(sharing.conn)
        sharing.sync()
        if self.last_error is not None:
            log.info("shared memory: connected to %s again", db.where)
        self.last_error = None
        sharing.record_error(None)
        sharing.record_contact()
        self.synced_at = time.monotonic()
        last_pull = last_reconcile = last_contact = time.monotonic()
        while not self._stop.is_set() and self.settings.shared_database_url == url:
            self.state = "waiting"
            notified = False
            for _ in db.conn.notifies(timeout=self.settings.share_interval_seconds, stop_after=1):
                notified = True
            if self._wake.is_set():
                self._wake.clear()
                notified = True
            self.state = "syncing"
            newest = sql.newest_outbox_seq(sharing.conn)
            if newest != seen_outbox:
                seen_outbox = newest  # before the push, for the same reason
                sharing.push()
            now = time.monotonic()
            if notified or now - last_pull >= FULL_PULL_SECONDS:
                sharing.pull()
                last_pull = now
            if now - last_reconcile >= RECONCILE_SECONDS:
                sharing.refresh_teams()
                sharing.reconcile()
                last_reconcile = now
            if now - last_contact >= CONTACT_SECONDS:
                sharing.record_contact()
                last_contact = now
            self.synced_at = time.monotonic()
        sharing.close()

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()
