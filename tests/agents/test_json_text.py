"""Install and uninstall leave every agent's settings files byte for byte as they were, whatever their formatting
(processor/install/json_text.py under each agent's install): 2- or 4-space or tab indentation, one line, key order,
a final newline or none, comments where the agent reads them (the Gemini CLI); the user's edit made between
install and uninstall is kept and only Engram's entries go. Each formatting × each agent's file a row."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from processor.install import claude, codex, copilot, gemini, json_file, json_text, opencode, qwen
from processor.install.registration import Registration

USER = {
    "ui": {"theme": "GitHub", "hideTips": True},
    "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}]},
    "mcpServers": {"docs": {"command": "npx", "args": ["-y", "docs-mcp"]}},
    "model": "pro",
}
BARE = {"ui": {"theme": "GitHub"}}


def dumps(data: dict, **kwargs: object) -> str:
    return json.dumps(data, ensure_ascii=False, **kwargs)


COMMENTED = ('{\n  // the team\'s theme, see https://example.com/themes\n  "ui": {"theme": "GitHub"}, /* inline */\n'
             '  "hooks": {\n    "BeforeTool": [] // none yet\n  }\n}\n')

# (id, text, whether only an agent that reads comments can take it)
FORMATS: list[tuple[str, str, bool]] = [
    ("2 spaces", dumps(USER, indent=2) + "\n", False),
    ("4 spaces", dumps(USER, indent=4) + "\n", False),
    ("tabs", dumps(USER, indent="\t") + "\n", False),
    ("no final newline", dumps(USER, indent=2), False),
    ("one line", dumps(USER) + "\n", False),
    ("one line, compact", dumps(USER, separators=(",", ":")), False),
    ("keys in another order", dumps(dict(reversed(list(USER.items()))), indent=2) + "\n", False),
    ("blank lines and odd spacing", '{\n\n  "ui" :  { "theme": "GitHub" } ,\n\n  "model": "pro"\n\n}\n\n', False),
    ("nothing of hooks or servers", dumps(BARE, indent=2) + "\n", False),
    ("an empty object", "{}\n", False),
    ("an empty object, no newline", "{}", False),
    ("unicode kept as written", '{\n  "name": "Zoë \\u00e9",\n  "ui": {"theme": "Ünï"}\n}\n', False),
    ("comments", COMMENTED, True),
]

# Each agent's file: (id, reads comments, install into `folder`, uninstall from it, the file edited).
Agent = tuple[str, bool, Callable[[Registration, Path], object], Callable[[Path], object], str]
AGENT_FILES: list[Agent] = [
    ("Claude Code settings.json", False,
     lambda reg, d: claude.install(reg, settings_path=d / "settings.json", mcp_config_path=d / ".claude.json"),
     lambda d: claude.uninstall(settings_path=d / "settings.json", mcp_config_path=d / ".claude.json"),
     "settings.json"),
    ("Claude Code .claude.json", False,
     lambda reg, d: claude.install(reg, settings_path=d / "settings.json", mcp_config_path=d / ".claude.json"),
     lambda d: claude.uninstall(settings_path=d / "settings.json", mcp_config_path=d / ".claude.json"),
     ".claude.json"),
    ("Codex hooks.json", False, lambda reg, d: codex.install(reg, codex_dir=d),
     lambda d: codex.uninstall(codex_dir=d), "hooks.json"),
    ("Gemini settings.json", True, lambda reg, d: gemini.install(reg, path=d / "settings.json"),
     lambda d: gemini.uninstall(path=d / "settings.json"), "settings.json"),
    ("Qwen Code settings.json", True, lambda reg, d: qwen.install(reg, path=d / "settings.json"),
     lambda d: qwen.uninstall(path=d / "settings.json"), "settings.json"),
    ("Copilot CLI mcp-config.json", False, lambda reg, d: copilot.install(reg, copilot_dir=d),
     lambda d: copilot.uninstall(copilot_dir=d), "mcp-config.json"),
    ("opencode opencode.json", False, lambda reg, d: opencode.install(reg, folder=d),
     lambda d: opencode.uninstall(folder=d), "opencode.json"),
]
ENGRAM_KEYS = ("hooks", "mcpServers", "mcp")  # where the agents' files hold Engram's entries (opencode's: "mcp")


def cases() -> list:
    return [pytest.param(text, agent, id=f"{agent[0]}: {name}") for name, text, commented in FORMATS
            for agent in AGENT_FILES if agent[1] or not commented]


@pytest.mark.parametrize(("text", "agent"), cases())
def test_install_then_uninstall_gives_the_file_back_byte_for_byte(tmp_path: Path, registration: Registration,
                                                                  text: str, agent: Agent) -> None:
    _, comments, install, uninstall, name = agent
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    install(registration, tmp_path)
    installed = path.read_text(encoding="utf-8")
    assert installed != text and "recall_hook" in installed or "mcp_tools.bridge" in installed
    data = json_text.loads(installed, comments)
    assert {k: v for k, v in json_text.loads(text, comments).items() if k not in ENGRAM_KEYS} == {
        k: v for k, v in data.items() if k not in ENGRAM_KEYS}
    install(registration, tmp_path)  # twice: nothing changes the second time
    assert path.read_text(encoding="utf-8") == installed
    uninstall(tmp_path)
    assert path.read_bytes() == text.encode("utf-8")
    assert json_file.backups_of(path) == []  # back as it was: no backup left behind


@pytest.mark.parametrize(("text", "agent"), cases())
def test_the_users_edit_between_install_and_uninstall_is_kept(tmp_path: Path, registration: Registration,
                                                              text: str, agent: Agent) -> None:
    _, comments, install, uninstall, name = agent
    if "GitHub" not in text:
        pytest.skip("no setting of the user's to edit")
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    install(registration, tmp_path)
    path.write_text(path.read_text(encoding="utf-8").replace("GitHub", "Dracula"), encoding="utf-8")
    uninstall(tmp_path)
    assert path.read_text(encoding="utf-8") == text.replace("GitHub", "Dracula")
    assert json_file.backups_of(path)  # not back as it was before install: the backups stay


def _applied(diff: str, before: str) -> tuple[list[str], set[int]]:
    """The lines of `before` with the diff's hunks applied, and the lines (new numbering) its notes name."""
    old, new, noted = before.splitlines(), [], set()
    at = 0  # the next line of `old` not yet copied
    lines = diff.splitlines()[2:]
    i = 0
    while i < len(lines):
        header = lines[i]
        i += 1
        if header.startswith("@@ line "):
            noted.add(int(header.split()[2].rstrip(":")) - 1 - at + len(new))
            continue
        start, count = (int(n) for n in header.split()[1][1:].split(","))
        start = start - 1 if count else start
        new += old[at:start]
        at = start + count
        while i < len(lines) and not lines[i].startswith("@@"):
            if lines[i].startswith("+"):
                new.append(lines[i][1:])
            i += 1
    return new + old[at:], noted


