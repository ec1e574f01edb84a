"""Whether a folder is an earlier Engram's data home (``~/.engram``, from before the data moved to the platform's
place), never another program's folder of that name.

Its database carries Engram's application_id; or, from before the id existed, it has none and sits next to the
``recollections/`` and ``queue/`` folders only Engram makes (the store then checks its migrations table before
stamping it). Any other database there is another program's. One rule for the hooks and the processor
(``processor.config``): both must find the same data home.

Stdlib only. Not on a hook's common path: asked only while the platform's folder does not exist.
"""

try:
    import posix as _os  # built in: see hook_io
except ImportError:  # not a POSIX system
    import os as _os

APPLICATION_ID = 0x456E6772  # the SQLite application_id of Engram's database ("Engr")
SQLITE_MAGIC = b"SQLite format 3\x00"
_S_IFMT = 0o170000
_S_IFDIR = 0o040000


def _is_dir(path: str) -> bool:
    try:
        return _os.stat(path).st_mode & _S_IFMT == _S_IFDIR
    except OSError:
        return False


def _header(path: str) -> bytes | None:
    """The file's first 72 bytes (a SQLite header's length), None when it cannot be read."""
    try:
        fd = _os.open(path, _os.O_RDONLY | getattr(_os, "O_NONBLOCK", 0) | getattr(_os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        return _os.read(fd, 72)
    except OSError:
        return None
    finally:
        _os.close(fd)


def sqlite_application_id(path: str) -> int | None:
    """The application_id in a SQLite file's header (bytes 68-71); None when it is missing or not SQLite."""
    header = _header(path)
    if header is None or len(header) < 72 or not header.startswith(SQLITE_MAGIC):
        return None
    return int.from_bytes(header[68:72], "big")


def is_earlier_engram_home(folder: str) -> bool:
    """Whether ``folder`` was written by an earlier Engram (see the module docstring)."""
    if not _is_dir(folder):
        return False
    db = folder + "/engram.db"
    app_id = sqlite_application_id(db)
    if app_id == APPLICATION_ID:
        return True
    if app_id is not None and app_id != 0:
        return False  # another program's SQLite file
    if app_id is None and _header(db):
        return False  # a file with bytes that are not SQLite (a 0-byte file is one Engram created and never wrote)
    return _is_dir(folder + "/recollections") and _is_dir(folder + "/queue")
