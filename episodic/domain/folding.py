"""Near-duplicate folding: when two memories are one memory written twice (pure, no IO).

Exact duplicates (same agent, type and normalised summary) fold at the indexer by their key
(`episodic.domain.identity.dedup_key`). A near duplicate is the same record reworded, or written by another
agent of the crew: "Checkout OOM-killed during load test" three times over crowds out everything else in
the top k. What tells a rewording from a near miss (one entity, number, date, negation, actor or outcome
changed) was measured on labelled pairs (eval/data/fold_pairs.jsonl, `python -m eval.fold_rule`; three of
its sets written blind to this rule):

- **Cosine gates, it does not decide**: all-MiniLM-L6-v2 puts a near miss as close as a rewording (median
  0.92 against 0.95), so `cosine` (0.75) only says the two are about the same thing at all.
- **One quantity is written one way first** (`quantities`): "$4,200" and "4.2k dollars", "half a minute" and
  "30 seconds", "4:30 in the afternoon" and "4:30 pm" state one value each (text2num reads the spelled-out
  numbers), so the facts below compare values, not their spellings.
- **What the words say decides** (`Reading`, `differences`): the same negation count (a negative prefix
  counts: "unsure" is "not sure"), the same facts (numbers, spelled-out ones as digits, with their bound:
  "under 200" is not "over 200"; clock times on one clock; dates with their modifier), no name swapped for
  another, no outcome or direction said the other way round (passed / failed, turned on / off, raised /
  cut), nor stated by one text alone ("took the final" / "lost the final"), no WordNet antonyms between
  the words that differ ("praised" / "criticized"), and what a contrast excludes kept apart ("keep it
  instead of selling it" is not "sell it instead of keeping it").
- **The words may change, as a rewording changes them** (`_paired`): a compound written apart ("timeout" /
  "timed out"), a word WordNet relates to the other's ("completed" / "finished": `episodic.domain.synonyms`),
  and, when `swaps` is set (off by default: it folded near misses on the holdout), that many verbs,
  adjectives or adverbs swapped for others; a noun, a name or an unknown word only for its synonym (a
  thing or a person swapped for another of its kind is what an entity or actor near miss is: "niece" /
  "nephew", "checkout" / "payments"); and one text may add up to `additions` (2) words.

Size: one rule read as a whole (what a text states, `reading`, and how two readings compare); its word lists
sit beside the code that reads them, so a reader checks a list against its use in one place.

`compatible` says which memories may fold at all: same workspace, same crew, same entry type and priority
(a fold must not change who may see a memory in `crew_shared`, nor its base importance or priority floor).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

import snowballstemmer
from text_to_num import alpha2digit

from episodic.domain.synonyms import EMPTY, Lexicon
from episodic.domain.synonyms import lexicon as words

# Payload fields of a fold (written by episodic.indexing.folding, filtered on by episodic.store.query).
FOLDED_INTO = "folded_into"  # on an absorbed memory: its owner's entry id
FOLDED = "folded"  # on an owner: the entries it absorbed
AGENTS = "agents"  # on an owner: the agents it stands for, its own first
FOLD_ACROSS = "fold_scope"  # on an absorbed memory: ACROSS when its owner is another agent's
ACROSS = "crew"  # ... and then it stays its own agent's own (scope own)

DEFAULT_FOLD_COSINE = 0.75  # a gate: below it two texts are not about the same thing (eval/fold_rule.py)
DEFAULT_FOLD_ADDITIONS = 2  # content words one text may add to the other (eval/fold_rule.py)
DEFAULT_FOLD_SWAPS = 0  # verbs, adjectives or adverbs one text may swap for others (eval/fold_rule.py: off)

_WORD = re.compile(r"[^\W_]+(?:[.:/'-][^\W_]+)*", re.UNICODE)
_DIGIT = re.compile(r"\d")
_STEMMER = snowballstemmer.stemmer("english")  # the Snowball English stemmer, as BM25 stems


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_CALENDAR = _words(
    "monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri sat sun "
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec today tomorrow yesterday"
)
# Function words that carry no content: two rewordings differ in them most (a short list on purpose:
# negations and quantifiers stay, they change what a text says).
_STOP = _words(
    "a an the of to in on at for by with from as is are was were be been being it its this that these those "
    "and or but so then than there here i we you he she they me us him her them my our your his their "
    "do does did have has had will would can could should shall may might must just also very really "
    "into onto over under about after before during while again once now whether between among through "
    "across within until toward towards upon via"
)


def content_tokens(text: str) -> frozenset[str]:
    """The text's words, case-folded, without function words."""
    return frozenset(w for w in _WORD.findall(text.casefold()) if w not in _STOP)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b| (1.0 for two empty sets: nothing to tell them apart)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def fact_tokens(tokens: frozenset[str]) -> frozenset[str]:
    """The words that state a fact a rewording keeps verbatim: numbers (anything with a digit), weekdays,
    months and relative days."""
    return frozenset(t for t in tokens if _DIGIT.search(t) or t in _CALENDAR)


