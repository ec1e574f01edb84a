"""A hook's input and output, for every agent: the event each agent sends and the answer it reads, Engram's files
for the session (its recollection, what it was told, under one lock; the project's lesson index), the fence, a
bite's line.

The one place in the hooks that knows each agent's events is the section "each agent's hook events" below: which
event reports a failed call and the failure, how a call's tool is named, whether the answer arrives after the
call, where the session id is, the event the answer names, and how the agent shows Engram's MCP tools. A new
agent's events are added there.

Stdlib only, and careful about it: a hook's whole-process time is its cost, and every module it loads is read
and unmarshalled on every tool call, so the hooks' common path loads this module, the call keys and the entry
point and nothing else (what only a rarer path needs is in modules of its own: ``project``, ``control``). This
module avoids even ``os`` and ``json`` (``json`` pulls in ``re``/``enum``, which alone doubles interpreter
start-up): it uses the built-in ``posix`` module and the ``_json`` C accelerator, with plain ``os``/``json`` as a
fallback. The processor imports it as ``processor.hook_kit.hook_io``; a hook run through its launcher imports it
as plain ``hook_io`` (the entry point puts the kit's folder on ``sys.path``: no package ``__init__`` on the
hook's path).
"""

import sys

try:
    import posix as _os  # built in and already loaded: importing `os` costs ~1.5 ms more
except ImportError:  # not a POSIX system
    import os as _os

FENCE_OPEN = "<engram-recollection>"
FENCE_CLOSE = "</engram-recollection>"
# The Gemini CLI HTML-escapes a hook's context (``<`` becomes ``&lt;``) before the model reads it: its fence has
# no angle brackets, so the model reads it as sent.
GEMINI_FENCE_OPEN = "[engram-recollection]"
GEMINI_FENCE_CLOSE = "[/engram-recollection]"
# Every form of the fence a transcript can hold (Gemini's, and the escaped one an older Engram's Gemini hooks
# made), opener first: capture drops what any of them holds, and a bite can close none of them.
FENCES = ((FENCE_OPEN, FENCE_CLOSE), (GEMINI_FENCE_OPEN, GEMINI_FENCE_CLOSE),
          ("&lt;engram-recollection&gt;", "&lt;/engram-recollection&gt;"))


def fence(text: str, for_agent: str = "claude") -> str:
    """The marker around every text Engram injects: capture drops what is inside it, so Engram never
    captures, and so never remembers, its own recollections."""
    opener, closer = (GEMINI_FENCE_OPEN, GEMINI_FENCE_CLOSE) if for_agent == "gemini" else (FENCE_OPEN, FENCE_CLOSE)
    return f"{opener}\n{text}\n{closer}"


STDIN_LIMIT = 1 << 20  # a Write of a huge file makes a huge event; skip it, the next call injects
RECOLLECTION_LIMIT = 64 * 1024
STATE_LIMIT = 4 * 1024
STATE_SUFFIX = ".state"  # <session>.state: {"lastInjectedMessageUuid"}, the message whose bites were told
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

    # The attributes _json.make_scanner reads, with json.JSONDecoder's defaults, on a function object (which takes
    # attributes): building a class for them costs more on every hook start.
    def _scan_context() -> None:
        return None

    _scan_context.strict = True
    _scan_context.object_hook = None
    _scan_context.object_pairs_hook = None
    _scan_context.parse_float = float
    _scan_context.parse_int = int
    _scan_context.parse_constant = _reject_constant
    _scan = _json.make_scanner(_scan_context)
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


LEGACY_HOME = ".engram"  # the data home of Engram before it moved to the platform's place (in the home folder)
_S_IFDIR = 0o040000


def is_dir(path: str) -> bool:
    try:
        return _os.stat(path).st_mode & _S_IFMT == _S_IFDIR
    except (OSError, ValueError):  # ValueError: a path with a NUL in it (from a transcript)
        return False


def exists(path: str) -> bool:
    try:
        _os.stat(path)
        return True
    except (OSError, ValueError):
        return False


def kit(name: str):
    """A module of the hooks' kit, imported only by the calls that need it (each module loaded is start-up time
    for every call): as ``processor.hook_kit.<name>``, or by its plain name where the kit's folder is on
    ``sys.path`` (a hook run through its launcher)."""
    return __import__(f"{__package__}.{name}", fromlist=[name]) if __package__ else __import__(name)


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
    legacy = home + "/" + LEGACY_HOME
    if not exists(default):  # rare: only then is the earlier home looked at (a module of its own)
        if __package__:
            from .legacy_home import is_earlier_engram_home
        else:
            from legacy_home import is_earlier_engram_home
        if is_earlier_engram_home(legacy):
            return legacy
    return default


def recollections_dir() -> str | None:
    """$ENGRAM_HOME/recollections, with the data home resolved exactly like processor.config."""
    root = data_home()
    return None if root is None else root.rstrip("/") + "/recollections"


