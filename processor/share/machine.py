"""Which machine this is: its id in the shared database, its name, and a fingerprint that tells a copy apart.

The id is made once per Engram home and kept in its database. A home copied to another machine (or
another folder) carries the same id; the fingerprint (host name, the home's real path, the OS machine id)
differs there, and the shared database refuses a second fingerprint for one id: two machines must never
write as one.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
from pathlib import Path

_OS_MACHINE_ID = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))


def new_machine_id() -> str:
    return "m_" + secrets.token_hex(8)


def hostname() -> str:
    return socket.gethostname() or "unknown-host"


def fingerprint(home: Path) -> str:
    """What identifies this Engram home on this machine (not secret; compared, never reversed)."""
    os_id = ""
    for path in _OS_MACHINE_ID:
        try:
            os_id = path.read_text(encoding="utf-8").strip()
            break
        except OSError:
            continue
    material = "\0".join([hostname(), os.path.realpath(home), os_id])
    return hashlib.sha256(material.encode()).hexdigest()[:24]