@pytest.mark.parametrize(("text", "agent"), cases())
def test_the_diff_shows_exactly_the_lines_that_change(tmp_path: Path, registration: Registration, text: str,
                                                      agent: Agent) -> None:
    """Install's and uninstall's diffs, applied to the file, give what was written; a line of the user's that
    only gains or loses a comma (or the final newline) is named, never shown; install shows no line it removes."""
    _, _, install, uninstall, name = agent
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    for action in (lambda: install(registration, tmp_path), lambda: uninstall(tmp_path)):
        [change] = [c for c in action().changes if c.path.name == name]
        diff = change.diff()
        assert diff.startswith(f"--- {path}\n+++ {path}\n"), diff
        applied, noted = _applied(diff, change.before_text)
        after = change.after_text.splitlines()
        assert len(applied) == len(after), diff
        for number, (shown, written) in enumerate(zip(applied, after, strict=True)):
            if number in noted:
                assert shown != written and shown.replace(",", "") == written.replace(",", ""), (number, diff)
            else:
                assert shown == written, (number, diff)
        if "\n" in text.strip() and "GitHub" in text:  # a file of many lines: only Engram's lines are shown
            shown_lines = [line for line in diff.splitlines()[2:] if line[:1] in "+-"]
            assert not any(word in line for line in shown_lines for word in ("GitHub", "audit.sh", "docs-mcp")), diff


def test_a_file_install_created_goes_with_the_folder_it_made(tmp_path: Path, registration: Registration) -> None:
    folder = tmp_path / "home" / ".claude"
    claude.install(registration, settings_path=folder / "settings.json", mcp_config_path=tmp_path / ".claude.json")
    claude.uninstall(settings_path=folder / "settings.json", mcp_config_path=tmp_path / ".claude.json")
    assert not folder.exists() and not (tmp_path / ".claude.json").exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["home"]


@pytest.mark.parametrize(("before", "after", "reverses"), [
    pytest.param({"a": 1}, {"a": 1, "b": [1, {"c": None}]}, True, id="a member added"),
    # A member added goes at the end of its object: put back, the middle one is last (the same object).
    pytest.param({"a": 1, "b": 2, "c": 3}, {"a": 1, "c": 3}, False, id="a member in the middle removed"),
    pytest.param({"a": [1, 2, 3]}, {"a": [1, 3, 4]}, True, id="list elements removed and added"),
    pytest.param({"a": {"b": "x"}}, {"a": {"b": "y"}}, True, id="a value rewritten where it stands"),
    pytest.param({"a": [{"x": 1}]}, {"a": []}, True, id="the only element removed"),
])
@pytest.mark.parametrize("indent", [2, 4, "\t", None])
def test_a_patch_changes_only_what_differs_and_reverses_exactly(before: dict, after: dict, reverses: bool,
                                                                indent: int | str | None) -> None:
    text = json.dumps(before, indent=indent)
    patched = json_text.patch(text, before, after)
    assert json.loads(patched) == after
    back = json_text.patch(patched, after, before)
    assert json.loads(back) == before
    assert (back == text) is reverses