OFF_ENV = "ENGRAM_OFF"  # set when starting an agent: no memory for its sessions (processor/capture/optout.py)
OFF_SUFFIX = ".off"  # <session>.off: the session opted out (written by the processor or the SessionStart hook)
# What $ENGRAM_OFF's value asks for: values that mean "not off", and those that mean "keep nothing at all".
OFF_NOT = ("", "0", "false", "no")
OFF_RECORD = ("record", "off_the_record")


def opt_out_level(value: str | None) -> str | None:
    """What a value of $ENGRAM_OFF asks for: None (not off), 'memory' (nothing told or kept as memory) or
    'record' (nothing kept at all)."""
    if value is None:
        return None
    text = value.strip().lower().replace("-", "_")
    if text in OFF_NOT:
        return None
    return "record" if text in OFF_RECORD else "memory"


def env_opt_out() -> str | None:
    """What $ENGRAM_OFF asks of this session: None, 'memory' or 'record'."""
    return opt_out_level(getenv(OFF_ENV))


def opted_out(directory: str, session_id: str) -> bool:
    """No memory for this session: $ENGRAM_OFF, or its opt-out recorded as <session>.off."""
    return env_opt_out() is not None or exists(f"{directory}/{session_id}{OFF_SUFFIX}")


def valid_session_id(value: object) -> bool:
    # Session ids become file names: no separators, no "..", no hidden files, bounded length.
    return (
        isinstance(value, str)
        and 0 < len(value) <= 128
        and value[0] != "."
        and _SESSION_CHARS.issuperset(value)
    )


GIT_HEAD_LIMIT = 4096
_HEAD_REF = "ref: refs/heads/"


def checkout_branch(folder: object) -> str | None:
    """The branch the git checkout holding `folder` is on (its ``HEAD``: ``ref: refs/heads/<branch>``), a worktree's
    too (its ``.git`` is a file naming its git folder); None when the folder is in no checkout on this machine, or
    its HEAD is detached."""
    path = folder.rstrip("/") if isinstance(folder, str) and folder.startswith("/") else None
    for _ in range(32):  # up to the checkout's root
        if not path:
            return None
        dot = path + "/.git"
        try:
            if is_dir(dot):
                head = read_limited(dot + "/HEAD", GIT_HEAD_LIMIT)
            else:
                pointer = read_limited(dot, GIT_HEAD_LIMIT) if exists(dot) else None
                gitdir = pointer.decode("utf-8", "replace").strip()[len("gitdir:"):].strip() \
                    if pointer and pointer.startswith(b"gitdir:") else None
                head = read_limited(gitdir.rstrip("/") + "/HEAD", GIT_HEAD_LIMIT) if gitdir else None
        except OSError:
            return None
        if head is not None or exists(dot):
            text = head.decode("utf-8", "replace").strip() if head else ""
            return text[len(_HEAD_REF):] or None if text.startswith(_HEAD_REF) else None
        path = path.rpartition("/")[0]
    return None


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
    for opener, closer in FENCES:
        text = text.replace(opener, "").replace(closer, "")
    text = " ".join(text.split())
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
# Defaults of the settings the hooks read themselves (processor.config's Settings take them from here).
SHOW_INJECTED_DEFAULT = True  # show_injected
PROMPT_SUBMIT_BUDGET_MS_DEFAULT = 150  # prompt_submit_budget_ms
RECOLLECTION_BITES_DEFAULT = 3  # recollection_bites: a prompt's bites, at most
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


# --- the session's files beside its recollection --------------------------------------------------

SESSION_START_BUDGET_DEFAULT = 1500  # session_start_token_budget (processor.config's default too)
DIGEST_SUFFIX = ".digest"  # <session>.digest: {"shown": [ids], "text", "at"}, by the SessionStart hook
PROMPT_SUFFIX = ".prompt"  # <session>.prompt: {"shown": [ids, newest first], "timestamp": ms}, by the prompt hook
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
    write_private(directory, session_id + STATE_SUFFIX, data, unlink_first=True)


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

# The project's lesson index, written by processor/recall/lesson_index.py: <recollections>/lessons/<project>.index,
# one line a key, its second line listing every key the file holds (after KEYS_MARK).
LESSONS_FOLDER = "lessons"
LESSONS_SUFFIX = ".index"
# <lessons>/aliases/<name>: the name of the index to read instead (processor/capture/project.py writes one for a
# clone's root, and for a project merged into another).
LESSONS_ALIASES = "aliases"
LESSONS_LIMIT = 64 * 1024
KEYS_MARK = "#keys\t"
# Beside each index, <project>.paths: the files the project's sessions worked on, one line a file name
# (processor/recall/file_map.py); read only right after a call failed on a path that is not there.
PATHS_SUFFIX = ".paths"
PATHS_LIMIT = 1024 * 1024
SHOWN_SUFFIX = ".shown"  # <session>.shown: {"shown": [ids], "asked": [ids], "created": [paths]}
# Among "created": a memory the session showed it knows (it ran the step a commit hook's lesson says to run first),
# as "known:<id>": never told there, and not recorded as told.
KNOWN_PREFIX = "known:"
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
    if __package__:  # only on this path: the project's root costs files the common path does not read
        from .project import index_name, project_root
    else:
        from project import index_name, project_root
    root = project_root(cwd)
    return index_name(root), root


