"""Opening the shared database: the URL from the settings, the checks that must pass before any row moves.

``shared_database_url`` is a libpq URL (``postgresql://alice@db.example.com:5432/engram?sslmode=verify-full``).
Its password never sits in ``config.toml`` (refused there): libpq reads ``PGPASSWORD`` (the processor loads
``$ENGRAM_HOME/env``) or ``~/.pgpass``. Before a sync, the server must have pgvector ≥ 0.7, a schema this
client knows (a newer one is refused: nothing is read or written), and this machine's id must be its own.
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from processor.clock import now_ms
from processor.config import Settings, read_config_file
from processor.share.errors import (
    PASSWORD_FIX,
    MachineIdTaken,
    SchemaTooNew,
    ShareError,
    explain_connection_error,
    redact_secrets,
)
from processor.share.postgres import migrations as schema
from processor.share.postgres import statements as pg

log = logging.getLogger(__name__)

MIN_VECTOR = (0, 7)
CLOCK_SKEW_WARN_MS = 5 * 60 * 1000
STATEMENT_TIMEOUT_MS = 30_000
_KEYWORD_DSN = re.compile(r"^\s*\w+\s*=")


def configured(settings: Settings) -> bool:
    return bool(settings.shared_database_url.strip())


def database_url(settings: Settings) -> str:
    """The configured URL; refused when config.toml holds a password (it belongs in the environment)."""
    url = settings.shared_database_url.strip()
    if not url:
        raise ShareError("shared memory is not configured.",
                         "set shared_database_url = \"postgresql://USER@HOST:5432/DATABASE?sslmode=verify-full\" in "
                         "$ENGRAM_HOME/config.toml (docs/shared-memory.md)")
    try:
        in_file = str(read_config_file(settings.config_path).get("shared_database_url") or "")
    except Exception:  # a broken config.toml is reported where settings are loaded
        in_file = ""
    if in_file and has_password(in_file):
        raise ShareError(f"shared_database_url in {settings.config_path} holds a password.",
                         "remove it from the URL; " + PASSWORD_FIX)
    return url


def has_password(url: str) -> bool:
    if _KEYWORD_DSN.match(url):
        return bool(re.search(r"\bpassword\s*=", url, re.IGNORECASE))
    try:
        parts = urlsplit(url)
        return bool(parts.password) or "password=" in parts.query.lower()
    except ValueError:
        return False


def describe(url: str) -> str:
    """The URL for messages: its password (if any) replaced by ***."""
    return redact_secrets(url)


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


@dataclass
class SharedDatabase:
    """An open connection to the shared database, checked: pgvector, the schema version, the role."""

    conn: Any  # psycopg.Connection, autocommit (each step opens its own transaction)
    where: str
    role: str
    schema_version: int
    vector_version: tuple[int, ...]
    clock_skew_ms: int

    _messages_granted: bool | None = None

    def messages_granted(self, probe: Any) -> bool:
        """Whether this role may write the messages table (probed once per connection)."""
        if self._messages_granted is None:
            self._messages_granted = bool(probe(self.conn))
        return self._messages_granted

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection
            self.conn.close()


def connect(settings: Settings, *, require_schema: bool = True) -> SharedDatabase:
    """Open and check the shared database; every failure is a ShareError naming its fix.

    require_schema=False is for `engram share init`, which creates or upgrades the schema itself.
    """
    import psycopg

    url = database_url(settings)
    where = describe(url)
    try:
        timeout = max(1, int(settings.share_connect_timeout_seconds))
        conn = psycopg.connect(url, autocommit=True, connect_timeout=timeout, application_name="engram",
                               keepalives=1, keepalives_idle=30, keepalives_interval=10, keepalives_count=3)
    except psycopg.Error as exc:
        raise explain_connection_error(exc, where) from None
    except Exception as exc:  # a URL psycopg cannot even parse
        raise ShareError(f"shared_database_url is not a valid libpq URL ({type(exc).__name__}: {exc}).",
                         "write it as postgresql://USER@HOST:5432/DATABASE?sslmode=verify-full") from None
    try:
        return _checked(conn, settings, where, require_schema)
    except ShareError:
        conn.close()
        raise
    except psycopg.Error as exc:
        conn.close()
        raise explain_connection_error(exc, where) from None


def _checked(conn: Any, settings: Settings, where: str, require_schema: bool) -> SharedDatabase:
    from pgvector.psycopg import register_vector

    conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
    with conn.cursor() as cur:
        installed, available = schema.extension_state(cur)
        required = schema.required_versions(cur)
        versions = schema.applied_versions(cur)
    if installed is None and (require_schema or available is None):
        if available is None:
            raise ShareError(f"the server at {where} has no pgvector extension.",
                             "use a PostgreSQL with pgvector ≥ 0.7 (managed services: enable the `vector` "
                             "extension; self-hosted: install postgresql-NN-pgvector), then run `engram share init`")
        raise ShareError(f"the database at {where} does not have the `vector` extension yet.",
                         "run `engram share init` (it creates it; a self-hosted server needs a superuser for "
                         "CREATE EXTENSION vector)")
    if installed is not None and parse_version(installed) < MIN_VECTOR:
        raise ShareError(f"the server's pgvector is {installed}; shared memory needs 0.7 or later.",
                         "upgrade pgvector on the server, then run ALTER EXTENSION vector UPDATE")
    newest = max(versions) if versions else 0
    # Only a migration a client must know makes the schema too new: an additive one (a column older clients
    # neither send nor read) leaves them working.
    if required and max(required) > schema.latest_version():
        raise SchemaTooNew(f"the shared database at {where} has schema version {max(required)}; this Engram knows "
                           f"up to version {schema.latest_version()} and will not read or write it.",
                           "upgrade Engram on this machine (another machine's newer Engram upgraded the database)")
    if require_schema and schema.missing_versions(versions):
        if not versions:
            raise ShareError(f"the shared database at {where} has no Engram schema yet.",
                             "run `engram share init` once (as the database owner, or a role that may create a "
                             "schema), then the grants it prints")
        raise ShareError(f"the shared database at {where} has schema version {newest}; this Engram needs "
                         f"version {schema.latest_version()}.", "run `engram share init` to upgrade it")
    if installed is not None:
        vector_home = pg.vector_schema(conn)
        if vector_home:
            pg.set_search_path(conn, vector_home)
        register_vector(conn)
    skew = now_ms() - pg.server_clock_ms(conn)
    return SharedDatabase(conn, where, pg.current_role(conn), newest,
                          parse_version(installed) if installed else (), skew)


def prepare(conn: Any) -> None:
    """Ready a pooled connection (team search): timeouts, pgvector's types, and a schema this client knows."""
    from pgvector.psycopg import register_vector

    conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
    with conn.cursor() as cur:
        required = schema.required_versions(cur)
        versions = schema.applied_versions(cur)
    if not versions or schema.missing_versions(versions) or max(required, default=0) > schema.latest_version():
        raise ShareError("the shared database's schema is not the one this Engram knows.",
                         "run `engram share status` (it says which side to upgrade)")
    vector_home = pg.vector_schema(conn)
    if vector_home:
        pg.set_search_path(conn, vector_home)
    register_vector(conn)