@dataclass(frozen=True, slots=True)
class FoldRule:
    """When a new memory folds into an existing one (`near_duplicate`). `enabled` False: never
    (EPISODIC_FOLD_ENABLED). `cosine` is a gate (the two are about the same thing at all); what decides is
    what the words say (`Reading`): the same negations, facts, names and outcomes, no content word of one
    text replaced by another in the other but in other words (`_paired`: WordNet's, `synonyms`, and up to
    `swaps` verbish ones), and at most `additions` content words that one adds."""

    cosine: float = DEFAULT_FOLD_COSINE
    additions: int = DEFAULT_FOLD_ADDITIONS
    enabled: bool = True
    synonyms: bool = True  # a word may be said in other words (episodic.domain.synonyms: WordNet)
    swaps: int = DEFAULT_FOLD_SWAPS  # verbish words one text may swap for others besides WordNet's

    def __post_init__(self) -> None:
        if not 0.0 < self.cosine <= 1.0 or self.additions < 0 or self.swaps < 0:
            raise ValueError("fold cosine must be in (0, 1], fold additions and swaps at least 0")


@dataclass(frozen=True, slots=True)
class Verdict:
    fold: bool
    reason: str  # why (or why not): shown in logs, tests and the explorer


# --------------------------------------------------------------------------------------------- reading

# Negation cues: a text with one more of them says the opposite ("the rollback did not restore ...").
_NEGATIONS = _words("not no never none nothing nobody nowhere neither nor without cannot")
# Numbers spelled out: "Three customers" and "3 customers" state the same number.
_SPELLED = "zero _ two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(f"{_SPELLED} seventeen eighteen nineteen twenty".split())
    if w != "_"  # "one" is as often a pronoun ("one of the bridesmaids") as a number
} | {"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80",
     "ninety": "90", "hundred": "100", "thousand": "1000", "dozen": "12", "twice": "x2", "half": "0.5",
     "million": "1000000"}  # fmt: skip
_TENS = {w: int(n) for w, n in _NUMBER_WORDS.items() if n.isdigit() and 20 <= int(n) <= 90}
_UNITS = {w: int(n) for w, n in _NUMBER_WORDS.items() if n.isdigit() and 1 <= int(n) <= 9}
# Currency words after a number say what "$" or "€" before it says ("40 dollars" is "$40", whose sign the
# tokenizer drops); "40 cents" keeps its unit.
_CURRENCY = _words("dollar dollars euro euros buck bucks")
# Calendar words that are also everyday words count only capitalised ("May 5" / "it may rain", "on Sat" /
# "she sat"); "fall" is the season only after a word that dates it ("this fall", "in the fall").
_CAPITALISED = _words(
    "may march mon tue tues wed thu thur thurs fri sat sun jan feb mar apr jun jul aug sep sept oct nov dec"
)
_DATING = _words("this next last the in every early late coming past that")
# ("once" is not among them: it is a conjunction more often than a count, "once the freeze begins")
# Time words: a weekday, month, season, part of the day or relative day is a fact, and so is its modifier
# ("next Friday" is not "last Friday", "last summer" not "last fall"; "this Friday" is plain "Friday").
_TIME = _CALENDAR | _words(
    "tonight morning afternoon evening night noon midnight weekend week month year spring summer fall autumn winter ago"
)
_TIME_MODIFIERS = {"this": "", "next": "next", "last": "last", "coming": "next", "past": "last", "every": "every",
                   "each": "every"}  # fmt: skip
# Words of an outcome or a direction, by axis and sign: two texts that differ in them say different things
# ("the load test passed" / "failed", "turned on" / "off", "loved it" / "hated it") however alike the rest.
_POLAR: dict[str, tuple[str, int]] = {
    **{w: ("outcome", 1) for w in _words(
        "pass passed passes passing succeed succeeded succeeds success successful successfully win won wins "
        "accept accepted accepts approve approved approves approval grant granted allow allowed allows agree "
        "agreed agrees hired healthy fixed resolved restored")},
    **{w: ("outcome", -1) for w in _words(
        "fail failed fails failing failure unsuccessful lose lost loses reject rejected rejects deny denied "
        "denies denial refuse refused refuses decline declined declines disallow disallowed abort aborted "
        "aborts cancelled canceled broken broke unhealthy unresolved blocked")},
    **{w: ("switch", 1) for w in _words("enable enabled enables open opened")},
    **{w: ("switch", -1) for w in _words(
        "off disable disabled disables close closed shut stop stopped stops remove removed")},
    **{w: ("direction", 1) for w in _words("up raise raised increase increased rise rose higher")},
    **{w: ("direction", -1) for w in _words(
        "down lower lowered decrease decreased fall fell drop dropped cut")},
    **{w: ("feeling", 1) for w in _words(
        "love loved loves enjoy enjoyed enjoys glad happy relieved excited")},
    **{w: ("feeling", -1) for w in _words(
        "hate hated hates dislike disliked dislikes upset sad disappointed bad awful terrible worried")},
    **{w: ("inclusion", 1) for w in _words("include included includes including")},
    **{w: ("inclusion", -1) for w in _words("exclude excluded excludes excluding")},
}  # fmt: skip
# ... by stem as well: "closes" says what "closed" says
_POLAR_STEMS = {_STEMMER.stemWord(w): axis for w, axis in _POLAR.items()}
# "on" and "off" are a switch only after a verb that switches ("turned off"), else a preposition ("on Friday").
_SWITCHED = {"on": ("switch", 1), "off": ("switch", -1)}
_SWITCHING = _words(
    "turn turned turns turning switch switched switches switching toggle toggled flip flipped is was are were"
)
# Phrasal outcomes: "turned down" is rejected, "called off" cancelled (not a direction or a switch).
_PHRASAL = {
    (verb, particle): axis
    for verbs, particle, axis in (
        ("turn turned turns turning", "down", ("outcome", -1)),
        ("call called calls calling", "off", ("outcome", -1)),
    )
    for verb in verbs.split()
}
# Words a rewording adds, drops or swaps freely, besides the function words: hedges, fillers, light verbs.
_LIGHT = _words(
    "actually definitely really well way thing things something anything please thanks thank yeah yes sure "
    "even though since because still already maybe probably perhaps quite pretty super lot lots bit "
    "think thought like want wanted look looking plan planning wonder wondering consider considering "
    "get got gets getting gotten go goes went going gone make made makes take took come came put "
    "all any some what which who how when where why if too much many more most own same such only other "
    "am just also so then per roughly approximately around"
)


