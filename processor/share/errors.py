"""What went wrong with the shared database, in one line with its fix; and URLs with their passwords taken out.

Every message the sync layer logs, stores or prints goes through ``redact_secrets`` first: a libpq URL may
carry a password (from the environment), and error texts may quote the URL.
"""

from __future__ import annotations

import re

_URL_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@\s]*):[^@\s]*@", re.IGNORECASE)
_KEYWORD_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&\s]*", re.IGNORECASE)

PASSWORD_FIX = ("put the password in $ENGRAM_HOME/env as PGPASSWORD=… (mode 600), or a line "
                "host:port:database:user:password in ~/.pgpass (chmod 600); never in config.toml")


def redact_secrets(text: str) -> str:
    """The text with any password in a connection URL or keyword string replaced by ***."""
    text = _URL_PASSWORD.sub(r"\1:***@", text)
    text = _QUERY_PASSWORD.sub(r"\1***", text)
    return _KEYWORD_PASSWORD.sub(r"\1***", text)


class ShareError(Exception):
    """A problem with shared memory: what happened, and what to do about it (never a password)."""

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = redact_secrets(" ".join(problem.split()))
        self.fix = redact_secrets(fix) if fix else None
        super().__init__(self.problem + (f" Fix: {self.fix}" if self.fix else ""))


class SchemaTooNew(ShareError):
    """The shared database's schema is newer than this Engram: nothing is read or written."""


class MachineIdTaken(ShareError):
    """Another machine (a copied Engram home) registered this machine's id."""


def is_psycopg_error(exc: BaseException) -> bool:
    """Raised by psycopg or its pool (the driver or the server), asked without importing psycopg."""
    return type(exc).__module__.startswith("psycopg")


def explain_connection_error(exc: BaseException, where: str) -> ShareError:
    """A psycopg error met while connecting or syncing, as a ShareError naming the fix."""
    import psycopg

    text = redact_secrets(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    whole = str(exc)
    low = whole.lower()
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return ShareError(f"the role may not do this on {where}: {text}.",
                          "ask the database owner to run `engram share init` once and the grants it prints "
                          "(`engram share init --grants-for ROLE`)")
    if "password authentication failed" in low or "no password supplied" in low:
        return ShareError(f"{where} refused the password: {text}.", PASSWORD_FIX)
    if "server does not support ssl" in low or "ssl was required" in low:
        return ShareError(f"{where} does not accept TLS connections: {text}.",
                          "enable TLS on the server (managed databases have it), or, only for a database on "
                          "this machine or a private network, set sslmode=disable in shared_database_url")
    if "root certificate" in low or "certificate verify failed" in low or "ssl" in low and "certif" in low:
        return ShareError(f"cannot verify {where}'s TLS certificate: {text}.",
                          "download your provider's CA certificate and name it in the URL "
                          "(?sslmode=verify-full&sslrootcert=/path/to/ca.pem), or put it in ~/.postgresql/root.crt")
    if "could not translate host name" in low or "name or service not known" in low or "nodename nor" in low:
        return ShareError(f"the host of {where} is unknown: {text}.",
                          "check the host name in shared_database_url (config.toml or ENGRAM_SHARED_DATABASE_URL)")
    if "connection refused" in low:
        return ShareError(f"nothing answers at {where}: {text}.",
                          "check the host and port in shared_database_url, and that the server runs and accepts "
                          "TCP connections (listen_addresses, pg_hba.conf, a firewall)")
    if "timeout expired" in low or "timed out" in low or "canceling statement due to statement timeout" in low:
        return ShareError(f"{where} did not answer in time: {text}.",
                          "local memory goes on meanwhile; check the network or the server's load "
                          "(the processor retries with a bounded backoff)")
    if "does not exist" in low and "database" in low:
        return ShareError(f"{text}.", "create the database (CREATE DATABASE …) or fix its name in "
                                      "shared_database_url")
    if "role" in low and "does not exist" in low:
        return ShareError(f"{text}.", "ask the database owner to create your role with the grants printed by "
                                      "`engram share init --grants-for ROLE`")
    if "no pg_hba.conf entry" in low:
        return ShareError(f"{where} does not let this machine in: {text}.",
                          "ask the database owner to add a pg_hba.conf line for your role and address")
    if "invalid connection option" in low or "invalid uri" in low or "missing \"=\"" in low or \
            "invalid integer value" in low or "invalid sslmode" in low or "invalid dsn" in low:
        return ShareError(f"shared_database_url is not a valid libpq URL: {text}.",
                          "write it as postgresql://USER@HOST:5432/DATABASE?sslmode=verify-full")
    if isinstance(exc, psycopg.OperationalError):
        return ShareError(f"lost the connection to {where}: {text}.",
                          "local memory goes on meanwhile; the processor reconnects with a bounded backoff "
                          "(`engram share status` shows the last error)")
    return ShareError(f"{where}: {text}.", None)