def _index_name(name: object) -> bool:
    return isinstance(name, str) and name.endswith(LESSONS_SUFFIX) and "/" not in name and not name.startswith(".")


def _project_file(directory: str, name: str | None, suffix: str, limit: int) -> str | None:
    """The text of the project's file with `suffix` (its index, ``.index``; its files, ``.paths``) named by its
    index's name `name`; None when there is none."""
    if not _index_name(name):
        return None
    stem = name[:-len(LESSONS_SUFFIX)]
    try:
        raw = read_limited(f"{directory}/{LESSONS_FOLDER}/{stem}{suffix}", limit)
    except FileNotFoundError:  # a clone's root, or a project merged into another: the alias names its index
        try:
            alias = read_limited(f"{directory}/{LESSONS_FOLDER}/{LESSONS_ALIASES}/{name}", 64)
            target = alias.decode("utf-8").strip() if alias else ""
            raw = read_limited(f"{directory}/{LESSONS_FOLDER}/{target[:-len(LESSONS_SUFFIX)]}{suffix}", limit) \
                if _index_name(target) and target != name else None
        except (OSError, UnicodeDecodeError):
            return None
    except OSError:
        return None
    try:
        return raw.decode("utf-8") if raw is not None else None
    except UnicodeDecodeError:
        return None


GUARDED_SHOWN = 200  # ids of the rules an index guards at their calls, listed in its first line


def guarded_ids(directory: str, name: str | None) -> set[str]:
    """The ids of the rules the project's lesson index guards at the calls that would break them (its first line's
    ``"guarded"``): told there, so not at the session's start."""
    text = _project_file(directory, name, LESSONS_SUFFIX, LESSONS_LIMIT)
    header = loads(text.split("\n", 1)[0]) if text else None
    listed = header.get("guarded") if isinstance(header, dict) else None
    return {i for i in listed if isinstance(i, str)} if isinstance(listed, list) else set()


def _line_of(text: str, key: str) -> object:
    """The parsed value of the line ``"key"<tab>value`` of an index-shaped text; None when there is none."""
    quoted = quote(key)
    start = text.find("\n" + quoted + "\t")
    if start < 0:
        return None
    start = text.index("\t", start + 1) + 1
    end = text.find("\n", start)
    return loads(text[start:] if end < 0 else text[start:end])


def read_filed(directory: str, name: str | None, keys: list[str]) -> list[tuple[str, list]]:
    """What the lesson index `name` files under each of `keys`, in their order: parses only those lines."""
    text = _project_file(directory, name, LESSONS_SUFFIX, LESSONS_LIMIT)
    if text is None:
        return []
    # The second line lists the keys the file holds: look there first, and in the whole text only for those.
    listed = text.find("\n" + KEYS_MARK)
    head = text[listed:text.find("\n", listed + 1)] if listed >= 0 else None
    filed: list[tuple[str, list]] = []
    for key in keys:
        if head is not None and "\t" + quote(key) + "\t" not in head:
            continue
        entries = _line_of(text, key)
        if isinstance(entries, list):
            filed.append((key, entries))
    return filed


def _activated(entry: dict, root: str | None) -> str | None:
    """The virtualenv folder an entry's set-up activates (``"ran"``: ``source .venv/bin/activate``), as an absolute
    path (below `root` when the set-up names it relatively); None for another kind of set-up, or none."""
    ran = entry.get("ran")
    folder = next((w[:-len("/bin/activate")] for w in ran.split() if w.endswith("/bin/activate")), None) \
        if isinstance(ran, str) else None
    if folder is None or folder.startswith("/"):
        return folder
    return root.rstrip("/") + "/" + (folder[2:] if folder.startswith("./") else folder) if root else None


def set_up_gone(entry: dict, root: str | None) -> bool:
    """The environment an entry activates is a folder this machine's checkout no longer has (``source
    .uvenv/bin/activate`` minutes after the session's ``rm -rf .uvenv``: the processor rereads a project's
    environment when a session ends). Only when the project is on this machine: a replay elsewhere has the index."""
    folder = _activated(entry, root)
    return bool(folder) and bool(root) and is_dir(root) and not exists(folder + "/bin/activate")


def set_up_active(entry: dict, root: str | None) -> bool:
    """The environment an entry activates is active where the agent runs: Claude Code started from a shell that
    activated it (``VIRTUAL_ENV``, or its ``bin`` on ``PATH``) hands its hooks and its shell calls the same
    environment, so a program of it runs bare there."""
    folder = _activated(entry, root)
    return bool(folder) and ((getenv("VIRTUAL_ENV") or "").rstrip("/") == folder
                             or folder + "/bin" in (getenv("PATH") or "").split(":"))