def _polar(word: str, stem: str) -> tuple[str, int] | None:
    """The outcome axis and sign a word says, by its form or its stem ("closes" as "closed")."""
    return _POLAR.get(word) or _POLAR_STEMS.get(stem)


_LIGHT_STEMS = frozenset(_STEMMER.stemWords(sorted(_LIGHT)))  # "thinking" is as light as "think"
_SENTENCE_END = frozenset('.!?:;"(\n')
# A period that ends an abbreviation ends no sentence: "at 2 a.m. UTC", "Postgres vs. MySQL" (searched in the
# 16 characters before a word: `\b` still sees the character before them)
_ABBREVIATION = re.compile(r"(?:\b(?:[a-z]\.){2,}|\b(?:vs|etc|approx|incl|ca)\.)$", re.IGNORECASE)
_APOSTROPHE = re.compile(r"[’‘]")


def _stem(word: str) -> str:
    return _STEMMER.stemWord(word)


# Negative prefixes: a word that is one of them on a word WordNet calls its antonym says "not" that word.
_NEGATIVE_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non")


def _unprefixed(word: str) -> str | None:
    """The word a negative-prefixed word negates ("unsure" -> "sure", "incompatible" -> "compatible"), when
    WordNet lists the two as antonyms; else None ("income" is no "not come", "under" no "not der")."""
    if not word.isalpha():
        return None
    for prefix in _NEGATIVE_PREFIXES:
        rest = word[len(prefix) :]
        if word.startswith(prefix) and len(rest) >= 3 and (_stem(word), _stem(rest)) in words().antonyms:
            return rest
    return None


# ------------------------------------------------------------------------------------------- quantities
# One quantity is written many ways, and a rewording picks another: "$4,200" / "4.2k dollars", "a hundred and
# sixty" / "160", "30-second" / "half a minute", "a fortnight" / "two weeks", "4:30 in the afternoon" /
# "4:30 pm", "Tuesday night last week" / "last Tuesday night". `quantities` writes each the one way before the
# words are read, so the facts compare values, not spellings (a number or date near miss changes the value,
# which stays). Spelled-out numbers go through text2num's `alpha2digit` (a maintained parser of English number
# words, groups and all: "eighty-five hundred" is 8500), a sentence at a time (its time grows with the square
# of a run of number words), after the multipliers it would read apart ("1 million" would be "1 1000000").
# What a format does not say stays apart: an ordinal is no count ("the 3rd floor" / "3 floors"), a number keeps
# its unit ("2TB" / "2 TB", never a bare 2), a month is no 30 days, how
# often is no how long ("twice a week" is "twice every week"), and every value is exact (Decimal: "1.2 ms" is
# not "1.4 ms", "9" * 400 + " years" no overflow). Measured on eval/data/fold_pairs.jsonl (eval/README.md).
_GROUPED = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")  # "3,000" is 3000 ("1,2" stays)
_MULTIPLIERS = {"k": 1000, "thousand": 1000, "m": 10**6, "million": 10**6, "mn": 10**6, "bn": 10**9, "billion": 10**9}
_SCALED = re.compile(r"(?<![\d.,])(\d{1,3}(?:\.\d+)?)(?:(k|M|mn|bn)|\s+(thousand|million|billion))\b")
_PLURAL_SCALE = re.compile(r"\b(dozens|hundreds|thousands|millions|billions)\b", re.IGNORECASE)  # "thousands of"
_VERSION = re.compile(r"\b[vV](\d+(?:\.\d+)+)\b")  # "v3.4.1" is "3.4.1"
_ORDINAL_WORDS = {f"{w}ieth": f"{n}th" for w, n in (("twent", 20), ("thirt", 30), ("fort", 40), ("fift", 50),
                  ("sixt", 60), ("sevent", 70), ("eight", 80), ("ninet", 90))}  # fmt: skip
