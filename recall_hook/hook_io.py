"""What every Engram hook shares: reading the event and Engram's files, the fence, and the answer.

Stdlib only, and careful about it: a hook's whole-process time is its cost, so this module avoids
even ``os`` and ``json`` (``json`` pulls in ``re``/``enum``, which alone doubles interpreter
start-up). It uses the built-in ``posix`` module and the ``_json`` C accelerator, with plain
``os``/``json`` as a fallback. Imported as ``recall_hook.hook_io`` from the processor and tests, and
as plain ``hook_io`` by hooks run through their launchers (which put this folder on ``sys.path``).
"""

import sys

try:
    import posix as _os  # built in and already loaded: importing `os` costs ~1.5 ms more
except ImportError:  # not a POSIX system
    import os as _os

# The registered command: `python -I -S -c LAUNCHER /abs/path/pretooluse.py`. -I leaves the
# script's directory off sys.path, so the launcher puts it back and imports this module.
FENCE_OPEN = "<engram-recollection>"
FENCE_CLOSE = "</engram-recollection>"


def fence(text: str) -> str:
    """The marker around every text Engram injects: capture drops what is inside it, so Engram never
    captures, and so never remembers, its own recollections."""
    return f"{FENCE_OPEN}\n{text}\n{FENCE_CLOSE}"

STDIN_LIMIT = 1 << 20  # a Write of a huge file makes a huge event; skip it, the next call injects
RECOLLECTION_LIMIT = 64 * 1024
STATE_LIMIT = 4 * 1024
# The operating system module: the built-in posix where there is one (see the module docstring).
os_api = _os

LOCK_NAME = ".pretooluse.lock"  # leading dot: never mistaken for a recollection file

_SESSION_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
_WHITESPACE = " \t\n\r"
_S_IFMT = 0o170000
_S_IFREG = 0o100000


def is_regular(st_mode: int) -> bool:
    """stat.S_ISREG without importing stat."""
    return st_mode & _S_IFMT == _S_IFREG


def _reject_constant(name: str) -> None:
    raise ValueError(name)  # NaN/Infinity are not JSON


try:
    import _json

    class _ScanContext:
        # The attributes _json.make_scanner reads; same values as json.JSONDecoder's defaults.
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = staticmethod(_reject_constant)

    _scan = _json.make_scanner(_ScanContext())
    quote = _json.encode_basestring_ascii

    def loads(text: str) -> object:
        text = text.strip(_WHITESPACE)
        value, end = _scan(text, 0)  # StopIteration / JSONDecodeError on bad input
        if end != len(text):
            raise ValueError("trailing data")
        return value

except (ImportError, AttributeError, TypeError):  # not CPython: take the slow, plain route
    import json as _json_module

    def loads(text: str) -> object:
        return _json_module.loads(text, parse_constant=_reject_constant)

    def quote(text: str) -> str:
        return _json_module.dumps(text)


def getenv(name: str) -> str | None:
    env = _os.environ
    if _os.__name__ == "posix":  # posix.environ is bytes -> bytes
        value = env.get(name.encode())
        return None if value is None else value.decode("utf-8", "surrogateescape")
    return env.get(name)


def user_home() -> str | None:
    home = getenv("HOME")
    if home:
        return home
    try:
        import pwd

        return pwd.getpwuid(_os.getuid()).pw_dir
    except (ImportError, KeyError, AttributeError):
        return None


APPLICATION_ID = 0x456E6772  # processor.config.APPLICATION_ID
LEGACY_HOME = "/.engram"  # processor.config.LEGACY_HOME
_S_IFDIR = 0o040000


def _is_dir(path: str) -> bool:
    try:
        return _os.stat(path).st_mode & _S_IFMT == _S_IFDIR
    except OSError:
        return False


def _exists(path: str) -> bool:
    try:
        _os.stat(path)
        return True
    except OSError:
        return False


def _app_id_of(header: bytes) -> int | None:
    if len(header) < 72 or not header.startswith(b"SQLite format 3\x00"):
        return None
    return int.from_bytes(header[68:72], "big")


def _read_header(path: str) -> bytes | None:
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


def _earlier_engram_home(folder: str) -> bool:
    """processor.config.is_earlier_engram_home: an earlier Engram's ~/.engram, never another program's."""
    if not _is_dir(folder):
        return False
    db = folder + "/engram.db"
    header = _read_header(db)
    app_id = None if header is None else _app_id_of(header)
    if app_id == APPLICATION_ID:
        return True
    if app_id is not None and app_id != 0:
        return False
    if app_id is None and header:  # a file with bytes that are not SQLite
        return False
    return _is_dir(folder + "/recollections") and _is_dir(folder + "/queue")


