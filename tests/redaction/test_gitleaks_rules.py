"""Does the redactor catch every token format generated from gitleaks, on gitleaks' own examples,
and leave its false-positive examples and ordinary developer text alone?

tests/data/gitleaks_examples.json is written by processor/redaction/secret_rules/generate.py. Each
string there is stored in pieces (cut inside its prefix, so that no file in the repository looks
like a live credential); the tests join them.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from pathlib import Path

import pytest

from processor.redaction import REDACTION_KINDS, redact
from processor.redaction.secret_rules.gitleaks_rules import RULES

EXAMPLES = json.loads((Path(__file__).parents[1] / "data" / "gitleaks_examples.json").read_text(encoding="utf-8"))
GENERATED_KINDS = sorted({kind for kind, *_ in RULES})
MARKER = re.compile(r"\[REDACTED:([\w-]+)\]")


def _cases(field: str) -> list[tuple[str, str]]:
    return [(kind, "".join(pieces)) for kind in GENERATED_KINDS for pieces in EXAMPLES[kind][field]]


SAMPLED = _cases("sampled")
GITLEAKS_POSITIVE = _cases("gitleaks_positive")
GITLEAKS_NEGATIVE = _cases("gitleaks_negative")


def test_every_generated_rule_has_examples_and_a_kind() -> None:
    assert set(EXAMPLES) == set(GENERATED_KINDS)
    assert len(GENERATED_KINDS) >= 60
    assert set(GENERATED_KINDS) <= set(REDACTION_KINDS)
    for kind in GENERATED_KINDS:
        assert EXAMPLES[kind]["sampled"], kind
    assert len(GITLEAKS_POSITIVE) >= 30 and len(GITLEAKS_NEGATIVE) >= 30


def _secret_is_gone(token: str, text: str) -> bool:
    """No run of 12 characters of ``token`` past its prefix survives in ``text``."""
    tail = token[-12:]
    return tail not in text


@pytest.mark.parametrize(("kind", "token"), SAMPLED, ids=[f"{k}-{i}" for i, (k, _) in enumerate(SAMPLED)])
@pytest.mark.parametrize(
    "context",
    ["{}", "deploy with {} now", "TOKEN={}", '{{"key": "{}"}}', "export SERVICE_CREDENTIAL='{}'", "-H 'X: {}'"],
)
def test_sampled_token_is_redacted_bare_and_in_context(kind: str, token: str, context: str) -> None:
    text = context.format(token)
    out = redact(text)
    assert _secret_is_gone(token, out), out
    if context in ("{}", "deploy with {} now"):  # bare: one token, one marker
        assert len(MARKER.findall(out)) == 1, out


@pytest.mark.parametrize(
    ("kind", "line"), GITLEAKS_POSITIVE, ids=[f"{k}-{i}" for i, (k, _) in enumerate(GITLEAKS_POSITIVE)]
)
def test_gitleaks_positive_example_is_redacted(kind: str, line: str) -> None:
    out = redact(line)
    assert MARKER.search(out), out
    # The token: from a prefix of the rule to the end of its run of token characters.
    prefixes = [prefix for k, prefix, *_ in RULES if k == kind and prefix in line]
    token = re.search(re.escape(prefixes[0]) + r"[\w.+/=-]*", line)
    assert token is not None
    assert token[0][len(prefixes[0]) :][:16] not in out, out


@pytest.mark.parametrize(
    ("kind", "line"), GITLEAKS_NEGATIVE, ids=[f"{k}-{i}" for i, (k, _) in enumerate(GITLEAKS_NEGATIVE)]
)
def test_gitleaks_negative_example_is_left_alone(kind: str, line: str) -> None:
    out = redact(line)
    if line.startswith("DATABRICKS_TOKEN="):
        # gitleaks turns this value down for its shape (a "g" in a hex token); Engram's assignment
        # rule takes any literal under a secret's name, preferring a stray false positive to a leak.
        assert MARKER.findall(out) == ["token-assignment"]
    else:
        assert out == line


BENIGN = [
    hashlib.sha1(b"a").hexdigest(),
    "commit " + hashlib.sha1(b"b").hexdigest() + "\nMerge: " + hashlib.sha1(b"c").hexdigest()[:7],
    str(uuid.UUID(int=0xDEADBEEF << 64)),
    "id: " + str(uuid.UUID(int=12345678901234567890)),
    "<img src=\"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAYAAAAf8/9hAAAAGXRFWHRTb2Z0d2FyZQBBZG9iZSBJ"
    "bWFnZVJlYWR5ccllPAAAAm5JREFUeNqMk01IVFEUx8+9782bD2f8yCRTU0vLKMsKSyKiRUQbC4ogWkSbaNWqVbRp0a5FbYKgRbUKgoiCiKB"
    'CWkRUi8ygLDOzMDRH5+ON8+bde/q/GceZ0UQv/Hjn3nPP/53z3jmCmYlIEAmuiUQRKw5YsTUvPb2dY83DiaFPvm8lxlPdpqGzvLWVqDgJr+'
    'cmFJVT2x6JsaS31m9Y59bU2Wt3FmXZDDVzW9Va3VVQ3WXFIY0fhbbQPvOTJNZ3vjxoOfS0rRAYbsF3sT/a4j0Z1k4aNCXf7J2xmeRUt1z99Ix'
    'wUO8+mrqKm1nnuXBpt0ip+kwSJiakqn3dWKUeVFLk8z2EHTkHBVY2iEfjOjExvTf4J7QvR2iYUYMvCxHDS2R3ZR+1yJB4hGwwD2HzeodPaX4'
    'Q3mL3v+yfjg7ENnW+ZVvD4Ng/WHNP/t3+bX1M2jKgzSvlzZrAAAAAElFTkSuQmCC">',
    "const DIGEST = '" + hashlib.sha256(b"d").hexdigest() + hashlib.sha512(b"e").hexdigest() + "';",
    "h = bytes.fromhex('" + hashlib.sha256(b"f").hexdigest() + "')",
    "token = None",
    "password: str",
    'api_key=os.environ["X"]',
    "token: Optional[str] = None",
    "password = config.settings.value",
    "token=os.environ.get",
    "secret = self.token",
    "api_key = settings.db2_api_key",
    "key-value store; the monkey-patch; the turnkey-solution",
    "pat = re.compile(r'\\d+'); sat.solve(); patch.object(x)",
    "shape: (32, 32); sha256~ is not a token; ops_eyJ in a sentence",
    "dapi is the Databricks API; pplx- prefixed keys come from Perplexity",
    "the AGE-SECRET-KEY-1 prefix marks an age identity",
    "sha256:" + hashlib.sha256(b"layer").hexdigest(),
    "docker pull ghcr.io/org/img@sha256:" + hashlib.sha256(b"g").hexdigest(),
    "npm i @scope/pkg@1.2.3 && pip install pkg==1.2.3",
    "mysql -u root -p\nmysql --protocol=tcp -P 3306 -h db",
    "Twilio auth tokens are 32 hex characters; set TWILIO_AUTH_TOKEN in the environment.",
    "datadog api key rotation, see commit " + hashlib.sha1(b"dd").hexdigest()[:12],
]


@pytest.mark.parametrize("text", BENIGN)
def test_ordinary_developer_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_generated_rules_start_with_a_literal() -> None:
    """The performance design of redact.py: a literal first, so ``re`` scans for it."""
    for kind, prefix, _body, _head, _head_class, _entropy in RULES:
        assert len(prefix) >= 3, kind
        assert re.escape(prefix)  # a literal, whatever its characters
