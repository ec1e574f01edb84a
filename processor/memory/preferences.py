"""Standing preferences and instructions in a user's own words, found without an LLM.

A user message that says how things should be done from now on — "always …", "never …", "I prefer …",
"I'd rather …", "from now on …", "please keep …", "don't … again" — becomes a memory of its own: kind
``preference`` (a taste: prefer, rather) or ``convention`` (a rule: always, never, from now on…),
importance high, so it reaches the SessionStart digest and ranks for analogous tasks.

Only the user's own words count. Left out before anything is matched: fenced code blocks, ``>`` quoted
lines, tagged output Claude Code pastes (``<bash-stdout>…``), lines that look like tool output (logs,
tracebacks, test reports, prompts); in a sentence, inline code and "double-quoted" spans are not read for
the cue (they may still name what the rule is about). Not standing: questions, "never mind",
"don't worry about X, just fix Y" (a "don't" counts only with a word that makes it last: ever, again,
anymore, from now on, in future…), "always"/"never" said about something ("it always fails") rather
than asked of someone, and the middle of a long message (over 2,000 characters of prose: a pasted page;
its first and last paragraphs are read). Not standing either: a question anywhere in the sentence ("…, is
there?!"), venting ("I hate wasting credits …"), a preference about this or that thing in hand ("I prefer
our original message for it") with nothing that makes it last, and a follow-up whose rule is only what was said
before ("Please keep that in mind for all ledger code").

Scope: ``project`` when the statement names something of the project — a path or file, a code identifier
or backticked span, or the project's own name — else ``global``. English cues only; any other text is
simply not matched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from processor.capture.optout import own_words
from processor.memory.findings import Finding, Round
from processor.memory.identity import episode_id
from processor.memory.pasted import OUTPUT_LINE
from processor.memory.supersede import subjects
from processor.memory.verbatim import entities_of, summarize
from processor.redaction import redact

MAX_SCAN_CHARS = 20_000  # of one message: a standing instruction is not buried in a megabyte paste
LONG_PROSE_CHARS = 2_000
MIN_WORDS = 4
MAX_SENTENCE_CHARS = 400
# A rule is kept whole: the sentences of the same message that go on with it ("…the moment you know what you're
# working on.. if you are already on a feature branch, check that it is the right one. if not, always go back to
# main, pull the latest, and branch off from there.") up to the length of one long sentence (a digest line shows
# it whole: ``processor.recall.digest.MAX_LINE_CHARS``).
MAX_RULE_CHARS = MAX_SENTENCE_CHARS
_GOES_ON = re.compile(r"^\W*(?:if|when|whenever|unless|otherwise|else|then|and|in that case|in which case|that way|"
                      r"this way|so that|instead)\b", re.IGNORECASE)

_FENCED = re.compile(r"^[ \t]*(```|~~~).*?(?:^[ \t]*\1[ \t]*$|\Z)", re.DOTALL | re.MULTILINE)
_TAGGED = re.compile(r"<([a-z][\w-]*)>.*?(?:</\1>|\Z)", re.DOTALL)
_QUOTED_LINE = re.compile(r"^[ \t]*>.*$", re.MULTILINE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")

_STANDING_TIME = r"from now on|going forward|from here on|in (?:the )?future|for future (?:sessions|work)|" \
                 r"next time|every time|each time|whenever|as a (?:general )?rule"
_ALWAYS_NEVER = (
    r"^(?:please\s+|and\s+|but\s+|also,?\s+)?(?:always|never)\b"
    r"|\b(?:you|we|claude)\s+(?:should\s+|must\s+|shall\s+|will\s+|need\s+to\s+|have\s+to\s+)?(?:always|never)\b"
    r"|\bplease\s+(?:always|never)\b"
    r"|\b(?:make sure|be sure|remember)\s+(?:to\s+|that\s+)?(?:you\s+)?(?:always|never)\b"
    r"|\bi\s+(?:always|never)\s+(?:want|use|prefer|like|run|write|keep|put|need)\b")
_PREFER = r"\b(?:i|we)\s+(?:would\s+|'d\s+|really\s+|generally\s+|usually\s+|strongly\s+|do\s+)?prefer\b" \
          r"|\b(?:i|we)'d\s+rather\b|\b(?:i|we)\s+would\s+rather\b|\b(?:my|our)\s+preference\b"
# "Don't … again" asked of someone: the "don't" opens its clause (an imperative, not "I don't feel like …"), and
# the word that makes it last is in the same clause.
_DONT_LASTING = r"(?:^|[,;:]\s*|\b(?:please|and|but|so|just)\s+)(?:don't|do not|dont)\b[^.,;]{0,80}?" \
                r"\b(?:again|any ?more|ever)\b"
_KEEP = r"\bplease\s+keep\b|\balways\s+keep\b"
# "No commits directly to main, ever!!!", "… should not ever be overwritten by you, ever.": a negation that ", ever"
# closes (cipher-box's user, twice in one session).
_NOT_EVER = (r"^\W*no\s+\w+(?:\s+[^\s,.!?]+){1,12},?\s+ever\b\W*$"
             r"|\b(?:should|must|shall)\s+(?:not|never)\b[^.!?]{0,100},\s*ever\b\W*$")
_PREFERENCE = re.compile(_PREFER, re.IGNORECASE)
_CONVENTION = re.compile("|".join((_STANDING_TIME, _ALWAYS_NEVER, _DONT_LASTING, _KEEP, _NOT_EVER)), re.IGNORECASE)
# A quoted command the user says does not work for them, with what makes it last ("`git add .` would not work in
# my case when I have uncommitted changes to `claude-dev-log-diary`"): a rule against it, read in the sentence as
# written (the command is in backticks). What makes it last is whom or where it does not work for; "`make` doesn't
# work yet" or "… doesn't work because of a type error" is a state of the moment (a bug), not a rule.
DOES_NOT_WORK = r"(?:would not|wouldn't|will not|won't|does not|doesn't|do not|don't|cannot|can't)\s+work\b"
_NOT_FOR_US = re.compile(r"`[^`\n]{2,60}`[^`.;!?]{0,40}?\b" + DOES_NOT_WORK + r"[^.;!?]{0,30}?"
                         r"\b(?:in my case|in our case|for me|for us|here|"
                         r"in this (?:repo|repository|project|codebase))\b", re.IGNORECASE)
# Venting about the work in hand is not a rule about how to work; nor, mostly, is a shout ("it broke again!!") —
# unless it shouts a rule ("no commits directly to main, ever!!!": ``_shouted_rule``).
_VENTING = re.compile(r"\b(?:hate|hated|annoy\w*|frustrat\w*|tired of|sick of|fed up|ridiculous|stupid|wtf|damn\w*|"
                      r"ugh+|seriously|wasting|wasted|waste of|sigh)\b|!!|\?!", re.IGNORECASE)
_SHOUT = re.compile(r"!!|\?!")
# This or that thing, here and now: a remark about the current work (unless something makes it last).
_DEICTIC = re.compile(r"\b(?:this|that|these|those|it|now|today|currently|for now|at the moment|right now|original|"
                      r"previous|above|below|earlier|so far)\b", re.IGNORECASE)
_STANDING = re.compile(_STANDING_TIME + r"|\b(?:always|never|generally|in general|by default|every|any|all)\b",
                       re.IGNORECASE)
_NOT_STANDING = re.compile(r"\b(?:never\s*mind|don't worry|do not worry|no worries|don't bother)\b", re.IGNORECASE)
# A follow-up whose rule is what was said before ("Please keep that in mind for all ledger code", "always do it
# this way"): with no referent of its own it is never a rule (the sentence it points at is kept, if it is one).
_REFERENT = re.compile(r"\b(?:keep|bear|have)\s+(?:that|this|it|these|those)\s+in\s+mind\b"
                       r"|\b(?:remember|do|follow|use|apply|repeat)\s+(?:that|this|it|these|those)\b"
                       r"|\b(?:do|doing)\s+it\s+(?:this|that|the same)\s+way\b|\blike\s+(?:that|this)\b\s*[.!]?$",
                       re.IGNORECASE)
# Questions without their "?": a wh-word first, or an auxiliary before its subject ("should we always …").
_QUESTION = re.compile(r"^\W*(?:(?:what|why|how|who|which)\b|(?:is|are|do|does|did|can|could|would|will|should|"
                       r"shall)\s+(?:you|we|i|it|this|that|there|they)\b|i(?:'m| am| was)? wondering\b|i wonder\b)",
                       re.IGNORECASE)
# A thought, not a rule: "I feel like we might want to improve this in future", "maybe we should …".
_HEDGED = re.compile(r"\b(?:might|maybe|perhaps|probably|i feel like|i guess|i suppose|not sure)\b", re.IGNORECASE)
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


@dataclass(frozen=True)
class Statement:
    text: str  # the sentence as the user wrote it
    kind: str  # "preference" | "convention"
    scope: str  # "global" | "project"


def _prose(text: str) -> str:
    """The message without what is not the user's prose: code blocks, quotes, tagged and pasted output."""
    text = text[:MAX_SCAN_CHARS].replace("\u2019", "'").replace("\r", "")
    for pattern in (_FENCED, _TAGGED, _QUOTED_LINE):
        text = pattern.sub("\n", text)
    text = "\n".join(line if line.strip() and not OUTPUT_LINE.match(line) else "" for line in text.split("\n"))
    if len(text) > LONG_PROSE_CHARS:
        # A long message is mostly pasted material (a docs page, an issue): the user's own framing is
        # its first and last paragraphs.
        paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
        text = "\n".join(paragraphs[:1] + paragraphs[-1:]) if len(paragraphs) > 2 else text[:LONG_PROSE_CHARS]
    return text