_TIETH = re.compile(r"\b(\w+ieth)\b")
_WEEKDAY = r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_NTH_WEEKDAY = re.compile(rf"\b(first|second|third|fourth|fifth)(?=\s+{_WEEKDAY})", re.IGNORECASE)
_NTH = {"first": "1st", "second": "2nd", "third": "3rd", "fourth": "4th", "fifth": "5th"}
# A weekday in the plural, or "each", is the habit "every" says ("on Sundays", "each Sunday": "every Sunday")
_WEEKDAYS = re.compile(rf"\b(?:(?:every|each)\s+)?({_WEEKDAY})(s)?\b", re.IGNORECASE)
_WEEK_OF = re.compile(rf"\b({_WEEKDAY})((?:\s+(?:morning|afternoon|evening|night))?)\s+(last|next|this)\s+week\b")
_CLOCK_HOURS = "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
_OF_DAY = re.compile(  # "at 4:30 in the afternoon" is "at 4:30 pm" (after a word that says a time of day)
    rf"\b(at|by|until|till|around|from|before|after)\s+(1[0-2]|0?[1-9](?::\d{{2}})?|{_CLOCK_HOURS})\s+in\s+the\s+"
    r"(morning|afternoon|evening)\b",
    re.IGNORECASE,
)
_CLOCK_GLUED = re.compile(r"\b(\d{1,2}(?::\d{2})?)(am|pm)\b", re.IGNORECASE)  # "10am" is "10 am"
_UNIT_SPACED = re.compile(r"\b(\d+(?:\.\d+)?)\s+(tb|gb|mb|kb|kg|km|lbs?)\b", re.IGNORECASE)  # "2 TB" is "2TB"
_SLASH = re.compile(r"/(?=(?:sec|second|min|minute|hr|hour|day|week|month|year)\b)", re.IGNORECASE)  # "5k/sec"
_TWICE = re.compile(r"\b(?:two|2)\s+times\b", re.IGNORECASE)
_DOUBLE = re.compile(r"\b(?:doubled|double(?=\s+(?:the|what|that|my|our|his|her|their|its)\b))", re.IGNORECASE)
# How often: "twice a week", "per minute", "every day", "weekly", "/sec" are one rate ("1/week"), never a length
_RATE_UNITS = {"hourly": "hour", "daily": "day", "weekly": "week", "monthly": "month", "yearly": "year",
               "annually": "year", "nightly": "night"}  # fmt: skip
_RATE_WORD = re.compile(r"\b(" + "|".join(_RATE_UNITS) + r")\b", re.IGNORECASE)
_RATE = re.compile(
    r"\b(?:(?:(?<=twice )|(?<=once )|(?<=times ))an?|per|every(?:\s+single)?|each)\s+"
    r"(sec|second|min|minute|hour|day|night|week|month|year)\b",
    re.IGNORECASE,
)
_RATE_OF = {"sec": "second", "min": "minute"}
_COUNTED_RATE = re.compile(  # "300 requests a minute" is a rate as "300 requests per minute" is
    r"\b(\d+(?:\.\d+)?\s+[^\W\d_]+s)\s+an?\s+(sec|second|min|minute|hour|day|night|week|month|year)\b", re.IGNORECASE
)
# How long, exactly: seconds for what a clock or calendar counts evenly, months and years apart (a month is no
# 30 days); "3 years old" is an age, left to the words
_SECONDS = {"ms": Decimal("0.001"), "millisecond": Decimal("0.001"), "sec": Decimal(1), "second": Decimal(1),
            "min": Decimal(60), "minute": Decimal(60), "h": Decimal(3600), "hr": Decimal(3600),
            "hour": Decimal(3600), "day": Decimal(86400), "week": Decimal(604800),
            "fortnight": Decimal(1209600)}  # fmt: skip
_CALENDAR_UNITS = {"month": "mo", "year": "yr"}
_AMOUNT = {"a": Decimal(1), "an": Decimal(1), "one": Decimal(1), "half": Decimal("0.5"), "quarter": Decimal("0.25"),
           "three-quarter": Decimal("0.75"), "a half": Decimal("0.5"), "half a": Decimal("0.5"),
           "half an": Decimal("0.5"), "a quarter of a": Decimal("0.25"),
           "a quarter of an": Decimal("0.25")}  # fmt: skip
_DURATION = re.compile(
    r"\b(\d+(?:\.\d+)?|a quarter of an?|half an?|a half|three-quarter|quarter|half|an?|one|two|three|four|five|six"
    r"|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|sixty|ninety)[\s-]+"
    r"(ms|milliseconds?|secs?|seconds?|mins?|minutes?|h|hrs?|hours?|days?|weeks?|fortnights?|months?|years?)\b"
    r"(?![\s-]+old\b)(\s+back(?=\s*(?:[,.;:!?)]|$)))?",
    re.IGNORECASE,
)
_FORTNIGHT = re.compile(r"\bfortnight\b", re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?;\n])")
_COUPLE = re.compile(r"\ba\s+couple\s+of\b", re.IGNORECASE)


