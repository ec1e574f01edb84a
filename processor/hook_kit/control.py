"""The running processor as a hook reaches it: whether one runs (its instance lock), its endpoint (port and
token, owner-only files in ``run/``), and ``POST /recall`` within a deadline.

Stdlib only, and cheap: the C ``_socket`` module (``socket`` imports enum & co., ~15 ms), a raw HTTP/1.0
request whose every operation waits at most what is left of the budget. The processor's side is
``processor/service/`` (``pidfile``, ``control_files``, ``control_server``); ``pidfile.is_running`` is this
module's ``instance_running``.
"""

import time

if __package__:
    from . import hook_io as _io
else:  # a hook run through its launcher: the kit's folder is on sys.path
    import hook_io as _io

_os = _io.os_api
PID_FILE = "engram.pid"  # processor/service/pidfile.py: the instance lock
PORT_FILE = "engram.port"  # processor/service/control_files.py
TOKEN_FILE = "token"  # processor/service/control_files.py
RESPONSE_LIMIT = 256 * 1024
RECALL_QUERY_CHARS = 4000  # what POST /recall reads of a query (processor/lifecycle.py cuts the rest)
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


def instance_running(pid_path: str) -> bool:
    """Whether some process holds the instance lock on `pid_path` right now (one open, one flock)."""
    import fcntl

    try:
        fd = _os.open(pid_path, _os.O_RDONLY | getattr(_os, "O_NOFOLLOW", 0) | getattr(_os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        # A shared probe succeeds only if nobody holds the exclusive lock; it is dropped at close.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        _os.close(fd)
    return False


def _private_text(path: str) -> str | None:
    """An owner-only regular file's text (not a symlink, no group/other bits), else None."""
    flags = _os.O_RDONLY | getattr(_os, "O_NOFOLLOW", 0) | getattr(_os, "O_CLOEXEC", 0)
    try:
        fd = _os.open(path, flags)
    except OSError:
        return None
    try:
        st = _os.fstat(fd)
        if not _io.is_regular(st.st_mode) or st.st_uid != _os.getuid() or st.st_mode & 0o077:
            return None
        return _os.read(fd, 4096).decode("ascii", "replace").strip()
    finally:
        _os.close(fd)


def endpoint(run_dir: str) -> tuple[int, str] | None:
    """(port, token) of the processor running for `run_dir`; None when none runs: the token is never sent to a
    port a dead processor left behind."""
    port_text = _private_text(f"{run_dir}/{PORT_FILE}")
    if not port_text or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    token = _private_text(f"{run_dir}/{TOKEN_FILE}")
    if not token or not 32 <= len(token) <= 256 or not _TOKEN_CHARS.issuperset(token):
        return None
    if not instance_running(f"{run_dir}/{PID_FILE}"):
        return None
    return int(port_text), token


def _socket_module():  # the C module: `socket` imports enum & co., ~15 ms
    try:
        import _socket

        return _socket
    except ImportError:
        import socket

        return socket


def post_recall(port: int, token: str, body: bytes, deadline: float) -> object:
    """POST /recall; the decoded JSON answer, or None on any failure or when the deadline (time.monotonic())
    passes."""
    sock_mod = _socket_module()
    request = (
        f"POST /recall HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode("ascii") + body

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("prompt_submit budget spent")
        return left

    sock = sock_mod.socket(sock_mod.AF_INET, sock_mod.SOCK_STREAM)
    try:
        sock.settimeout(remaining())
        sock.connect(("127.0.0.1", port))
        sock.settimeout(remaining())
        sock.sendall(request)
        chunks = []
        total = 0
        while True:  # HTTP/1.0: the server closes the connection after the answer
            sock.settimeout(remaining())
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > RESPONSE_LIMIT:
                return None
    finally:
        sock.close()
    head, sep, payload = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if not sep or len(status) < 2 or status[1] != b"200":
        return None
    return _io.loads(payload.decode("utf-8"))