def read_paths(directory: str, name: str | None, file_name: str) -> list:
    """The files named `file_name` the project of index `name` worked on: ``[[path, date, session], …]``."""
    text = _project_file(directory, name, PATHS_SUFFIX, PATHS_LIMIT)
    found = _line_of(text, file_name) if text is not None else None
    return found if isinstance(found, list) else []


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
            if last_injected(f"{directory}/{session_id}{STATE_SUFFIX}") == message:
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


# --- each agent's hook events: the one place in the hooks that knows how an agent calls a hook and reads its
# answer. Claude Code, the Codex CLI and the Gemini CLI run the same hook scripts (recall_hook/); the registered
# command names its agent after the script (`… pretooluse.py gemini`; none named is Claude Code, as an older
# Engram registered it). A new agent's events are added here, and nowhere else in the hooks.

CLAUDE, CODEX, GEMINI = AGENTS = ("claude", "codex", "gemini")
AGENT_NAMES = {CLAUDE: "Claude Code", CODEX: "Codex", GEMINI: "Gemini CLI"}
# The GitHub Copilot CLI and Qwen Code run them through command hooks in Claude Code's shape (snake_case input,
# ``hook_event_name``, ``hookSpecificOutput``). Neither puts a hook's context before a call: Copilot delivers a
# PreToolUse context only after the call's result, Qwen drops it. So both tell a call's lessons after it
# (``PostToolUse``, ``PostToolUseFailure``), with the fix of a failure beside them, as the Gemini CLI does.
COPILOT, QWEN = "copilot", "qwen"
AGENTS += (COPILOT, QWEN)
AGENT_NAMES.update({COPILOT: "Copilot CLI", QWEN: "Qwen Code"})
# opencode and pi have no command hooks: the plugin (opencode's, JavaScript: processor/install/opencode_plugin.js)
# and the extension (pi's, TypeScript: processor/install/pi_extension.ts) that `engram install` ships run these
# same scripts, with events of their own making (below: OPENCODE_* and PI_*).
OPENCODE, PI = "opencode", "pi"
AGENTS += (OPENCODE, PI)
AGENT_NAMES.update({OPENCODE: "opencode", PI: "pi"})

# The events whose answer carries context, per agent: Claude Code's names, and those the others add.
AFTER_TOOL = "AfterTool"  # the Gemini CLI's event after a call (its context arrives with the call's result)
PRE_TOOL = "PreToolUse"
FAILED_TOOL = "PostToolUseFailure"  # Claude Code's event after a failed call
# The Codex CLI's event after a call (the failure hook's, for a shell call) and Claude Code's after a sub-agent's.
POST_TOOL = "PostToolUse"
PROMPT_EVENTS = ("UserPromptSubmit", "BeforeAgent")  # the Gemini CLI's BeforeAgent appends context to the prompt
_ANSWERED = (PRE_TOOL, FAILED_TOOL, POST_TOOL, AFTER_TOOL, "SessionStart", *PROMPT_EVENTS)
# The plugin's and the extension's events, named after the agent's own (neither can put context before a call):
# - opencode's ``tool.execute.after``, after a tool that returned (a shell command that exited non-zero included):
#   ``{"session_id", "cwd", "hook_event_name", "tool_name", "tool_input", "tool_use_id", "tool_response":
#   {"output", "exit"}, "created"}`` (``exit``: the shell command's exit code, from its ``metadata.exit``); the
#   answer is appended to the tool's result;
# - opencode's ``experimental.chat.messages.transform``, for a tool that threw (no ``tool.execute.after``):
#   Claude Code's PostToolUseFailure shape (``tool_name``, ``tool_input``, ``error``), told by ``tool_failure.py``;
#   the answer is appended to the error the model reads;
# - pi's ``tool_result``, after every tool, failed or not: ``tool_response`` ``{"output", "is_error"}``; the answer
#   is a text part appended to the tool's result.
# ``created``: the plugin found no file at the call's path before it ran (it looks at ``tool.execute.before`` /
# pi's ``tool_call``). Sessions start with SessionStart events, prompts with UserPromptSubmit ones.
OPENCODE_AFTER_TOOL = "tool.execute.after"
OPENCODE_TOOL_ERROR = "experimental.chat.messages.transform"
PI_AFTER_TOOL = "tool_result"
_AFTER_EVENTS = (AFTER_TOOL, OPENCODE_AFTER_TOOL, PI_AFTER_TOOL)

# The Gemini CLI's and the Codex CLI's tools under Claude Code's names (processor/capture/gemini.py and
# codex.py store their calls the same way).
TOOL_NAMES = {"run_shell_command": "Bash", "read_file": "Read", "read_many_files": "Read", "write_file": "Write",
              "replace": "Edit", "edit": "Edit", "glob": "Glob", "grep_search": "Grep",
              "search_file_content": "Grep", "exec_command": "Bash", "shell_command": "Bash"}