def _project_name(project: str | None) -> str | None:
    if not project:
        return None
    name = project.rstrip("/").rpartition("/")[2].lower()
    return name if len(name) >= 3 else None


def _scope(sentence: str, project: str | None) -> str:
    if subjects(sentence):
        return "project"
    name = _project_name(project)
    if name and re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", sentence.lower()):
        return "project"
    return "global"


def user_sentences(text: str, min_words: int = MIN_WORDS) -> list[tuple[str, str]]:
    """(sentence as written, its own words) of a user message's prose: code, quotes and pasted output left out,
    questions and sentences too short to state anything dropped (shared with ``processor.memory.decisions``)."""
    return [found for found in _sentences_in_order(text, min_words) if found is not None]


def _sentences_in_order(text: str, min_words: int) -> list[tuple[str, str] | None]:
    """``user_sentences`` with None where a sentence was dropped: what follows a statement is known to."""
    if not text or not isinstance(text, str):
        return []
    found: list[tuple[str, str] | None] = []
    for raw in _SENTENCE.split(_prose(text)):
        sentence = " ".join(raw.split()).strip(" -*•")
        if not sentence:
            continue
        words = own_words(sentence)
        # A question anywhere ("…, is there?!") is asked, not stated.
        stated = len(sentence) <= MAX_SENTENCE_CHARS and "?" not in sentence and \
            len(_WORD.findall(words)) >= min_words and not _QUESTION.match(words)
        found.append((sentence, words) if stated else None)
    return found


