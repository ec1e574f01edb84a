"""Which gitleaks rules does Engram's redactor carry, and in what form? This script answers by
regenerating them.

    python -m processor.redaction.secret_rules.generate GITLEAKS_REPO_OR_TOML [--rules-dir DIR]

It reads gitleaks' ``config/gitleaks.toml`` (MIT, see ``GITLEAKS-LICENSE`` next to this file),
keeps the rules listed in ``SELECTED`` and writes two files:

* ``gitleaks_rules.py``: for each rule its literal prefix and the regex of the rest, in the form
  ``redact.py`` compiles (a pattern that starts with the literal, so CPython's ``re`` finds
  candidates with a fast substring scan), and gitleaks' entropy threshold.
* ``tests/data/gitleaks_examples.json``: test data for each rule, the literal true- and
  false-positive strings of gitleaks' Go rule files (``cmd/generate/config/rules/*.go``, when
  ``--rules-dir`` or a repository is given) plus positives sampled from the rule's own regex.
  Every string is stored split before its prefix's last character, so nothing in the repository
  looks like a live credential to a push-protection scanner; the tests join the pieces.

Only prefix-anchored rules are selected: a regex that starts with a distinctive literal
(``ghp_``, ``glpat-``, ``dp.pt.``, ``hvs.``, ``AGE-SECRET-KEY-1``). gitleaks' keyword-context rules
(``[\\w.-]{0,50}?(?:datadog)...``) start with a character class, would make ``re`` try a match at
every position, and are left to ``redact.py``'s hand-written rules.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
MODULE = HERE / "gitleaks_rules.py"
EXAMPLES = REPO / "tests" / "data" / "gitleaks_examples.json"

# Rule ids kept from gitleaks. Left out on purpose: rules already in redact.py in a broader form
# (aws, github, gitlab-pat, slack, stripe, jwt, twilio SK, npm, openai, anthropic, pypi, gcp,
# digitalocean, sendgrid, private-key), rules without a literal start (generic, keyword-context,
# facebook, azure), and prefixes common in ordinary text: octopus ``API-``, vault's legacy ``s.``
# (taken only as ``hvs.``), square ``EAAA``.
SELECTED: tuple[str, ...] = (
    "1password-secret-key",
    "1password-service-account-token",
    "adobe-client-secret",
    "age-secret-key",
    "airtable-personnal-access-token",
    "alibaba-access-key-id",
    "anthropic-admin-api-key",
    "artifactory-api-key",
    "artifactory-reference-token",
    "authress-service-client-access-key",
    "aws-amazon-bedrock-api-key-long-lived",
    "clickhouse-cloud-api-secret-key",
    "clojars-api-token",
    "cloudflare-origin-ca-key",
    "databricks-api-token",
    "doppler-api-token",
    "duffel-api-token",
    "dynatrace-api-token",
    "easypost-api-token",
    "easypost-test-api-token",
    "flutterwave-encryption-key",
    "flutterwave-public-key",
    "flutterwave-secret-key",
    "flyio-access-token",
    "frameio-api-token",
    "gitlab-cicd-job-token",
    "gitlab-deploy-token",
    "gitlab-feature-flag-client-token",
    "gitlab-feed-token",
    "gitlab-incoming-mail-token",
    "gitlab-kubernetes-agent-token",
    "gitlab-oauth-app-secret",
    "gitlab-pat-routable",
    "gitlab-ptt",
    "gitlab-rrt",
    "gitlab-runner-authentication-token",
    "gitlab-runner-authentication-token-routable",
    "gitlab-scim-token",
    "gitlab-session-cookie",
    "grafana-api-key",
    "grafana-cloud-api-token",
    "grafana-service-account-token",
    "harness-api-key",
    "hashicorp-tf-api-token",
    "heroku-api-key-v2",
    "huggingface-organization-api-token",
    "infracost-api-token",
    "intra42-client-secret",
    "linear-api-key",
    "notion-api-token",
    "openshift-user-token",
    "perplexity-api-key",
    "planetscale-api-token",
    "planetscale-oauth-token",
    "planetscale-password",
    "postman-api-token",
    "prefect-api-token",
    "pulumi-api-token",
    "readme-api-token",
    "rubygems-api-token",
    "scalingo-api-token",
    "sendinblue-api-token",
    "sentry-org-token",
    "sentry-user-token",
    "settlemint-application-access-token",
    "settlemint-personal-access-token",
    "settlemint-service-access-token",
    "shippo-api-token",
    "shopify-access-token",
    "shopify-custom-access-token",
    "shopify-private-app-access-token",
    "shopify-shared-secret",
    "slack-app-token",
    "slack-config-access-token",
    "slack-config-refresh-token",
    "sourcegraph-access-token",
    "vault-batch-token",
    "vault-service-token",
)

# Alternatives dropped from a selected rule: too short or too common a prefix to scan for.
DROPPED_ALTERNATIVES = {
    "vault-service-token": r"s\.(?i:[a-z0-9]{24})",
    "sourcegraph-access-token": "[a-fA-F0-9]{40}",  # any 40-hex string: every git SHA
}

# gitleaks' end-of-token group; redact.py uses a lookahead instead (the token's end is not replaced).
_TRAILERS = (
    r"""(?:[\x60'"\s;]|\\[nr]|$|\b)""",
    r"""(?:[\x60'"\s;]|\\[nr]|$)""",
    r"(?:[^\w-]|\z)",
    r"(?:[^a-zA-Z0-9+/]|\z)",
    r"""(?:$|[\\'"\x60\s<),])""",
    r"\b",
)
_END = r"(?![A-Za-z0-9_-])"
_META = set(".^$*+?{}[]\\|()")


def _strip(regex: str) -> str:
    """The rule's token regex without gitleaks' boundary wrappers."""
    changed = True
    while changed:
        changed = False
        for head in (r"(?i)", r"\b"):
            if regex.startswith(head):
                regex, changed = regex[len(head) :], True
        for tail in _TRAILERS:
            if regex.endswith(tail):
                regex, changed = regex[: -len(tail)], True
        if regex.startswith("(") and not regex.startswith("(?") and _closing(regex, 0) == len(regex) - 1:
            regex, changed = regex[1:-1], True
    return regex


def _closing(regex: str, start: int) -> int:
    """Index of the parenthesis closing the one at ``start``."""
    depth, i, in_class = 0, start, False
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if regex[i + 1 : i + 2] == "]":
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"unbalanced: {regex}")