# opencode's and pi's tools (processor/capture/opencode.py and pi.py store their calls the same way); opencode
# names a file ``filePath`` (read as ``file_path``), pi ``path``.
TOOL_NAMES.update({"bash": "Bash", "read": "Read", "write": "Write", "multiedit": "MultiEdit", "glob": "Glob",
                   "grep": "Grep", "list": "LS", "ls": "LS", "find": "Glob", "webfetch": "WebFetch"})
# The Copilot CLI's tools under Claude Code's names (its Claude-shaped hooks already say Bash, Read, Write; its
# session files keep its own names: processor/capture/copilot.py maps them the same way).
COPILOT_TOOL_NAMES = {"bash": "Bash", "view": "Read", "create": "Write", "edit": "Edit", "grep": "Grep",
                      "glob": "Glob"}
# The agents whose hooks read a call's context only after it: their PostToolUse and PostToolUseFailure (the
# Gemini CLI's AfterTool is its own event).
AFTER_CALL_AGENTS = (COPILOT, QWEN)
_CREATING = ("Write", "NotebookEdit")
# The calls that change a file (Claude Code's names): a wish about how a file is worked on is told before these only.
EDITING = ("Edit", "MultiEdit", "Write", "NotebookEdit")
# The calls that read a file whole (Claude Code's names): a file too big for them is told before these only.
READING = ("Read", "NotebookRead")
# Where a project's lesson index files its files too big for the read tool, for the moment a read of another is
# refused (``recall_hook/tool_failure.py``): a folder of day-by-day logs holds more than one.
READ_REFUSED = "refused:Read"
_GEMINI_CREATED = "Successfully created"  # how Gemini's write_file says the file is new (Qwen's, a fork's, too)
_COPILOT_CREATED = "Created file "  # how the Copilot CLI's create says it
_GEMINI_SHELL = "run_shell_command"
_EXIT_CODE = "Exit Code: "
ROLLOUT_TAIL = 256 * 1024  # a Codex rollout's last bytes searched for the call's exit status


def agent() -> str:
    """The agent this hook process was registered for: the argument after the script, else Claude Code."""
    named = sys.argv[2] if len(sys.argv) > 2 else ""
    return named if named in AGENTS else CLAUDE


def mcp_tool(tool: str, for_agent: str) -> str:
    """An Engram MCP tool's name as the agent shows it to its model: Claude Code and the Codex CLI
    ``mcp__engram__memory_expand`` (Claude Code defers MCP tools behind ToolSearch, where the model finds a tool
    by the name it was told), the Gemini CLI ``mcp_engram_memory_expand``, the Copilot CLI
    ``engram-memory_expand``; Qwen Code as Claude Code (it defers MCP tools too, behind tool_search); opencode
    ``engram_memory_expand`` (its MCP tools are ``<server>_<tool>``), pi ``engram_memory_expand`` (the tools
    Engram's extension registers)."""
    if for_agent == COPILOT:
        return f"engram-{tool}"
    if for_agent in (OPENCODE, PI):
        return f"engram_{tool}"
    return f"mcp_engram_{tool}" if for_agent == GEMINI else f"mcp__engram__{tool}"


def session_of(event: dict, directory: str) -> str | None:
    """The session the event is about: its ``session_id`` (every agent's hooks give one), else
    ``$CLAUDE_SESSION_ID``, else the newest recollection file (Claude Code versions that named none); None
    when that is not a safe file name."""
    session_id = event.get("session_id")
    if session_id is None:
        session_id = getenv("CLAUDE_SESSION_ID") or newest_session(directory)
    return session_id if valid_session_id(session_id) else None


def call_of(event: dict) -> tuple[str, dict] | None:
    """(the call's tool under Claude Code's name, its input) of a tool event, or None."""
    tool_name, tool_input = event.get("tool_name"), event.get("tool_input")
    if not isinstance(tool_input, dict) or not isinstance(tool_name, str) or not tool_name:
        return None
    if "filePath" in tool_input and "file_path" not in tool_input:  # opencode's
        tool_input = {**tool_input, "file_path": tool_input["filePath"]}
    if agent() == COPILOT:
        tool_name = COPILOT_TOOL_NAMES.get(tool_name, tool_name)
    return TOOL_NAMES.get(tool_name, tool_name), tool_input


def command_of(tool_input: object) -> str | None:
    """A shell call's command line: ``command`` (Claude Code, Gemini, Codex's hooks), ``cmd`` (Codex's own
    ``exec_command``)."""
    command = tool_input.get("command", tool_input.get("cmd")) if isinstance(tool_input, dict) else None
    return command if isinstance(command, str) else None