def _decimal(value: Decimal) -> str:
    """An exact value as its shortest plain numeral ("0.3", "7200", never "7.2E+3")."""
    return format(value.normalize(), "f")


def _scaled(m: re.Match[str]) -> str:
    return _decimal(Decimal(m.group(1)) * _MULTIPLIERS[(m.group(2) or m.group(3)).casefold()])


def _duration(m: re.Match[str]) -> str:
    amount, unit, back = m.group(1).casefold(), m.group(2).casefold(), m.group(3)
    unit = {"secs": "sec", "mins": "min", "hrs": "hr"}.get(unit, unit)
    unit = unit[:-1] if unit.endswith("s") and unit[:-1] in {*_SECONDS, *_CALENDAR_UNITS} else unit
    if (amount == "one" and unit == "day") or len(amount) > 18:  # "one day I'll go" is no duration; nor is
        return m.group(0)  # a number longer than exact arithmetic keeps (Decimal's 28 digits) one to convert
    count = _AMOUNT.get(amount)
    if count is None:
        spelled = _NUMBER_WORDS.get(amount, amount)
        if not spelled.replace(".", "", 1).isdigit():
            return m.group(0)
        count = Decimal(spelled)
    ago = " ago" if back else ""  # "three months back," is "three months ago,"
    if unit in _CALENDAR_UNITS:
        return f"{_decimal(count)}{_CALENDAR_UNITS[unit]}{ago}"
    return f"{_decimal(count * _SECONDS[unit])}sec{ago}"


def _per(unit: str) -> str:
    """A rate's token: "1/second" (a fact: it holds a digit)."""
    unit = unit.casefold()
    return f"1/{_RATE_OF.get(unit, unit)}"


def _counted_rate(m: re.Match[str]) -> str:
    return f"{m.group(1)} {_per(m.group(2))}"


def _weekday(m: re.Match[str]) -> str:
    day = m.group(1)[:1].upper() + m.group(1)[1:].casefold()
    return f"every {day}" if m.group(2) or m.group(0)[:1] in "eE" else day


def _numbers(text: str) -> str:
    """text2num's reading of spelled-out numbers, a sentence at a time; a text it cannot encode (a lone
    surrogate) as it is."""
    try:
        return "".join(alpha2digit(part, "en") if part.strip() else part for part in _SENTENCE.split(text))
    except (UnicodeError, ValueError):
        return text


def quantities(text: str) -> str:  # not memoised: `reading`, its one caller, is
    """`text` with its numbers, durations, rates, clock times and relative days each written one way (above)."""
    text = _GROUPED.sub("", text)
    text = _SCALED.sub(_scaled, text)
    text = _PLURAL_SCALE.sub(lambda m: f"many-{m.group(1).casefold()}", text)  # "thousands of" is not "a thousand"
    text = _VERSION.sub(r"\1", text)
    text = _COUPLE.sub("two", text)
    text = _NTH_WEEKDAY.sub(lambda m: _NTH[m.group(1).casefold()], text)
    text = _numbers(text)
    text = _TIETH.sub(lambda m: _ORDINAL_WORDS.get(m.group(1).casefold(), m.group(1)), text)
    text = _DOUBLE.sub("twice", _TWICE.sub("twice", text))
    text = _UNIT_SPACED.sub(r"\1\2", _CLOCK_GLUED.sub(r"\1 \2", text))
    text = _RATE_WORD.sub(lambda m: f"every {_RATE_UNITS[m.group(1).casefold()]}", _SLASH.sub(" per ", text))
    text = _RATE.sub(lambda m: _per(m.group(1)), text)
    text = _FORTNIGHT.sub("2 week", text)
    text = _OF_DAY.sub(
        lambda m: (
            f"{m.group(1)} {_NUMBER_WORDS.get(m.group(2).casefold(), m.group(2))} "
            f"{'am' if m.group(3).casefold() == 'morning' else 'pm'}"
        ),
        text,
    )
    text = _WEEKDAYS.sub(_weekday, _WEEK_OF.sub(r"\3 \1\2", text))
    return _DURATION.sub(_duration, _COUNTED_RATE.sub(_counted_rate, text))


@dataclass(frozen=True, slots=True)
class Reading:
    """What a text states, as the fold rule compares it: its content words (stemmed, function words, light
    words and outcome words left out, compounds split), facts (numbers with spelled-out ones as digits,
    times with their modifier, anything with a digit), names (capitalised words inside a sentence),
    negations (a count), outcomes (the signed axes of its outcome and direction words) and joins (each two
    adjacent words' stem written as one word, with the stems of the two: "timed out" is "timeout")."""

    content: frozenset[str]
    facts: frozenset[str]
    names: frozenset[str]
    negations: int
    polar: tuple[tuple[str, int], ...]
    joins: tuple[tuple[str, str, str], ...] = ()
    spelled: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (initials, the stems of the words they begin)
    things: frozenset[str] = frozenset()  # content stems written as nouns are ("deployer", "security")


