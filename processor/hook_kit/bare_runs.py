"""Which programs a shell command runs bare: outside the environment set-up a project runs its tools in.

BookMinder's sessions ran `pytest`, `pip` and `pre-commit` after ``source .venv/bin/activate``, in the same
command, every time: each shell call starts afresh, so a bare ``pytest specs/`` fails "command not found" and the
next call is the same one after the activation. That environment is a memory of the project
(``processor/memory/environments.py``), told right after one of its programs is not found; told before a call
that runs one bare, the failure does not happen. A step runs a program bare when no set-up came before it in the
command (an ``activate`` script, ``conda activate``, ``nvm use``, an ``export PATH=``), not through a runner
(``uv run pytest``, ``npx``), not by a path (``.venv/bin/pytest``), and not after a ``cd`` out of the project's
folder (a sibling checkout has its own environment). An interpreter run bare (``python3 script.py``) is not one:
the system's may run it; its ``-m`` module is (``python3 -m pytest``: pytest).

Stdlib only and no ``re``: the hook's start-up is its cost.
"""

_SEPARATORS = ("&&", "||", ";", "|", "\n")
_WRAPPERS = frozenset({"sudo", "time", "exec", "nohup", "nice", "command", "builtin", "env"})
_RUNNERS = frozenset({"uv", "uvx", "poetry", "pipenv", "pdm", "hatch", "rye", "conda", "npx", "pnpx", "bunx", "pnpm",
                      "yarn", "bundle", "pipx", "nix", "direnv", "mise", "asdf"})
_INTERPRETERS = frozenset({"python", "python3"})
_SET_UPS = ("conda activate", "mamba activate", "micromamba activate", "nvm use", "export PATH=", "pyenv shell",
            "workon ", "eval ")


def _steps(command: str) -> list[str]:
    for separator in _SEPARATORS:
        command = command.replace(separator, "\0")
    return [step.strip() for step in command.split("\0") if step.strip()]


def _sets_up(step: str) -> bool:
    """Whether a step sets up an environment for the steps after it."""
    words = step.split()
    if len(words) >= 2 and words[0] in ("source", ".") and words[1].endswith("/activate"):
        return True
    return step.startswith(_SET_UPS)


def _leaves(step: str, root: str | None) -> bool:
    """Whether a step is a ``cd`` out of the project's folder (an absolute path elsewhere)."""
    words = step.split()
    if len(words) != 2 or words[0] != "cd" or not root:
        return False
    target = words[1].strip("'\"").rstrip("/")
    return target.startswith("/") and target != root.rstrip("/") and not target.startswith(root.rstrip("/") + "/")


def bare_programs(command: str, root: str | None) -> list[str]:
    """The programs `command` runs bare, in order, each once."""
    found: list[str] = []
    for step in _steps(command):
        if _sets_up(step) or _leaves(step, root):
            break  # every later step runs inside that set-up, or in another project's folder
        words = step.replace("(", " ").replace(")", " ").split()
        while words and (words[0] in _WRAPPERS or ("=" in words[0] and not words[0].startswith(("-", "=")))):
            words = words[1:]
        if not words or "/" in words[0] or words[0] in _RUNNERS or not words[0][:1].isalpha():
            continue
        program = words[0]
        if program in _INTERPRETERS:
            module = words[words.index("-m") + 1] if "-m" in words[:-1] else None
            program = module.partition(".")[0] if module else None
        if program and program not in found:
            found.append(program)
    return found