def _shouted_rule(words: str) -> bool:
    """A rule said with emphasis: its only venting mark is the shout, and it says never or always."""
    return bool(_SHOUT.search(words)) and not _VENTING.search(_SHOUT.sub(" ", words)) \
        and bool(_CONVENTION.search(_SHOUT.sub(" ", words)))


def one_off(words: str) -> bool:
    """A remark about the work in hand, not a standing rule: venting, or a preference about this or that thing
    ("I prefer our original message for it", "add also X so that we grow this") with nothing that makes it last."""
    if _VENTING.search(words):
        return True
    return bool(_DEICTIC.search(words)) and not _STANDING.search(words)


def standing_statements(text: str, project: str | None = None) -> list[Statement]:
    """The standing preferences and instructions a user message states, in order; [] for anything else."""
    found: list[Statement] = []
    sentences = _sentences_in_order(text, MIN_WORDS)
    taken: set[int] = set()  # sentences told as part of the rule before them
    for index, stated in enumerate(sentences):
        if stated is None or index in taken:
            continue
        sentence, words = stated
        if _NOT_STANDING.search(words) or _REFERENT.search(words) or _HEDGED.search(words) \
                or (_VENTING.search(words) and not _shouted_rule(words)):
            continue
        if _PREFERENCE.search(words):
            if one_off(words):
                continue
            kind = "preference"
        elif _CONVENTION.search(words):
            kind = "convention"
        elif (not_for_us := _NOT_FOR_US.search(sentence)) is not None:
            # From the command on: "Well, you could try that, but … we learned that" is how it was said, not the rule.
            kind, sentence = "convention", sentence[not_for_us.start():]
        else:
            continue
        whole = sentence
        for later in range(index + 1, len(sentences)):
            goes_on = sentences[later]  # None: a question or a fragment in between ends the rule
            if goes_on is None or not _GOES_ON.match(goes_on[1]) or len(whole) + 1 + len(goes_on[0]) > MAX_RULE_CHARS:
                break
            whole += " " + goes_on[0]
            taken.add(later)
        found.append(Statement(_standalone(whole), kind, _scope(sentence, project)))
    return found


# A word that ties the rule to what was said before it ("Then in the future, push back when I steer you wrong"):
# read sessions later, on its own, it dangles.
_TIED = re.compile(r"^(?:then|so|and|but|also|ok(?:ay)?|well)\b[,:]?\s+(?=\w)", re.IGNORECASE)


def _standalone(rule: str) -> str:
    """The rule as it reads on its own: without a leading word that tied it to the sentence before."""
    cut = _TIED.sub("", rule, count=1)
    return cut[:1].upper() + cut[1:] if cut != rule else rule


def findings(round_: Round) -> list[Finding]:
    """The standing statements of a round's user messages, as memories (miner ``standing``): global unless they
    name something of the project."""
    found: list[Finding] = []
    for message in round_.user_messages:
        for index, statement in enumerate(standing_statements(message.text, round_.project)):
            text = redact(statement.text)
            found.append(Finding(id=episode_id(f"standing:{message.uuid}:{index}"), kind=statement.kind,
                                 summary=summarize(text, "", MAX_RULE_CHARS), full_content=text,
                                 entities=entities_of(text),
                                 source_uuids=[message.uuid], created_at=message.ts_ms, miner="standing",
                                 scope=statement.scope if round_.project else "global"))
    return found