@lru_cache(maxsize=4096)
def reading(text: str) -> Reading:
    """The text's `Reading` (memoised: the linker and the render compare one text with several)."""
    text = quantities(_APOSTROPHE.sub("'", text))
    text = _BOUNDS.sub(_bound, text)
    text = _CONTRASTS.sub(f" {_CONTRAST} ", text)
    content: set[str] = set()
    facts: set[str] = set()
    names: set[str] = set()
    polar: set[tuple[str, int]] = set()
    things: set[str] = set()
    joins: set[tuple[str, str, str]] = set()
    negations = 0
    previous = ""
    contrast = False  # the next content word is one said not to be ("keep it instead of selling it")
    for m in _WORD.finditer(text):
        raw = m.group(0)
        word = raw.casefold()
        end = m.start()  # the end of what comes before the word, its spaces left out (read in place: linear)
        while end and text[end - 1].isspace():
            end -= 1
        starts = not end or (text[end - 1] in _SENTENCE_END and not _ABBREVIATION.search(text, max(0, end - 16), end))
        modifier, previous = previous, word
        if modifier.isalpha() and word.isalpha() and not starts:
            first, second = _stem(modifier), _stem(word)  # "timed out" is "timeout" once stemmed: both ways
            joins.update((joined, first, second) for joined in {_stem(modifier + word), _stem(first + second)})
        if word in _NEGATIONS or word.endswith("n't"):
            negations += 1
            continue
        if word == _CONTRAST:
            contrast = True
            continue
        positive = _unprefixed(word)
        if positive is not None:  # "unsure" says "not sure", "incompatible" "not compatible"
            negations += 1
            word = positive
        word = word.split("'")[0] if "'" in word else word  # "checkout's" is "checkout"; "I'm" is "i"
        if word in _CURRENCY and _DIGIT.search(modifier):
            continue
        if word in ("am", "pm", "a.m", "p.m") and facts and _HOUR.fullmatch(modifier):
            facts.discard(modifier)  # "3 pm" is "15:00", as a 24-hour clock writes it
            facts.add(_clock(modifier, word.startswith("p")))
            continue
        tens, _, unit = word.partition("-")
        if tens in _TENS and unit in _UNITS:  # "thirty-seven" is 37
            facts.add(str(_TENS[tens] + _UNITS[unit]))
            continue
        if _DIGIT.search(word) or word in _NUMBER_WORDS:
            clock = _HOUR.fullmatch(word)
            if clock and clock.group(2):  # "09:00" is "9:00"
                word = f"{int(clock.group(1))}:{clock.group(2)}"
            bound = {"under": "<", "over": ">"}.get(modifier, "")  # "under 200 ms" is not "over 200 ms"
            facts.add(bound + _NUMBER_WORDS.get(word, word.replace(",", "")))
            continue
        if (
            word in _TIME
            and not (word in _CAPITALISED and not raw[:1].isupper())
            and (word != "fall" or modifier in _DATING)
        ):
            facts.add(f"{_TIME_MODIFIERS[modifier]} {word}".strip() if modifier in _TIME_MODIFIERS else word)
            continue
        axis = (
            _PHRASAL.get((modifier, word))
            or _polar(word, _stem(word))
            or (_SWITCHED.get(word) if modifier in _SWITCHING else None)
        )
        if axis is not None:  # its sign is what it says: "raised" and "higher" say the same, "fell" the opposite
            polar.add(axis)
            continue
        parts = word.split("-") if "-" in word else [word]
        if len(parts) > 1 and any(part in _STOP for part in parts):  # "father-in-law" is no "father"
            parts = [word]
        for part in parts:
            if not part or part in _STOP or part in _LIGHT or part in _TIME_MODIFIERS:
                continue
            stem = _stem(part)
            if stem in _LIGHT_STEMS:
                continue
            if part != word and (part_axis := _polar(part, stem)) is not None:
                polar.add(part_axis)  # "game-winning" wins as "winning" does
                continue
            if part != word and (part in _NUMBER_WORDS or part in _TIME):  # "a two-week trial": 2, week
                facts.add(_NUMBER_WORDS.get(part, part))
                continue
            if contrast:
                stem, contrast = f"{_NOT}{stem}", False
            content.add(stem)
            if part.endswith(_NOUN_ENDINGS) and len(part) > 5:
                things.add(stem)
            if raw[:1].isupper() and not starts:
                names.add(stem)
    return Reading(
        content=frozenset(content),
        facts=frozenset(facts),
        names=frozenset(names),
        negations=negations,
        polar=tuple(sorted(polar)),
        joins=tuple(sorted(joins)),
        spelled=_spelled(text),
        things=frozenset(things),
    )


