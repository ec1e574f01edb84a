"""Every secret kind the redaction tests know, as text a session would hold, with the raw secrets in each.

The cases come from the redaction tests themselves (``tests/redaction/test_rules.py``: the hand-written kinds, the keys
next to a service's name, the keys told by what surrounds them; ``tests/redaction/test_gitleaks_rules.py``: a sampled
token of every generated kind), so a kind added there is planted everywhere the planted-secret test looks.
Each raw secret is what the expected redaction replaced: read back by matching the expected text, markers as
wildcards, against the original.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from tests.redaction.test_gitleaks_rules import SAMPLED
from tests.redaction.test_rules import POSITIVE, SERVICE_KEYS, UNNAMED_KEYS

MIN_SECRET_CHARS = 8  # a shorter replaced piece (a 6-letter password) could occur by chance elsewhere
_MARKER = re.compile(r"\[REDACTED:[\w-]+\]")


@dataclass(frozen=True)
class Planted:
    kind: str
    text: str  # as a session would hold it: the secret in its context
    secrets: tuple[str, ...]  # what must never be found once it went through the door


def secrets_in(text: str, expected: str) -> tuple[str, ...]:
    """The parts of `text` that `expected` shows as markers."""
    pieces = _MARKER.split(expected)
    pattern = "(.+?)".join(re.escape(p) for p in pieces)
    match = re.fullmatch(pattern, text, re.DOTALL)
    assert match is not None, f"expected redaction does not line up with its text: {expected!r}"
    return tuple(piece for secret in match.groups() for piece in _pieces(secret))


def _pieces(secret: str) -> list[str]:
    """A multi-line secret (a key block) as its lines, each of which must be gone; the armour lines are not
    secret (``-----BEGIN … KEY-----``)."""
    lines = [line.strip() for line in re.split(r"\n|\\n", secret)]
    return [line for line in lines if len(line) >= MIN_SECRET_CHARS and not line.startswith("-----")]


def catalog() -> list[Planted]:
    planted = [Planted(case_id, text, secrets_in(text, expected))
               for case_id, text, expected in [*POSITIVE, *SERVICE_KEYS, *UNNAMED_KEYS]]
    planted += [Planted(kind, f"deploy with {token} now", (token,)) for kind, token in SAMPLED]
    # A string some case keeps as it is (an account id beside its token) is not a secret anywhere: the
    # generator that makes the cases' random strings gives the same one to cases that share a length.
    kept = "\n".join(expected for _, _, expected in [*POSITIVE, *SERVICE_KEYS, *UNNAMED_KEYS])
    planted = [Planted(p.kind, p.text, tuple(s for s in p.secrets if s not in kept)) for p in planted]
    return [p for p in planted if p.secrets]


def found_in(blob: bytes, secrets: set[str]) -> list[str]:
    """The secrets present in `blob`, as written or JSON-escaped (a JSON column escapes quotes and newlines)."""
    found = []
    for secret in secrets:
        forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
        if any(form.encode() in blob for form in forms):
            found.append(secret)
    return sorted(found)