def after_call(event: dict) -> bool:
    """Whether the answer reaches the model after the call ran (Gemini's AfterTool; the Copilot CLI's and Qwen
    Code's PostToolUse and PostToolUseFailure; opencode's tool.execute.after, pi's tool_result), not before it."""
    name = event.get("hook_event_name")
    return name in _AFTER_EVENTS or (name in (POST_TOOL, FAILED_TOOL) and agent() in AFTER_CALL_AGENTS)


def creating(event: dict, tool: str, tool_input: dict) -> bool:
    """The call makes a new file: before it runs, the file is not there; after it (Gemini's AfterTool), the
    tool's answer says it created it."""
    if tool not in _CREATING:
        return False
    if after_call(event):
        if agent() == COPILOT:
            return _copilot_output(event).startswith(_COPILOT_CREATED)
        return event.get("created") is True or _gemini_output(event).startswith(_GEMINI_CREATED)
    path = tool_input.get("file_path") or tool_input.get("notebook_path")
    if not isinstance(path, str):
        return False
    try:
        os_api.stat(path)
    except OSError:
        return True
    return False


def answer(event: dict, default: str, context: str, ids: list[str], home: str | None) -> str:
    """The hook's stdout: the context for the model, under the event the agent called (``default`` when it
    named none Engram knows), and the line the user sees."""
    name = event.get("hook_event_name")
    out = hook_json(name if name in _ANSWERED else default, context, ids, home)
    if agent() == COPILOT:
        # The Copilot CLI reads a Claude-shaped hook's context at the top level for every event but PreToolUse
        # (hookSpecificOutput there): given both, it delivers exactly one.
        out = out[:-1] + ',"additionalContext":' + quote(context) + "}"
    return out


_MCP = "the engram MCP server's "
_SERVED_BY = {PI: "Engram's extension's "}  # pi has no MCP: Engram's extension registers the tools


def format_context(lines: list[str], for_agent: str = CLAUDE) -> str:
    """A message's bites as the model reads them, fenced."""
    return fence("\n".join([
        "You have memories related to this conversation:",
        *lines,
        f"If any of these are relevant, call {mcp_tool('memory_expand', for_agent)}(id) "
        f"({_SERVED_BY.get(for_agent, _MCP)}memory_expand) with its id for the full context. Otherwise, continue "
        "your work.",
    ]), for_agent)


def format_call_context(target: str, lines: list[str], for_agent: str = CLAUDE, *, after: bool = False) -> str:
    """What earlier sessions left about the file or command a tool call is about to work on (or, where the
    agent reads a hook's context only after the call, just worked on)."""
    return fence("\n".join([
        f"{'About' if after else 'Before'} this call on {target}: an earlier session left these about it:",
        *lines,
        f"Call {mcp_tool('memory_expand', for_agent)}(id) for the full context if one applies. Otherwise, "
        "continue your work.",
    ]), for_agent)


def format_failure_context(lines: list[str], for_agent: str = CLAUDE) -> str:
    """What fixed the failure the agent just met, fenced."""
    return fence("\n".join([
        "This failed the same way in an earlier session of this project:",
        *lines,
        f"Call {mcp_tool('memory_expand', for_agent)}(id) for the full context if it applies. Otherwise, "
        "continue your work.",
    ]), for_agent)


def format_too_big_context(lines: list[str], for_agent: str = CLAUDE) -> str:
    """The project's other files too big for the read tool, right after a read was refused, fenced."""
    return fence("\n".join(["Earlier sessions of this project met the same limit on these files:", *lines]),
                 for_agent)  # each line says what to do instead


def format_branch_context(lines: list[str], for_agent: str = CLAUDE) -> str:
    """The project's git branch of the number a call names under another name, fenced."""
    return fence("\n".join([
        "Earlier sessions of this project worked on a branch of that number:",
        *lines,
        "If it is the one you meant, switch to it rather than making a new one. Otherwise, continue your work.",
    ]), for_agent)


def format_ran_below(below: str, above: str, for_agent: str = CLAUDE) -> str:
    """Why a call failed that ran in a folder with paths from the folder above it, fenced."""
    return fence(f"This call ran in `{below}`, a folder of the project, with a path from the project's folder "
                 f"(`{below}/…`): the shell keeps the folder an earlier `cd` left it in. Run it as `cd {above} && …`, "
                 f"or with paths from `{below}`.", for_agent)


def format_where_context(lines: list[str], for_agent: str = CLAUDE) -> str:
    """Where the project's file (or numbered folder) a failed call missed is, fenced."""
    return fence("\n".join([
        "Earlier sessions of this project worked on it at another path:",
        *lines,
        "If it is the one you meant, use that path. Otherwise, continue your work.",
    ]), for_agent)


# --- a failed call, as each agent reports it ---------------------------------------------------------------