def _split_top(group_body: str) -> list[str]:
    """The top-level ``|`` alternatives of a group's body."""
    parts, depth, i, start, in_class = [], 0, 0, 0, False
    while i < len(group_body):
        c = group_body[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(group_body[start:i])
            start = i + 1
        i += 1
    return [*parts, group_body[start:]]


def _alternatives(regex: str) -> list[str]:
    """``a|b`` and ``(?:a|b)rest`` as ``[a, b]`` and ``[arest, brest]``; others as themselves."""
    top = _split_top(regex)
    if len(top) > 1:
        return top
    if regex.startswith("(?:"):
        end = _closing(regex, 0)
        rest = regex[end + 1 :]
        if not rest.startswith(("?", "*", "+", "{")):
            return [alt + rest for alt in _split_top(regex[3:end])]
    return [regex]


def _go_to_python(regex: str) -> str:
    """RE2 syntax Python's ``re`` lacks: a mid-pattern ``(?i)`` (scoped to the rest of its
    group in RE2) becomes ``(?i:...)``; POSIX classes become ranges."""
    regex = regex.replace("[[:alnum:]]", "[A-Za-z0-9]").replace(r"\z", "$")
    while (at := regex.find("(?i)")) >= 0:
        # The scope ends where the enclosing group closes, or at the end.
        depth, i, in_class = 0, at + 4, False
        while i < len(regex):
            c = regex[i]
            if c == "\\":
                i += 2
                continue
            if in_class:
                in_class = c != "]"
            elif c == "[":
                in_class = True
            elif c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    break
                depth -= 1
            i += 1
        regex = regex[:at] + "(?i:" + regex[at + 4 : i] + ")" + regex[i:]
    return regex


def _literal_prefix(regex: str) -> tuple[str, str]:
    """(prefix as plain text, the rest of the regex)."""
    out, i = [], 0
    while i < len(regex):
        c = regex[i]
        if c == "\\" and i + 1 < len(regex) and not regex[i + 1].isalnum():
            out.append(regex[i + 1])
            i += 2
            continue
        if c in _META:
            break
        out.append(c)
        i += 1
    # A quantifier applies to the last literal character: give it back to the body.
    if i < len(regex) and regex[i] in "*+?{" and out:
        last = out.pop()
        i -= 2 if regex[i - 2 : i] == "\\" + last else 1
    return "".join(out), regex[i:]


def _head_width(regex: str) -> tuple[int, str, str] | None:
    """For a rule such as ``[a-z0-9]{14}\\.atlasv1\\.``: (14, head class, rest)."""
    m = re.match(r"(?:\(\?i\))?(\[[^\]]+\])\{(\d+)\}(.*)", regex)
    return (int(m[2]), m[1], m[3]) if m else None


# ---- sampling strings from a regex, for positive test data ------------------------------------


def _class_chars(items: list[tuple[Any, Any]]) -> list[str]:
    chars: list[str] = []
    negate = False
    for op, av in items:
        if op is sre_constants.NEGATE:
            negate = True
        elif op is sre_constants.LITERAL:
            chars.append(chr(av))
        elif op is sre_constants.RANGE:
            chars.extend(chr(c) for c in range(av[0], av[1] + 1))
        elif op is sre_constants.CATEGORY:
            if av is sre_constants.CATEGORY_DIGIT:
                chars.extend("0123456789")
            elif av is sre_constants.CATEGORY_WORD:
                chars.extend("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
    if negate:
        return [c for c in "abcdefghijklmnopqrstuvwxyz0123456789" if c not in chars]
    # Prefer letters and digits: a sample full of '=' or '.' would be a poor token.
    alnum = [c for c in chars if c.isalnum()]
    return alnum or chars


def _sample(parsed: Any, rng: random.Random) -> str:
    out: list[str] = []
    for op, av in parsed:
        if op is sre_constants.LITERAL:
            out.append(chr(av))
        elif op is sre_constants.IN:
            out.append(rng.choice(_class_chars(av)))
        elif op is sre_constants.ANY:
            out.append(rng.choice("abcdef0123456789"))
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT):
            low, high, sub = av
            count = low if low else min(1, high)
            out.extend(_sample(sub, rng) for _ in range(count))
        elif op is sre_constants.SUBPATTERN:
            out.append(_sample(av[-1], rng))
        elif op is sre_constants.BRANCH:
            out.append(_sample(av[1][0], rng))
        elif op is sre_constants.CATEGORY:
            out.append("0" if av is sre_constants.CATEGORY_DIGIT else "a")
    return "".join(out)


def _entropy(text: str) -> float:
    counts = {c: text.count(c) for c in set(text)}
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


# ---- examples from the Go rule files ---------------------------------------------------------

_GO_LITERAL = re.compile(r"(?<![(\w])`([^`\n]*)`")


def _go_examples(rules_dir: Path | None, rule_id: str) -> tuple[list[str], list[str]]:
    """The literal true- and false-positive strings of the Go function defining ``rule_id``."""
    if rules_dir is None:
        return [], []
    for path in sorted(rules_dir.glob("*.go")):
        source = path.read_text(encoding="utf-8")
        for chunk in source.split("\nfunc ")[1:]:
            if not re.search(rf'RuleID:\s*"{re.escape(rule_id)}"', chunk):
                continue
            tps_at = re.search(r"\btps\s*:?=", chunk)
            fps_at = re.search(r"\bfps\s*:?=", chunk)
            end = re.search(r"\breturn\b", chunk)
            stop = end.start() if end else len(chunk)
            tps_text = chunk[tps_at.start() : fps_at.start() if fps_at else stop] if tps_at else ""
            fps_text = chunk[fps_at.start() : stop] if fps_at else ""
            tps = [s for line in tps_text.splitlines() for s in _GO_LITERAL.findall(line.split("//")[0])]
            fps = [s for line in fps_text.splitlines() for s in _GO_LITERAL.findall(line.split(" // ")[0])]
            return tps, fps
    return [], []


def _split(text: str, prefix: str) -> list[str]:
    """``text`` cut before the last character of each occurrence of ``prefix``."""
    if not prefix or prefix not in text:
        return [text]
    cut = prefix[:-1]
    pieces, start = [], 0
    for m in re.finditer(re.escape(prefix), text):
        pieces.append(text[start : m.start() + len(cut)])
        start = m.start() + len(cut)
    return [*pieces, text[start:]]


# ---- output ----------------------------------------------------------------------------------


def build(toml_path: Path, rules_dir: Path | None, commit: str) -> tuple[str, dict[str, Any]]:
    config = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    by_id = {rule["id"]: rule for rule in config["rules"]}
    missing = [rule_id for rule_id in SELECTED if rule_id not in by_id]
    if missing:
        raise SystemExit(f"not in {toml_path}: {missing}")
    rows: list[tuple[str, str, str, int, str, float]] = []
    examples: dict[str, Any] = {}
    for rule_id in SELECTED:
        rule = by_id[rule_id]
        regex = _strip(rule["regex"])
        ignore_case = rule["regex"].startswith("(?i)")
        entropy = float(rule.get("entropy", 0.0))
        dropped = DROPPED_ALTERNATIVES.get(rule_id)
        positives: list[str] = []
        prefixes: list[str] = []
        compiled: list[re.Pattern[str]] = []
        for n, alternative in enumerate(_alternatives(regex)):
            if dropped and alternative == dropped:
                continue
            alternative = _go_to_python(alternative)
            head = _head_width(alternative)
            if head is not None:
                width, head_class, alternative = head
            else:
                width, head_class = 0, ""
            # A case-insensitive literal inside the token, such as ``(?-i:atlasv1)``, is a literal.
            alternative = re.sub(r"\(\?-i:([A-Za-z0-9_]+)\)", r"\1", alternative)
            prefix, body = _literal_prefix(alternative)
            if ignore_case:
                # The prefix stays case-sensitive (as written, as the services issue it): the fast
                # literal scan needs it so. The rest keeps gitleaks' case-insensitivity.
                body = f"(?i:{body})"
                head_class = head_class.replace("a-z", "a-zA-Z")
            if len(prefix) < 3:
                raise SystemExit(f"{rule_id}: no literal prefix in {alternative!r}")
            re.compile(re.escape(prefix) + body)  # fails here, not at import, if not Python syntax
            rows.append((rule_id, prefix, body, width, head_class, entropy))
            compiled.append(re.compile((f"{head_class}{{{width}}}" if width else "") + re.escape(prefix) + body))
            prefixes.append(prefix)
            rng = random.Random(f"{rule_id}:{n}")
            for _attempt in range(50):
                head_text = _sample(sre_parse.parse(head_class + f"{{{width}}}"), rng) if width else ""
                token = head_text + prefix + _sample(sre_parse.parse(body), rng)
                if _entropy(token) > entropy:
                    break
            else:
                raise SystemExit(f"{rule_id}: no sample above entropy {entropy}")
            positives.append(token)
        tps, fps = _go_examples(rules_dir, rule_id)
        # Keep the gitleaks examples that carry one of the kept prefixes (not, say, vault's ``s.``).
        # Only whole examples: a Go literal that is a fragment of a concatenation does not match.
        tps = [t for t in tps if any(p in t for p in prefixes) and any(c.search(t) for c in compiled)]
        examples[rule_id] = {
            "sampled": [_split(t, p) for t, p in zip(positives, prefixes, strict=True)],
            "gitleaks_positive": [_split(t, next(p for p in prefixes if p in t)) for t in tps],
            "gitleaks_negative": [_split(t, next((p for p in prefixes if p in t), "")) for t in fps],
        }
    lines = [
        f'"""Secret-token rules generated from gitleaks {commit[:12]} (config/gitleaks.toml): which',
        "prefix-anchored credential formats the redactor knows beyond its hand-written rules.",
        "",
        "Generated by processor/redaction/secret_rules/generate.py; do not edit. The rules are derived from",
        "gitleaks (https://github.com/gitleaks/gitleaks), Copyright (c) 2019 Zachary Rice, MIT license:",
        "see GITLEAKS-LICENSE in this folder.",
        '"""',
        "",
        "# ruff: noqa: E501  (generated data: one rule a line)",
        "",
        "from __future__ import annotations",
        "",
        "GITLEAKS_COMMIT = " + repr(commit),
        "",
        "# (kind, literal prefix, regex of the rest, width of a fixed head before the prefix, the head's",
        "# character class, gitleaks' minimum Shannon entropy of the token)",
        "RULES: tuple[tuple[str, str, str, int, str, float], ...] = (",
        *(f"    {row!r}," for row in rows),
        ")",
        "",
    ]
    return "\n".join(lines), examples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a gitleaks checkout or bare repository, or a gitleaks.toml")
    parser.add_argument("--rules-dir", type=Path, help="cmd/generate/config/rules of a checkout (for examples)")
    args = parser.parse_args(argv)
    source: Path = args.source
    rules_dir: Path | None = args.rules_dir
    commit = "unknown"
    if source.is_file():
        toml_path = source
    elif (source / "config" / "gitleaks.toml").is_file():  # a checkout
        toml_path = source / "config" / "gitleaks.toml"
        rules_dir = rules_dir or source / "cmd" / "generate" / "config" / "rules"
        commit = _git(source, "rev-parse", "HEAD").strip() or commit
    else:  # a bare repository: export the two inputs into a scratch folder
        import tempfile

        scratch = Path(tempfile.mkdtemp(prefix="gitleaks-"))
        commit = _git(source, "rev-parse", "HEAD").strip()
        toml_path = scratch / "gitleaks.toml"
        toml_path.write_text(_git(source, "show", "HEAD:config/gitleaks.toml"), encoding="utf-8")
        rules_dir = scratch / "rules"
        rules_dir.mkdir()
        for name in _git(source, "ls-tree", "--name-only", "HEAD", "cmd/generate/config/rules/").split():
            if name.endswith(".go"):
                (rules_dir / Path(name).name).write_text(_git(source, "show", f"HEAD:{name}"), encoding="utf-8")
    module, examples = build(toml_path, rules_dir, commit)
    MODULE.write_text(module, encoding="utf-8")
    EXAMPLES.parent.mkdir(parents=True, exist_ok=True)
    EXAMPLES.write_text(json.dumps(examples, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(SELECTED)} gitleaks rules -> {MODULE.relative_to(REPO)}, {EXAMPLES.relative_to(REPO)}")
    return 0


def _git(repo: Path, *args: str) -> str:
    git_dir = repo if (repo / "HEAD").is_file() and not (repo / ".git").exists() else repo / ".git"
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True,
                          text=True).stdout


if __name__ == "__main__":
    sys.exit(main())
