"""The layout reads as the data flow: layers import only downwards, SQL lives in store/, modules say what they do."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("processor", "recall_hook", "mcp_tools")

# Bottom-up: a module may import from its own layer and the layers before it, never from a later one.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the hooks' kit, stdlib only and nothing else of Engram: their files and answers, each agent's events, what a
    # call works on and how it failed; the processor stands on it too (one implementation of each rule)
    ("processor.hook_kit",),
    # what every layer stands on, the door for captured text included (the store takes only redacted text)
    ("processor.files", "processor.clock", "processor.tokens", "processor.config", "processor.redaction"),
    ("processor.store",),
    ("processor.capture",),
    ("processor.memory",),
    ("processor.recall",),
    ("processor.jobs",),
    ("processor.share",),                                       # shared memory: the sync layer over PostgreSQL
    # the running processor's mechanisms: its loop, memory thread, pid lock, control plane, signals, units
    ("processor.service",),
    # what it reports and serves: `engram status`, recall and expand from the CLI, the web viewer
    ("processor.status", "processor.lookup", "processor.viewer"),
    # the composition root: `engram run`, the service wired with the routes of all of the above
    ("processor.lifecycle",),
    # registration with each agent, across them (`engram install`), and the checks of all of it
    ("processor.check", "processor.install", "processor.doctor", "recall_hook", "mcp_tools"),
    ("processor.cli",),
)

SQL_WORDS = re.compile(r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM|CREATE (TABLE|INDEX|TRIGGER|VIRTUAL))\b"
                       # a transaction opened or closed by hand is SQL too (processor.store's read/write_transaction)
                       r"|^\s*(BEGIN(\s+(IMMEDIATE|EXCLUSIVE|DEFERRED))?|COMMIT|ROLLBACK"
                       r"|SAVEPOINT \w+|RELEASE \w+)\s*$")
# doctor probes the schema of damaged databases; the shared database's SQL stays in its own folder (issue 22)
SQL_ALLOWED = ("processor/store/", "processor/doctor.py", "processor/share/postgres/")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    assert rank >= 0, f"{module} belongs to no layer: add it to LAYERS"
    return rank


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every Engram module `module` imports: at the top, inside functions, under TYPE_CHECKING alike."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                targets.add(name)
    return targets


def test_layers_import_only_downwards_and_there_is_no_cycle() -> None:
    known = modules()
    graph = {m: imports(m, p, known) for m, p in known.items()}
    upward = [f"{m} ({layer_of(m)}) imports {t} ({layer_of(t)})" for m, ts in graph.items() for t in ts
              if layer_of(t) > layer_of(m)]
    assert not upward, "imports that run up the layers:\n" + "\n".join(sorted(upward))
    # Cycles within a layer: depth-first search for a back edge.
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append(" -> ".join(trail[trail.index(target):] + [module, target]) if target in trail
                              else f"{module} -> {target}")
            elif target not in state:
                visit(target, trail + [module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def room_of(module: str) -> str:
    """The folder (or top-level module) a module lives in: processor.capture, processor.config, recall_hook."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "processor" and len(parts) > 1 else parts[0]


def test_the_folders_import_one_another_without_a_cycle() -> None:
    """Between folders too, every arrow points down: no folder imports one that imports it back, however far
    round (the hooks' entry points above the processor they read, their kit below it)."""
    known = modules()
    rooms: dict[str, set[str]] = {}
    for module, path in known.items():
        rooms.setdefault(room_of(module), set()).update(
            room_of(t) for t in imports(module, path, known) if room_of(t) != room_of(module))
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(room: str, trail: list[str]) -> None:
        state[room] = 1
        for target in sorted(rooms.get(room, ())):
            if state.get(target) == 1:
                cycles.append(" -> ".join(trail[trail.index(target):] + [room, target]) if target in trail
                              else f"{room} -> {target}")
            elif target not in state:
                visit(target, trail + [room])
        state[room] = 2

    for room in sorted(rooms):
        if room not in state:
            visit(room, [])
    assert not cycles, "folders that import each other:\n" + "\n".join(cycles)


def test_sql_lives_in_the_store() -> None:
    offenders = []
    for path in modules().values():
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith(SQL_ALLOWED):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_WORDS.search(node.value):
                if node.value.lstrip().startswith(('"""', "The ", "`")) or "\n\n" in node.value:
                    continue  # a docstring that mentions a statement
                offenders.append(f"{relative}:{node.lineno}: {node.value[:60]!r}")
    assert not offenders, "SQL outside processor/store/:\n" + "\n".join(offenders)


def test_every_module_opens_with_a_line_saying_what_it_answers() -> None:
    missing = []
    for module, path in modules().items():
        tree = ast.parse(path.read_text())
        doc = ast.get_docstring(tree)
        if path.name == "__init__.py" and not tree.body:
            continue  # an empty package marker
        if not doc or not doc.splitlines()[0].strip():
            missing.append(module)
    assert not missing, "modules without a first docstring line: " + ", ".join(sorted(missing))


def test_the_layout_table_matches_the_tree() -> None:
    page = (REPO / "docs" / "architecture.md").read_text()
    start = page.index("## Layout")
    end = page.find("\n## ", start + 1)
    section = page[start: end if end >= 0 else len(page)]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    named: dict[str, list[str]] = {}
    for row in rows:
        where, what = row.split(" | ")[0], row.split(" | ")[1]
        for place in re.findall(r"`([^`]+)`", where):
            named[place] = re.findall(r"`(\w+)`", what)
    for package in ("processor",):
        for path in sorted((REPO / package).iterdir()):
            if path.name.startswith("__") or path.name.endswith(".pyc"):
                continue
            key = f"{package}/{path.name}/" if path.is_dir() else f"{package}/{path.name}"
            if path.is_dir() or path.suffix == ".py":
                assert any(k in (key, path.name) for k in named), f"docs/architecture.md layout table misses {key}"
    for place, modules in named.items():
        if not place.endswith("/") or not place.startswith("processor/"):
            continue
        folder = REPO / place
        assert folder.is_dir(), place
        for module in modules:
            if module.islower() and not module.startswith("engram"):
                assert (folder / f"{module}.py").exists() or (folder / module).is_dir(), f"{place}{module}"