def failed_call(event: dict) -> tuple[str, str] | None:
    """(the tool's name as Claude Code says it, the error) when this event reports a failed call, else None."""
    name = event.get("hook_event_name")
    if agent() in AFTER_CALL_AGENTS:
        return _after_call_failure(event)
    if name == POST_TOOL and event.get("tool_name") in SUB_AGENT_TOOLS:  # Claude Code's, after a sub-agent returned
        return _sub_agent_refused(event)
    if name == POST_TOOL:  # the Codex CLI: the output is the error when the rollout says the call failed
        output = event.get("tool_response")
        if event.get("tool_name") != "Bash" or not isinstance(output, str):
            return None
        return ("Bash", output) if _codex_failed(event.get("transcript_path"), event.get("tool_use_id")) else None
    if name == AFTER_TOOL:
        return _gemini_failure(event)
    if name in (OPENCODE_AFTER_TOOL, PI_AFTER_TOOL):
        return _plugin_failure(event)
    error, tool_name = event.get("error"), event.get("tool_name")
    if event.get("is_interrupt") is True or not isinstance(error, str) or not isinstance(tool_name, str):
        return None
    return TOOL_NAMES.get(tool_name, tool_name), error  # opencode's thrown tool goes by its own name


# A sub-agent whose read was refused for the file's size returns, not fails: Claude Code's ``Task`` says it at the
# head of its result ("Initializing…\nError: File content (29333 tokens) exceeds maximum allowed tokens (25000)…").
# Further down, a report that recovered may quote it: that one read nothing whole in vain.
SUB_AGENT_REFUSAL_HEAD = 300
SUB_AGENT_TOOLS = ("Task", "Agent")  # Claude Code's sub-agent tool, as its versions name it
READ_REFUSAL = "exceeds maximum allowed tokens"  # how the harness refuses a read for the file's size


def _sub_agent_refused(event: dict) -> tuple[str, str] | None:
    """(the tool's name, its result) when Claude Code's PostToolUse reports a sub-agent (``Task``, ``Agent``)
    whose result opens with a read refused for the file's size; None for any other call that returned."""
    tool_name = event.get("tool_name")
    if tool_name not in SUB_AGENT_TOOLS:
        return None
    text = _response_text(event.get("tool_response"))[:SUB_AGENT_REFUSAL_HEAD]
    return (tool_name, text) if READ_REFUSAL in text.lower() else None