# Endings that make a noun of a verb or an adjective: "deployer" and "security" name a who or a what, though
# their stems ("deploy", "secur") are verbish.
_NOUN_ENDINGS = ("er", "ers", "or", "ors", "ist", "ists", "ity", "ities", "tion", "tions", "sion", "sions", "ment",
                 "ments", "ness", "ance", "ances", "ence", "ences", "ship", "ism")  # fmt: skip
# A contrast says its next content word is not so: "keep the piano instead of selling it" is not "sell the
# piano instead of keeping it", though the two hold the same words (that word is read as "not-sell").
_CONTRASTS = re.compile(r"\b(?:instead of|rather than)\b", re.IGNORECASE)
_CONTRAST = "xcontrastx"
_NOT = "not-"
# Bounds on a number, each said one way before the words are read: "less than 200" and "below 200" are
# "under 200"; "more than", "above", "at least" and "exceeding" are "over" (`reading`).
_BOUND_WORD = {"less": "under", "fewer": "under", "below": "under", "most": "under", "more": "over",
               "greater": "over", "above": "over", "exceeding": "over", "beyond": "over", "least": "over"}  # fmt: skip
_BOUNDS = re.compile(
    r"\b(?:(?:less|fewer|more|greater) than|below|above|exceeding|beyond|at most|at least)(?=\s+[$€£]?\d)",
    re.IGNORECASE,
)


def _bound(m: re.Match[str]) -> str:
    words = m.group(0).casefold().split()
    return _BOUND_WORD[words[-1] if words[0] == "at" else words[0]]


_HOUR = re.compile(r"(\d{1,2})(?::(\d{2}))?")


def _clock(hour: str, afternoon: bool) -> str:
    """'3' pm -> '15:00', '12' am -> '0:00' ('3:30' pm -> '15:30')."""
    m = _HOUR.fullmatch(hour)
    assert m is not None
    h = int(m.group(1)) % 12 + (12 if afternoon else 0)
    return f"{h}:{m.group(2) or '00'}"


