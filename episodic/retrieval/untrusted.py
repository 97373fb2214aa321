"""Recalled text made safe to place inside the `<recalled-memory>` block (episodic.retrieval.render, whose
module doc states the block's contract). Pure: no IO.

`neutralise(text)` gives one line in which every `<`, `>` and `&` (and every Unicode look-alike of the
brackets) is an entity, control characters and newlines are spaces and invisible characters are gone; on
top of that (defence in depth), text that imitates the wrapper, a chat template, the preamble, an
instruction override or a role marker is rewritten. Detection runs on a skeleton of the text (NFKC,
case-folded, format characters dropped, Cyrillic/Greek look-alikes mapped to Latin); replacements apply
to the original text, so genuine non-Latin text survives.

Linear time: every pattern is compiled by RE2 (google-re2), whose automata never backtrack; the rest is
one `str.translate` per text over tables filled on each character's first use (`_Table`), plus one pass
per character only when a character folds to none or several (zero-width, ligatures). Python's `re` took
2.6 s (issue 29; 10.7 s on this shared machine, against 11 ms with RE2) on one `<` followed by 16,000
spaces with these patterns (bench/bench_render.py measures both).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

import re2  # google-re2: linear-time matching

__all__ = ["neutralise"]


# Look-alikes that NFKC does not fold: mapped for detection; in the output every bracket-like
# character becomes &lt; / &gt;.
_BRACKETS = {
    "‹": "<", "›": ">", "«": "<<", "»": ">>", "⟨": "<", "⟩": ">", "〈": "<", "〉": ">", "⟪": "<<",
    "⟫": ">>", "《": "<<", "》": ">>", "❮": "<", "❯": ">", "❬": "<", "❭": ">", "❰": "<", "❱": ">",
    "⧼": "<", "⧽": ">", "˂": "<", "˃": ">", "ᐸ": "<", "ᐳ": ">", "⦉": "<", "⦊": ">", "≺": "<", "≻": ">",
    "⋖": "<", "⋗": ">", "〔": "[", "〕": "]", "∕": "/", "⁄": "/", "⧸": "/", "⟋": "/",
}  # fmt: skip
_LETTERS = {
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "ё": "e", "є": "e", "з": "3", "і": "i", "ї": "i", "ј": "j", "к": "k",
    "м": "m", "н": "h", "о": "o", "р": "p", "с": "c", "т": "t", "у": "y", "х": "x", "ѕ": "s", "ԁ": "d",
    "ԛ": "q", "ԝ": "w", "ү": "y", "һ": "h", "ӏ": "l", "ɡ": "g", "ѡ": "w", "ц": "u", "п": "n", "г": "r",
    # Greek
    "α": "a", "β": "b", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t",
    "υ": "u", "χ": "x", "γ": "y", "μ": "u", "ς": "s", "σ": "o", "ω": "w",
    # Latin look-alikes
    "ı": "i", "ɩ": "i", "ℓ": "l", "ʏ": "y", "ɪ": "i", "ᴀ": "a", "ᴄ": "c", "ᴅ": "d", "ᴇ": "e", "ᴍ": "m",
    "ᴏ": "o", "ᴛ": "t", "ᴜ": "u", "ʀ": "r", "ꜱ": "s", "ʜ": "h", "ɴ": "n", "ʟ": "l", "ᴋ": "k", "ɢ": "g",
}  # fmt: skip
# Invisible characters outside category Cf that still render as nothing.
_INVISIBLE = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u2800", "\u034f", "\u180e"}


def _is_dropped(c: str) -> bool:
    """Characters that render as nothing: removed from the output."""
    return c in _INVISIBLE or unicodedata.category(c) == "Cf"


def _is_space(c: str) -> bool:
    return c.isspace() or unicodedata.category(c) in ("Cc", "Zs", "Zl", "Zp")


def _fold(c: str) -> str:
    """Skeleton of one character: NFKC, case-folded, look-alikes mapped; combining marks dropped."""
    if c in _BRACKETS:
        return _BRACKETS[c]
    out = []
    for ch in unicodedata.normalize("NFKC", c).casefold():
        if unicodedata.category(ch) == "Mn":
            continue
        ch = _BRACKETS.get(ch, ch)
        out.append(_LETTERS.get(ch, ch))
    return "".join(out)


class _Table(dict[int, str]):
    """A `str.translate` table filled on first use of each character (the per-character work then runs at C
    speed for every later occurrence); bounded, so that text cannot grow it without limit."""

    LIMIT = 1 << 16

    def __init__(self, one: Callable[[str], str]) -> None:
        super().__init__()
        self.one = one

    def __missing__(self, code: int) -> str:
        if len(self) >= self.LIMIT:
            self.clear()
        value = self[code] = self.one(chr(code))
        return value


def _skeleton_of(c: str) -> str:
    """One character of the detection skeleton ("" for a dropped one)."""
    if c.isascii():
        return " " if (c.isspace() or ord(c) < 32 or ord(c) == 127) else c.lower()
    if _is_dropped(c):
        return ""
    return " " if _is_space(c) else _fold(c)


def _escaped(c: str) -> str:
    """One character as it is written inside the block."""
    if c == "<":
        return "&lt;"
    if c == ">":
        return "&gt;"
    if c == "&":
        return "&amp;"
    if c.isascii():
        return " " if (c.isspace() or ord(c) < 32 or ord(c) == 127) else c
    if _is_dropped(c):
        return ""
    if _is_space(c):
        return " "
    f = _fold(c)
    return "&lt;" if "<" in f else "&gt;" if ">" in f else "&amp;" if "&" in f else c


_SKELETON = _Table(_skeleton_of)
_ESCAPED = _Table(_escaped)


def _skeleton(text: str) -> tuple[str, list[int]]:
    """The detection skeleton of `text` and, for each of its characters, the index it came from."""
    skel = text.translate(_SKELETON)
    if len(skel) == len(text):  # one character for one (ASCII, most scripts): the origin is the identity
        return skel, list(range(len(text)))
    origin: list[int] = []
    for i, c in enumerate(text):
        origin.extend([i] * len(_SKELETON[ord(c)]))
    return skel, origin


_ROLE_WORDS = ("system", "assistant", "developer", "user", "human", "tool", "function", "model", "instruction")
_ROLES = "system|assistant|developer|user|human|tool|function|model|instructions?"
# A role word whose letters are spread out ("s y s t e m", "sys-tem", "a.s.s.i.s.t.a.n.t"): at most two
# separators between two letters.
_SEP = r"[\s\-_.*·•]{0,2}"
_SPACED_ROLES = "|".join(_SEP.join(w) + ("s?" if w == "instruction" else "") for w in _ROLE_WORDS)

WHOLE, FROM_GROUP, ONLY_GROUP = 0, 1, 2  # which span of a match is replaced


def _compile(pattern: str) -> re2._Regexp:
    """RE2, not `re`: matching time is linear in the text whatever the pattern and the text (no backtracking;
    `re` took 2.6 s on one 16,000-space summary with these patterns)."""
    return re2.compile(pattern)


# (pattern, replacement (None: "[quoted <role>]"), which span it replaces)
_PATTERNS: list[tuple[re2._Regexp, str | None, int]] = [
    # forged wrapper tags, with attributes, in any spelling the skeleton folds together
    (_compile(r"<\s*/?\s*recalled\W{0,3}memor(?:y|ies)\b[^<>]{0,200}>?"), "[wrapper tag removed]", WHOLE),
    # chat-template tokens and role tags
    (_compile(rf"<\s*\|[^<>|]{{0,40}}\|\s*>(?:\s*(?:{_ROLES})\b)?"), "[chat token removed]", WHOLE),
    (_compile(r"\|\s*im_(?:start|end|sep)\s*\|"), "[chat token removed]", WHOLE),
    (_compile(r"<<\s*/?\s*sys\s*>>"), "[chat token removed]", WHOLE),
    (_compile(r"\[\s*/?\s*inst\s*\]"), "[chat token removed]", WHOLE),
    (_compile(rf"<\s*/?\s*(?:{_ROLES})\b[^<>]{{0,100}}>?"), "[role tag removed]", WHOLE),
    # the wrapper's name and preamble outside a tag
    (_compile(r"recalled\W{0,3}memor(?:y|ies)"), "recalled memory", WHOLE),
    (_compile(r"untrusted\W{0,3}hints?"), "[preamble-like text removed]", WHOLE),
    # instruction overrides
    (
        _compile(
            r"(?:ignore|disregard|forget|override|bypass)\W+(?:all\W+|any\W+|the\W+|of\W+|your\W+)*"
            r"(?:previous|prior|above|earlier|preceding|former|system|original|existing)\W+"
            r"(?:instructions?|prompts?|messages?|rules|directions|directives|context|guidelines)"
        ),
        "[instruction-like text removed]",
        WHOLE,
    ),
    (
        _compile(
            r"(?:ignore|disregard|forget)\W+(?:all\W+|of\W+)*(?:everything|anything|all|what)\W+"
            r"(?:(?:that\W+|which\W+)?(?:was\W+|has\W+been\W+|you\W+were\W+|i\W+)?"
            r"(?:said|told|written|given|stated|sent|wrote|say)\W+)?"
            r"(?:before|above|earlier|previously|so\W+far|until\W+now|up\W+to\W+now|to\W+you)"
        ),
        "[instruction-like text removed]",
        WHOLE,
    ),
    (
        _compile(r"\bnew\W+(?:system\W+)?(?:instructions?|tasks?|rules?|orders?|directives?|role|persona|goal)\s*:"),
        "[instruction-like text removed]",
        WHOLE,
    ),
    (_compile(r"\byou\s+are\s+now\b"), "[role-change text removed]", WHOLE),
    # markdown headers that pose as sections (### System, ## Instructions): the hashes go
    (_compile(rf"(#{{2,}}\s*)(?:{_ROLES})\b"), "", ONLY_GROUP),
    # role markers: SYSTEM: / assistant : / s y s t e m - : -> [quoted system]
    (_compile(rf"({_SPACED_ROLES})\s*[-–—]{{0,3}}\s*:"), None, FROM_GROUP),
]
_SPACES = _compile(r" {2,}")


def _word_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "_")


def _spans(s: str) -> list[tuple[int, int, str]]:
    """(start, end, replacement) in the skeleton `s` for every pattern's matches."""
    spans: list[tuple[int, int, str]] = []
    for pattern, repl, which in _PATTERNS:
        for m in pattern.finditer(s):
            if which == WHOLE:
                a, b = m.start(), m.end()
            else:
                a, b = m.start(1), (m.end() if which == FROM_GROUP else m.end(1))
            if repl is None:  # a role marker only where the role word starts a word ("filesystem:" stays)
                if a > 0 and _word_char(s[a - 1]):
                    continue
                role = "".join(c for c in m.group(1) if c.isalpha())
                r = f"[quoted {role}]"
            else:
                r = repl
            if b > a:
                spans.append((a, b, r))
    return spans


def neutralise(text: str) -> str:
    """Recalled text made safe to place inside the block (see the module doc)."""
    if not text:
        return ""
    s, origin = _skeleton(text)
    spans = [(origin[a], origin[b - 1] + 1, r) for a, b, r in _spans(s)]
    spans.sort(key=lambda t: (t[0], -(t[1] - t[0])))
    out: list[str] = []
    pos = 0
    for a, b, r in spans:
        if a < pos:  # overlaps an earlier replacement
            continue
        out.append(_escape(text[pos:a]))
        out.append(r)
        pos = b
    out.append(_escape(text[pos:]))
    return _SPACES.sub(" ", "".join(out)).strip()


def _escape(chunk: str) -> str:
    """Drop invisible characters, turn whitespace/controls into spaces, `&`, brackets and their look-alikes into
    entities."""
    return chunk.translate(_ESCAPED)