def _response_text(response: object) -> str:
    """A call's result as Claude Code gives a PostToolUse hook: a string, or an object whose ``content`` holds
    text blocks (a sub-agent's report)."""
    if isinstance(response, str):
        return response
    content = response.get("content") if isinstance(response, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def may_have_failed(event: dict) -> bool:
    """A cheap first look: whether an event after a call can report a failed one (most do not): a Gemini
    AfterTool of a shell command that exited non-zero, a PostToolUseFailure, a Copilot shell call's PostToolUse
    (its non-zero exit is a successful call there), an opencode or pi call after it ran."""
    if agent() in AFTER_CALL_AGENTS:
        name = event.get("hook_event_name")
        return name == FAILED_TOOL or (name == POST_TOOL and _COPILOT_EXIT in _copilot_output(event)[-200:])
    if event.get("hook_event_name") != AFTER_TOOL:
        return failed_call(event) is not None
    content = _gemini_output(event)
    return "\n" + _EXIT_CODE in content and "\n" + _EXIT_CODE + "0\n" not in content


def _plugin_failure(event: dict) -> tuple[str, str] | None:
    """After a call, as opencode's plugin and pi's extension report it: opencode's shell command that exited
    non-zero (a call that threw comes as an error of its own), any pi call marked ``is_error`` (pi's shell says
    ``Command exited with code N`` at the end of its output)."""
    response, tool_name = event.get("tool_response"), event.get("tool_name")
    if not isinstance(response, dict) or not isinstance(tool_name, str):
        return None
    output = response.get("output")
    if not isinstance(output, str):
        return None
    if event.get("hook_event_name") == PI_AFTER_TOOL:
        return (TOOL_NAMES.get(tool_name, tool_name), output) if response.get("is_error") is True else None
    code = response.get("exit")
    if tool_name != "bash" or not isinstance(code, int) or isinstance(code, bool) or code == 0:
        return None
    return "Bash", output


def _gemini_output(event: dict) -> str:
    response = event.get("tool_response")
    content = response.get("llmContent") if isinstance(response, dict) else None
    return content if isinstance(content, str) else ""


def _gemini_failure(event: dict) -> tuple[str, str] | None:
    """A Gemini shell command that exited non-zero: ("Bash", its output). Its ``llmContent`` is
    ``<untrusted_context>\\nOutput: …\\nExit Code: N\\nProcess Group PGID: …</untrusted_context>``. A tool
    that errored outright is left alone: Gemini drops that call's hook context."""
    response = event.get("tool_response")
    content = _gemini_output(event)
    if event.get("tool_name") != _GEMINI_SHELL or not content or response.get("error"):
        return None
    head, mark, tail = content.rpartition("\n" + _EXIT_CODE)
    code = tail.split("\n", 1)[0].strip()
    if not mark or not code.lstrip("-").isdigit() or int(code) == 0:
        return None
    output = head.replace("<untrusted_context>", "").strip()
    return "Bash", output[len("Output:"):].strip() if output.startswith("Output:") else output


# The Copilot CLI ends a shell call's result with ``<shellId: N completed with exit code K>``; a command that exited
# non-zero is a successful call there (PostToolUse, not PostToolUseFailure). Qwen Code, like Gemini, reports a
# shell call as a block: ``Command: …\nDirectory: …\nOutput: …\nError: …\nExit Code: K\n…``.
_COPILOT_EXIT = " completed with exit code "
_SHELL_OUTPUT = "Output: "


def _copilot_output(event: dict) -> str:
    result = event.get("tool_result")
    text = result.get("text_result_for_llm") if isinstance(result, dict) else None
    return text if isinstance(text, str) else ""


def copilot_shell_exit(text: str) -> tuple[str, int | None]:
    """A Copilot shell result without its closing ``<shellId: N completed with exit code K>`` line, and K (None
    when the line is not there). The processor's capture reads the session file's copy the same way."""
    head, mark, tail = text.rstrip().rpartition("\n<shellId: ")
    if not mark and text.startswith("<shellId: "):
        head, mark, tail = "", "<shellId: ", text.strip()[len("<shellId: "):]
    code = tail.rpartition(_COPILOT_EXIT)[2].rstrip(">").strip() if mark and tail.endswith(">") else ""
    if not code.lstrip("-").isdigit():
        return text, None
    return head, int(code)


def shell_block_output(text: str) -> str:
    """The command's own output of a Qwen Code (or Gemini CLI) shell result block, the block itself when it is
    none."""
    start = text.find(_SHELL_OUTPUT) if text.startswith("Command: ") else -1
    if start < 0:
        return text
    end = text.find("\nError: ", start)
    if end < 0:
        end = text.find("\n" + _EXIT_CODE, start)
    return text[start + len(_SHELL_OUTPUT):end if end >= 0 else len(text)].strip()


def _after_call_failure(event: dict) -> tuple[str, str] | None:
    """The failed call a Copilot CLI or Qwen Code event after a call reports: every PostToolUseFailure (the
    error), and a Copilot shell call's PostToolUse whose command exited non-zero (its output)."""
    call = call_of(event)
    if call is None or event.get("is_interrupt") is True:
        return None
    name = event.get("hook_event_name")
    if name == FAILED_TOOL:
        error = event.get("error")
        if not isinstance(error, str):
            return None
        return call[0], shell_block_output(error) if call[0] == "Bash" else error
    if name == POST_TOOL and call[0] == "Bash" and agent() == COPILOT:
        output, code = copilot_shell_exit(_copilot_output(event))
        return ("Bash", output) if code else None
    return None


def _codex_failed(transcript: object, call_id: object) -> bool:
    """Whether the Codex rollout says the call `call_id` failed: its ``item_completed`` event's status, else its
    output's ``Process exited with code N`` header. The rollout already holds both when the hook runs."""
    if not isinstance(transcript, str) or not isinstance(call_id, str) or not call_id:
        return False
    needle = ('"' + call_id + '"').encode()
    for raw in reversed(read_tail(transcript, ROLLOUT_TAIL).split(b"\n")):
        if needle not in raw:
            continue
        try:
            record = loads(raw.decode("utf-8"))
        except ValueError:
            continue  # the tail's cut first line, or a line being written
        payload = record.get("payload") if isinstance(record, dict) else None
        if not isinstance(payload, dict):
            continue
        item = payload.get("item")
        if payload.get("type") == "item_completed" and isinstance(item, dict) and item.get("id") == call_id:
            status = item.get("status")
            if status in ("failed", "completed"):
                return status == "failed"
        if payload.get("type") == "function_call_output" and payload.get("call_id") == call_id:
            output = payload.get("output")
            header = output[:400] if isinstance(output, str) else ""
            for mark in ("Process exited with code ", "Exit code: "):
                if mark in header:
                    code = header.partition(mark)[2].split("\n", 1)[0].strip()
                    return code.lstrip("-").isdigit() and int(code) != 0
    return False


def event_of(stdin: bytes) -> tuple[dict, str, str] | None:
    """What every tool hook starts from: (the event, the recollections folder, the session), or None when
    there is nothing to do — not an event, the agent was started with ``$ENGRAM_OFF``, no data home, no safe
    session id. Raises on bytes that are not JSON (the hook then exits 0 saying nothing)."""
    event = loads(stdin.decode("utf-8"))
    if not isinstance(event, dict) or env_opt_out() is not None:
        return None
    directory = recollections_dir()
    if directory is None:
        return None
    session_id = session_of(event, directory)
    return None if session_id is None else (event, directory, session_id)


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
        return  # exit 0, silently: memory is a nicety, a broken tool call or session start is not