def _spelled(text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """For each run of two to five words, their initials and the content stems among them ("pull request":
    "pr"; "out of memory": "oom"), so that an acronym in one text pairs with the words it stands for in the
    other (`_paired`)."""
    found = [w for w in _WORD.findall(text.casefold()) if w.isalpha()]
    stems = [None if w in _STOP or w in _LIGHT else _stem(w) for w in found]  # each word stemmed once
    out = set()
    for n in range(2, 6):
        for i in range(len(found) - n + 1):
            run = tuple(s for s in stems[i : i + n] if s is not None)
            if run:
                out.add(("".join(w[0] for w in found[i : i + n]), run))
    return tuple(sorted(out))


def _acronym(stem: str) -> str:
    return stem[:-1] if stem.endswith("s") and len(stem) > 2 else stem  # "PRs" is "PR" more than once


def _sign(sign: int) -> str:
    return "+" if sign > 0 else "-"


def differences(a: Reading, b: Reading) -> str | None:
    """Why two readings state different things (None: nothing tells them apart but their wording)."""
    if a.negations != b.negations:
        return f"negations {a.negations} / {b.negations}"
    if a.facts != b.facts:
        return "different facts: " + ", ".join(sorted(a.facts ^ b.facts))
    # a name the other text holds as a word (at a sentence's start: "Postgres 12 ..." / "from Postgres 12")
    # is the same name
    if (a.names - b.content) and (b.names - a.content):
        return "different names: " + ", ".join(sorted((a.names - b.content) | (b.names - a.content)))
    pa, pb = set(a.polar) - set(b.polar), set(b.polar) - set(a.polar)
    opposite = sorted({x for x, s in pa if (x, -s) in b.polar} | {x for x, s in pb if (x, -s) in a.polar})
    if opposite:  # one says passed, the other failed (an outcome one of them does not state is a word it adds)
        return "different outcomes: " + ", ".join(f"{axis} {''.join(_sign(s) for x, s in sorted(pa | pb) if x == axis)}"
                                                  for axis in opposite)  # fmt: skip
    return None


def _paired(a: Reading, b: Reading, only_a: set[str], only_b: set[str], rule: FoldRule, lex: Lexicon) -> list[str]:
    """Take out of `only_a` / `only_b` the words one text says in other words, and return them (for the
    verdict's reason): a compound written apart in the other ("timeout" / "timed out", "handover" / "hands
    over"); a word WordNet relates to one of the other's ("completed" / "finished", "taught" / "showed":
    `episodic.domain.synonyms`); then up to `rule.swaps` verbish words (verbs, adjectives, adverbs: how
    something happened) swapped for others. A thing or a person (a noun, a name, a word WordNet does not
    know) is only ever swapped for its synonym: that is what an entity or actor near miss changes."""
    paired: list[str] = []
    for mine, theirs, other in ((only_a, only_b, b), (only_b, only_a, a)):
        for joined, first, second in other.joins:
            if joined in mine and (first in theirs or second in theirs):
                mine.discard(joined)
                theirs.difference_update((first, second))
                paired.append(f"{joined} = {first} {second}")
        for initials, stems in other.spelled:  # "PR" / "pull request", "OOM" / "out of memory"
            acronym = next((x for x in sorted(mine) if 2 <= len(x) <= 5 and _acronym(x) == initials), None)
            if acronym is not None and theirs & set(stems):
                mine.discard(acronym)
                theirs.difference_update(stems)
                paired.append(f"{acronym} = {' '.join(stems)}")
    swaps = rule.swaps

    def swappable(x: str, y: str) -> bool:
        """Two verbish words, neither written as a noun ("deployer", "security") nor an outcome the other text
        does not state ("great" / "awful" is what an outcome near miss changes), nor WordNet's opposite of the
        other ("passed" / "flunked": "flunk" is a way to "fail")."""
        if not (lex.is_verbish(x) and lex.is_verbish(y)) or {x, y} & (a.things | b.things):
            return False
        return not (lex.contrary(x, y) or lex.contrary(y, x))

    for related in (True, False):
        for x in sorted(only_a):
            if not related and swaps == 0:
                break
            ok = lex.related if related else swappable
            y = next((y for y in sorted(only_b) if ok(x, y)), None)
            if y is not None:
                only_a.discard(x)
                only_b.discard(y)
                paired.append(f"{x} = {y}" if related else f"{x} ~ {y}")
                swaps -= 0 if related else 1
    return paired


def near_duplicate(
    cosine: float, new_text: str, old_text: str, rule: FoldRule, lexicon: Lexicon | None = None
) -> Verdict:
    """Whether a memory of `new_text` says what one of `old_text` says, the two `cosine` apart (for
    memories of several pieces, the lower of their best pair's and their mean vectors' cosine: one shared
    sentence is no duplicate). `lexicon`: the words a rewording may swap (default: WordNet's, or none when
    the rule takes no synonyms). Measured on eval/data/fold_pairs.jsonl (eval/fold_rule.py)."""
    if not rule.enabled:
        return Verdict(False, "folding off")
    if cosine < rule.cosine:
        return Verdict(False, f"cosine {cosine:.3f} < {rule.cosine}")
    a, b = reading(new_text), reading(old_text)
    why = differences(a, b)
    if why is not None:
        return Verdict(False, why)
    # an outcome or direction one text states and the other does not is a word it adds
    only_a = set(a.content - b.content) | {f"{x}{_sign(s)}" for x, s in set(a.polar) - set(b.polar)}
    only_b = set(b.content - a.content) | {f"{x}{_sign(s)}" for x, s in set(b.polar) - set(a.polar)}
    lex = lexicon if lexicon is not None else (words() if rule.synonyms else EMPTY)
    # "praised" / "criticized": WordNet's opposites, whatever else the two say; when verbish words may be swapped
    # for unrelated ones, also a word related to the other's opposite ("complimented" / "criticized")
    table = words()
    opposite = sorted(
        f"{x} / {y}"
        for x in only_a
        for y in only_b
        if (x, y) in table.antonyms or (rule.swaps and (table.contrary(x, y) or table.contrary(y, x)))
    )
    if opposite:
        return Verdict(False, f"opposite words: {', '.join(opposite)}")
    paired = _paired(a, b, only_a, only_b, rule, lex)
    if only_a and only_b:
        return Verdict(False, "different words: " + ", ".join(sorted(only_a)) + " / " + ", ".join(sorted(only_b)))
    # A short text grows fast: one may add at most half as many content words as the other has (and never to
    # a text of no content words at all, which says nothing to compare).
    allowed = min(rule.additions, min(len(a.content), len(b.content)) // 2)
    added = only_a | only_b
    told = sorted(w for w in added if w[-1] in "+-" and not w.startswith("direction"))  # "up" is often a particle
    if told:  # how it ended, stated by one text alone, is a fact the other does not state ("took" / "lost")
        return Verdict(False, f"one says more: {', '.join(told)}")
    swapped = [p for p in paired if " ~ " in p]
    things = sorted(w for w in added if not (lex.is_verbish(w) or w[-1] in "+-"))  # an outcome is no thing
    if swapped and things:  # a thing added beside a swap may be a thing swapped ("toys" / "treats")
        return Verdict(False, f"swapped {', '.join(swapped)} beside {', '.join(things)}")
    if len(added) > allowed or (a.content != b.content and not (a.content and b.content)):
        return Verdict(False, f"one says more: {', '.join(sorted(added))}")
    said = f"; in other words: {', '.join(paired)}" if paired else ""
    adds = f"; adds {', '.join(sorted(added))}" if added else ""
    return Verdict(True, f"cosine {cosine:.3f}, the same facts, names, negations and outcomes{said}{adds}")


FOLD_KEYS = ("workspace_id", "crew_id", "entry_type", "priority")


def compatible(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Whether two stored memories may fold at all: the same workspace, crew, entry type and priority, and
    the old one is not itself folded into another."""
    if old.get(FOLDED_INTO):
        return False
    return all(new.get(k) == old.get(k) for k in FOLD_KEYS)