def data_home() -> str | None:
    """$ENGRAM_HOME, else the platform's data folder, else an earlier Engram's ~/.engram: as processor.config."""
    root = getenv("ENGRAM_HOME")
    if root:
        if root == "~" or root.startswith("~/"):
            home = user_home()
            if home is None:
                return None
            root = home + root[1:]
        elif root.startswith("~"):
            import pwd

            user, _, rest = root[1:].partition("/")
            root = pwd.getpwnam(user).pw_dir + ("/" + rest if rest else "")
        return root.rstrip("/") or "/"
    home = user_home()
    if home is None:
        return None
    home = home.rstrip("/")
    if sys.platform == "darwin":
        default = home + "/Library/Application Support/engram"
    else:
        data = getenv("XDG_DATA_HOME") or ""
        default = (data.rstrip("/") if data.startswith("/") else home + "/.local/share") + "/engram"
    if not _exists(default) and _earlier_engram_home(home + LEGACY_HOME):
        return home + LEGACY_HOME
    return default


def recollections_dir() -> str | None:
    """$ENGRAM_HOME/recollections, with the data home resolved exactly like processor.config."""
    root = data_home()
    return None if root is None else root.rstrip("/") + "/recollections"


OFF_ENV = "ENGRAM_OFF"  # processor/capture/optout.py: set when starting Claude Code, no memory for its sessions
OFF_SUFFIX = ".off"  # <session>.off: the session opted out (written by the processor or the SessionStart hook)


def env_opt_out() -> str | None:
    """processor.capture.optout.env_level of $ENGRAM_OFF: None, 'memory' or 'record'."""
    value = getenv(OFF_ENV)
    if value is None:
        return None
    text = value.strip().lower().replace("-", "_")
    if text in ("", "0", "false", "no"):
        return None
    return "record" if text in ("record", "off_the_record") else "memory"


def opted_out(directory: str, session_id: str) -> bool:
    """No memory for this session: $ENGRAM_OFF, or its opt-out recorded as <session>.off."""
    return env_opt_out() is not None or _exists(f"{directory}/{session_id}{OFF_SUFFIX}")


def valid_session_id(value: object) -> bool:
    # Session ids become file names: no separators, no "..", no hidden files, bounded length.
    return (
        isinstance(value, str)
        and 0 < len(value) <= 128
        and value[0] != "."
        and _SESSION_CHARS.issuperset(value)
    )