def clock_warning(db: SharedDatabase) -> ShareError | None:
    """A clock hours off does not break syncing (order is the server's sequence), but dates made here are off:
    a warning (never raised), whose text is the problem and its fix."""
    if abs(db.clock_skew_ms) < CLOCK_SKEW_WARN_MS:
        return None
    hours = db.clock_skew_ms / 3_600_000
    side = "ahead of" if hours > 0 else "behind"
    return ShareError(f"this machine's clock is {abs(hours):.1f} h {side} the shared database's; changes are still "
                      f"ordered by the server's sequence, but the dates of memories made here are off.",
                      "turn on time sync (timedatectl set-ntp true; macOS: System Settings > General > Date & Time)")


def check_machine(db: SharedDatabase, machine_id: str, hostname: str, fingerprint: str, model: str | None) -> None:
    """Register this machine under its id, or refuse when the id is another machine's."""
    import psycopg

    try:
        with db.conn.transaction():
            existing = pg.machine_registration(db.conn, machine_id)
            if existing is not None and existing[0] != fingerprint:
                raise MachineIdTaken(
                    f"machine id {machine_id} is already used by another Engram home ({existing[1]}); two machines "
                    f"must not share one (was this Engram home copied?). Nothing was synced.",
                    "on the copy, run `engram share init --new-machine-id`; if this is the same home moved to a new "
                    "path or renamed host, run `engram share init --claim-machine-id`")
            pg.register_machine(db.conn, machine_id, hostname, fingerprint, model)
    except psycopg.errors.InsufficientPrivilege as exc:
        if "row-level security" not in str(exc):
            raise explain_connection_error(exc, db.where) from None
        # The id is registered by another role: its row is invisible here, and its update refused.
        raise MachineIdTaken(f"machine id {machine_id} belongs to another person's machine; nothing was synced.",
                             "run `engram share init --new-machine-id`") from None