def read_limited(path: str, limit: int) -> bytes | None:
    """The file's bytes if it is a regular file of at most `limit` bytes, else None."""
    # O_NONBLOCK: a FIFO planted at the path must not hang the hook (ignored for regular files).
    fd = _os.open(path, _os.O_RDONLY | getattr(_os, "O_NONBLOCK", 0) | getattr(_os, "O_CLOEXEC", 0))
    try:
        st = _os.fstat(fd)
        if not is_regular(st.st_mode) or st.st_size > limit:
            return None
        chunks = []
        total = 0
        while True:
            chunk = _os.read(fd, limit + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # grew since fstat
                return None
        return b"".join(chunks)
    finally:
        _os.close(fd)


def read_tail(path: str, limit: int) -> bytes:
    """The last `limit` bytes of a regular file (b"" for anything else, or a file that cannot be read)."""
    try:
        fd = _os.open(path, _os.O_RDONLY | getattr(_os, "O_NONBLOCK", 0) | getattr(_os, "O_CLOEXEC", 0))
    except OSError:
        return b""
    try:
        st = _os.fstat(fd)
        if not is_regular(st.st_mode):
            return b""
        start = max(0, st.st_size - limit)
        chunks, total = [], 0
        while total < limit:
            chunk = _os.pread(fd, limit - total, start + total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    except OSError:
        return b""
    finally:
        _os.close(fd)


def load_json_file(path: str, limit: int) -> object:
    data = read_limited(path, limit)
    return None if data is None else loads(data.decode("utf-8"))


def newest_session(directory: str) -> str | None:
    """The session of the newest recollection file: the hooks' fallback when Claude Code names none."""
    best_name = None
    best_mtime = -1
    with _os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            if not name.endswith(".json") or name.startswith("."):
                continue
            try:
                mtime = entry.stat().st_mtime_ns
            except OSError:
                continue
            if mtime > best_mtime:
                best_name, best_mtime = name, mtime
    if best_name is None:
        return None
    session_id = best_name[:-5]
    return session_id if valid_session_id(session_id) else None


def one_line(text: str, limit: int) -> str:
    # One line per bite, and a bite can never close (or reopen) the fence around it.
    text = " ".join(text.replace(FENCE_OPEN, "").replace(FENCE_CLOSE, "").split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


CONFIG_LIMIT = 256 * 1024
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def config_value(home: str, name: str) -> object:
    """`name` from $ENGRAM_HOME/config.toml; None when absent, unreadable or not TOML."""
    try:
        data = read_limited(home + "/config.toml", CONFIG_LIMIT)
    except OSError:
        return None
    if data is None:
        return None
    import tomllib  # only when there is a config file: ~8 ms

    try:
        return tomllib.loads(data.decode("utf-8")).get(name)
    except (ValueError, UnicodeDecodeError):
        return None


def flag(value: object) -> bool | None:
    """A boolean setting's value from TOML or the environment (1/true/yes/on, 0/false/no/off)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE:
        return True
    if isinstance(value, str) and value.strip().lower() in _FALSE:
        return False
    return None


SHOW_INJECTED_ENV = "ENGRAM_SHOW_INJECTED"
SHOW_INJECTED_DEFAULT = True  # processor.config Settings.show_injected (pinned by tests/test_config.py)
SHOWN_IDS = 3  # ids named in the user's line; the rest are counted


def show_injected(home: str | None) -> bool:
    """The `show_injected` setting: environment first, then config.toml, then the default."""
    from_env = flag(getenv(SHOW_INJECTED_ENV))
    if from_env is not None:
        return from_env
    from_file = flag(config_value(home, "show_injected")) if home else None
    return SHOW_INJECTED_DEFAULT if from_file is None else from_file


def injected_line(ids: list[str]) -> str:
    """The one line the user sees: "Engram: 2 memories — ep_1, ep_2" (more than SHOWN_IDS: "+N more")."""
    noun = "memory" if len(ids) == 1 else "memories"
    shown = ", ".join(ids[:SHOWN_IDS])
    more = f" +{len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
    return f"Engram: {len(ids)} {noun} — {shown}{more}"


def hook_json(event: str, context: str, ids: list[str], home: str | None) -> str:
    """The hook's stdout: additionalContext for the model, and the injected-memories line for the user."""
    out = '{"hookSpecificOutput":{"hookEventName":"' + event + '","additionalContext":' + quote(context) + "}"
    if ids and show_injected(home):
        # systemMessage is shown to the user in the terminal, never sent to the model.
        out += ',"systemMessage":' + quote(injected_line(ids))
    return out + "}"


def _read_text(path: str, limit: int = 4096) -> str | None:
    try:
        data = read_limited(path, limit)
    except OSError:
        return None
    return None if data is None else data.decode("utf-8", "replace")


def _common_dir(dot_git: str) -> str | None:
    import os.path

    if os.path.isdir(dot_git):
        return dot_git
    text = _read_text(dot_git)  # a worktree's .git file: "gitdir: <repo>/.git/worktrees/<name>"
    first = text.splitlines()[0] if text else ""
    if not first.startswith("gitdir:"):
        return None
    git_dir = first[len("gitdir:"):].strip()
    if not git_dir.startswith("/"):
        git_dir = os.path.dirname(dot_git) + "/" + git_dir
    common = _read_text(git_dir + "/commondir")
    if common is None:
        return git_dir
    common = common.strip()
    return common if common.startswith("/") else git_dir + "/" + common


def project_root(cwd: str) -> str:
    """The repository root for cwd (shared by its worktrees), else cwd itself."""
    import os.path

    if not cwd.startswith("/") or not os.path.exists(cwd):
        return cwd
    folder = os.path.normpath(cwd)
    if folder.startswith("//"):
        folder = "/" + folder.lstrip("/")
    while True:
        dot_git = folder.rstrip("/") + "/.git"
        if os.path.lexists(dot_git):
            common = _common_dir(dot_git)
            if common is None:
                return folder
            common = os.path.normpath(common)
            return os.path.dirname(common) if os.path.basename(common) == ".git" else common
        if folder == "/":
            return cwd
        folder = os.path.dirname(folder)



MAX_BITES = 10
MAX_BITE_CHARS = 600
MAX_ID_CHARS = 128


def bite_id(bite: object) -> str:
    return bite["id"] if isinstance(bite, dict) and isinstance(bite.get("id"), str) else ""


def bite_line(bite: object) -> str | None:
    """One bite of a recollection file as the line the agent reads; None for a malformed bite."""
    if not isinstance(bite, dict):
        return None
    bite_id = bite.get("id")
    text = bite.get("bite")
    date = bite.get("date")
    importance = bite.get("importance")
    if not (isinstance(bite_id, str) and isinstance(text, str) and isinstance(date, str)):
        return None
    if importance not in ("high", "normal"):
        return None
    # The id is passed back verbatim to memory_expand: one that would need cleaning is unusable.
    if not bite_id or len(bite_id) > MAX_ID_CHARS or one_line(bite_id, MAX_ID_CHARS) != bite_id:
        return None
    text = one_line(text, MAX_BITE_CHARS)
    if not text:
        return None
    date = one_line(date, 32)
    if len(date) >= 10 and date[4:5] == "-" and date[7:8] == "-":
        date = date[:10]  # a datetime is shown as its day
    return f"- [{date or 'undated'}, {importance}] {text} (id: {bite_id})"


# The tools' full names as Claude Code lists them: it defers MCP tools behind ToolSearch, where
# the model finds a tool by the name it was told, so the bare "memory_expand" is not enough.
EXPAND_TOOL = "mcp__engram__memory_expand"
RECALL_TOOL = "mcp__engram__memory_recall"
# The agents a hook is registered for (processor/capture/formats.py AGENTS): the registered command names its
# agent after the script (`… pretooluse.py codex`); none named is Claude Code.
AGENTS = ("claude", "codex", "gemini")


def agent() -> str:
    """The agent this hook process was registered for: the argument after the script, else Claude Code."""
    named = sys.argv[2] if len(sys.argv) > 2 else ""
    return named if named in AGENTS else "claude"


def tool_name(tool: str, for_agent: str = "claude") -> str:
    """An Engram MCP tool's name as the agent shows it to its model: Claude Code and the Codex CLI
    ``mcp__engram__memory_expand``, the Gemini CLI ``mcp_engram_memory_expand``."""
    return f"mcp_engram_{tool}" if for_agent == "gemini" else f"mcp__engram__{tool}"


def format_context(lines: list[str], for_agent: str = "claude") -> str:
    expand = tool_name("memory_expand", for_agent)
    body = "\n".join(
        [
            "You have memories related to this conversation:",
            *lines,
            f"If any of these are relevant, call {expand}(id) (the engram MCP server's memory_expand)"
            " with its id for the full context. Otherwise, continue your work.",
        ]
    )
    return fence(body)


def format_call_context(target: str, lines: list[str], for_agent: str = "claude", *, after: bool = False) -> str:
    """What earlier sessions left about the file or command a tool call is about to work on (or, where the
    agent reads a hook's context only after the call, just worked on)."""
    body = "\n".join([
        f"{'About' if after else 'Before'} this call on {target}: an earlier session left these about it:",
        *lines,
        f"Call {tool_name('memory_expand', for_agent)}(id) for the full context if one applies. Otherwise, continue "
        "your work.",
    ])
    return fence(body)


# --- what the session's digest showed: the bites leave those memories out ------------------------

SESSION_START_BUDGET_DEFAULT = 1500  # processor.config Settings.session_start_token_budget (pinned by tests)
DIGEST_SUFFIX = ".digest"  # <session>.digest: {"shown": [ids], "text", "at"}, by the SessionStart hook
DIGEST_IDS = 200


def write_digest_ids(directory: str, session_id: str, ids: list[str], text: str = "") -> None:
    """Record what the session's digest showed: its ids (the recollection writer leaves them out of
    bites) and its text and time (the processor records the injection for the viewer).

    A complete temp file renamed into place (readers never see half of it). A resume, clear or
    compact writes the file again with what that digest showed.
    """
    import time  # built in: no file to load

    data = ('{"shown":[' + ",".join(quote(i) for i in ids[:DIGEST_IDS]) + '],"text":' + quote(text)
            + ',"at":' + str(int(time.time() * 1000)) + "}\n").encode()
    write_private(directory, session_id + DIGEST_SUFFIX, data)


def digest_ids(directory: str, session_id: str) -> list[str]:
    """The ids the session's digest showed ([] when none, or the file is unreadable)."""
    try:
        data = load_json_file(f"{directory}/{session_id}{DIGEST_SUFFIX}", 64 * 1024)
    except Exception:
        return []
    shown = data.get("shown") if isinstance(data, dict) else None
    return [i for i in shown if isinstance(i, str)] if isinstance(shown, list) else []


def last_injected(state_path: str) -> str | None:
    try:
        state = load_json_file(state_path, STATE_LIMIT)
    except Exception:
        return None  # a corrupt state file must not block injection forever: it is rewritten
    if isinstance(state, dict):
        value = state.get("lastInjectedMessageUuid")
        if isinstance(value, str):
            return value
    return None


def write_state(directory: str, session_id: str, message_uuid: str) -> None:
    """Record the injected message in ``<session>.state`` (called with the lock held, see claim).

    The old state file is unlinked first instead of being replaced: on ext4 (auto_da_alloc) a rename
    over a file with data forces the new file's blocks to disk, ~1.5 ms on every injection. Readers
    still never see a partial file; one that finds no state in that instant takes the lock and reads
    again.
    """
    data = b'{"lastInjectedMessageUuid":' + quote(message_uuid).encode() + b"}\n"
    write_private(directory, session_id + ".state", data, unlink_first=True)


def ensure_private_dir(path: str) -> None:
    """Create the folder (0700) if it is missing (its parent must exist)."""
    if not _is_dir(path):
        try:  # not contextlib.suppress: one more import on the hook's path
            _os.mkdir(path, 0o700)
        except FileExistsError:
            return


def write_private(directory: str, name: str, data: bytes, *, unlink_first: bool = False) -> None:
    """``directory/name`` (0600) replaced whole: a complete temp file in the same folder, renamed into place."""
    final = f"{directory}/{name}"
    temp = f"{directory}/.{name}.{_os.getpid()}.tmp"
    fd = _os.open(temp, _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC | getattr(_os, "O_CLOEXEC", 0), 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[_os.write(fd, view) :]
        finally:
            _os.close(fd)
        if unlink_first:
            remove(final)
        _os.replace(temp, final)
    except BaseException:
        remove(temp)
        raise


def remove(path: str) -> None:
    try:  # not contextlib.suppress: one more import on the hook's hot path
        _os.unlink(path)
    except OSError:
        return


# --- what the PreToolUse hook told this session about the files and commands in hand ---------------

LESSONS_FOLDER = "lessons"  # processor/recall/lesson_index.py FOLDER: <recollections>/lessons/<project>.index
LESSONS_SUFFIX = ".index"  # processor/recall/lesson_index.py SUFFIX
LESSONS_LIMIT = 64 * 1024  # processor/recall/lesson_index.py INDEX_LIMIT
KEYS_MARK = "#keys\t"  # processor/recall/lesson_index.py KEYS_MARK
SHOWN_SUFFIX = ".shown"  # <session>.shown: {"shown": [ids], "asked": [ids], "created": [paths]}
SHOWN_LIMIT = 16 * 1024
SHOWN_KEPT = 200  # ids kept in <session>.shown (the oldest dropped)
CREATED_PATHS = 100


def lessons_index(recollection: object, event: dict) -> tuple[str | None, str | None]:
    """(the project's lesson index file name, the project root): from the session's recollection file, or, before
    the processor wrote one (the session's first calls), from the event's cwd: the index of the same project."""
    if recollection is not None:
        name, root = (recollection.get("lessons"), recollection.get("root")) if isinstance(recollection, dict) \
            else (None, None)
        return name if isinstance(name, str) else None, root if isinstance(root, str) else None
    cwd = event.get("cwd")
    if not isinstance(cwd, str) or not cwd:
        return None, None
    import hashlib  # only on this path: hashing costs an import the common path does not pay

    root = project_root(cwd)
    return hashlib.sha1(root.encode()).hexdigest()[:16] + LESSONS_SUFFIX, root


def read_filed(directory: str, name: str | None, keys: list[str]) -> list[tuple[str, list]]:
    """What the lesson index `name` files under each of `keys`, in their order: parses only those lines."""
    if not isinstance(name, str) or not name.endswith(LESSONS_SUFFIX) or "/" in name or name.startswith("."):
        return []
    try:
        raw = read_limited(f"{directory}/{LESSONS_FOLDER}/{name}", LESSONS_LIMIT)
    except OSError:
        return []
    if raw is None:
        return []
    text = raw.decode("utf-8")
    # The second line lists the keys the file holds: look there first, and in the whole text only for those.
    listed = text.find("\n" + KEYS_MARK)
    head = text[listed:text.find("\n", listed + 1)] if listed >= 0 else None
    filed: list[tuple[str, list]] = []
    for key in keys:
        quoted = quote(key)
        if head is not None and "\t" + quoted + "\t" not in head:
            continue
        start = text.find("\n" + quoted + "\t")
        if start >= 0:
            start = text.index("\t", start + 1) + 1
            end = text.find("\n", start)
            entries = loads(text[start:] if end < 0 else text[start:end])
            if isinstance(entries, list):
                filed.append((key, entries))
    return filed


def _shown_data(directory: str, session_id: str) -> tuple[list[str], list[str], list[str]]:
    try:
        data = load_json_file(f"{directory}/{session_id}{SHOWN_SUFFIX}", SHOWN_LIMIT)
    except Exception:
        return [], [], []
    if not isinstance(data, dict):
        return [], [], []
    lists = [data.get(name) for name in ("shown", "asked", "created")]
    shown, asked, created = ([v for v in value if isinstance(v, str)] if isinstance(value, list) else []
                             for value in lists)
    return shown, asked, created


def load_shown(directory: str, session_id: str) -> tuple[list[str], list[str]]:
    """(memory ids told in this session by any hook, files the agent created); ([], []) if none. A memory told
    once is in the agent's context: no hook tells it again in the session (until a compaction clears this)."""
    shown, asked, created = _shown_data(directory, session_id)
    return shown + asked, created


def claim_shown(directory: str, session_id: str, ids: list[str], created: str | None = None,
                asked: list[str] | tuple[str, ...] = (), message: str | None = None) -> list[str]:
    """Record `ids` as told about a tool call (and `asked`: the bites of the user message `message`, and
    `created`: a file the agent made) under the hook's lock; returns those of `ids` and `asked` no parallel hook
    process claimed first: each memory is told once per session, by whichever hook tells it first, and a
    message's bites once (``<session>.state``), in the same lock.

    Claude Code runs the hooks of parallel tool calls concurrently, so the read-compare-write is done under an
    exclusive lock; without it both calls of a parallel batch would tell. The lock is a POSIX record lock
    (posix.lockf) on one dedicated file, opened once: fcntl.flock would cost an extension-module load, and a
    record lock is only dropped early if the process closes another descriptor of the same file, which never
    happens to this one."""
    lock_fd = -1
    if hasattr(_os, "lockf"):
        lock_fd = _os.open(
            f"{directory}/{LOCK_NAME}", _os.O_RDWR | _os.O_CREAT | getattr(_os, "O_CLOEXEC", 0), 0o600
        )
    try:
        if lock_fd >= 0:
            _os.lockf(lock_fd, _os.F_LOCK, 0)
        if message is not None:
            if last_injected(f"{directory}/{session_id}.state") == message:
                asked = ()  # a parallel tool call's hook injected this message's bites
            else:
                write_state(directory, session_id, message)
        shown, told_asked, made = _shown_data(directory, session_id)
        known = shown + told_asked
        fresh = [i for i in ids if i not in known]
        fresh_asked = [i for i in asked if i not in known and i not in fresh]
        if created and created not in made:
            made.append(created)
        elif not fresh and not fresh_asked:
            return []
        shown = (shown + fresh)[-SHOWN_KEPT:]
        told_asked = (told_asked + fresh_asked)[-SHOWN_KEPT:]
        data = ('{"shown":[' + ",".join(quote(i) for i in shown) + '],"asked":['
                + ",".join(quote(i) for i in told_asked) + '],"created":['
                + ",".join(quote(p) for p in made[-CREATED_PATHS:]) + "]}\n").encode()
        # Unlinked first, as the state file is (write_state): a rename over a file with data costs a flush on ext4.
        # The unlocked pre-check (load_shown) may find no file in that instant; this lock's holder decides.
        write_private(directory, session_id + SHOWN_SUFFIX, data, unlink_first=True)
        return fresh + fresh_asked
    finally:
        if lock_fd >= 0:
            _os.close(lock_fd)


def serve(run_hook: "Callable[[bytes], str | None]") -> None:  # noqa: F821 - no typing import on the hot path
    """Read the event, print the hook's JSON if any; on any failure exit 0 with no output."""
    try:
        stdin = sys.stdin.buffer.read(STDIN_LIMIT + 1)
        if len(stdin) > STDIN_LIMIT:
            return
        output = run_hook(stdin)
        if output:
            out = sys.stdout.buffer
            out.write(output.encode("ascii") + b"\n")
            out.flush()
    except Exception:
        return  # exit 0, silently: see the module docstring
