"""Hypothesis strategies for the topic-pattern dialect (``zkcoord/layout/topic_regex.py``), built from its grammar
rather than from the parser, so a test checks the parser against the grammar and not against itself.

Every construct is drawn with a name it matches (``None`` when no name of the alphabet does), built alongside it: an
agreement test then sees matches as well as misses.  Literals and names come from a small alphabet, so random names
match often too.  Names are short: both engines backtrack, in time polynomial in the name's length.
"""

from __future__ import annotations

import re
import string

from hypothesis import strategies as st

TOPIC_CHARS = string.ascii_letters + string.digits + "._-"
_LITERALS = "ab_-Z9"
_NAME_CHARS = "ab_-.Z9x"
MAX_NAME = 16

#: a pattern and a name it matches (``None``: none found)
Drawn = tuple[str, str | None]

#: ``(the character it stands for, its text)`` of the single members of a class
_CLASS_CHARS = [(c, c) for c in "abzAZ09_."] + [(c, "\\" + c) for c in "-.]^[\\{}|"]
_ESCAPES = ["\\.", "\\-", "\\*", "\\(", "\\|", "\\d", "\\D", "\\w", "\\W"]

names = st.text(st.sampled_from(_NAME_CHARS), min_size=1, max_size=MAX_NAME)


def _one_char(draw: st.DrawFn, text: str) -> Drawn:
    """``text`` (one character's worth of pattern) with a name character it matches, if the alphabet has one."""
    fits = [c for c in TOPIC_CHARS if re.fullmatch(text, c)]
    return text, draw(st.sampled_from(fits)) if fits else None


@st.composite
def _single(draw: st.DrawFn) -> Drawn:
    text = draw(st.one_of(st.sampled_from(list(_LITERALS)), st.just("."), st.sampled_from(_ESCAPES)))
    return _one_char(draw, text)


@st.composite
def _char_class(draw: st.DrawFn) -> Drawn:
    members = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["single", "range", "shorthand"]))
        if kind == "shorthand":
            members.append(draw(st.sampled_from(["\\d", "\\D", "\\w", "\\W"])))
            continue
        lo = draw(st.sampled_from(_CLASS_CHARS))
        if kind == "single":
            members.append(lo[1])
            continue
        hi = draw(st.sampled_from([c for c in _CLASS_CHARS if c[0] >= lo[0]]))
        members.append(f"{lo[1]}-{hi[1]}")
    dash = draw(st.sampled_from(["", "first", "last"]))
    body = ("-" if dash == "first" else "") + "".join(members) + ("-" if dash == "last" else "")
    return _one_char(draw, "[" + draw(st.sampled_from(["", "^"])) + body + "]")


@st.composite
def _repeated(draw: st.DrawFn, atom: Drawn, loops: bool) -> Drawn:
    """``atom`` with a repetition (or none); ``loops=False``: bounded ones only."""
    kinds = ["", "", "*", "+", "?", "{m}", "{m,}", "{m,n}"] if loops else ["", "", "", "?", "{m}"]
    kind = draw(st.sampled_from(kinds))
    m = draw(st.integers(0, 3 if loops else 2))
    n = m + draw(st.integers(0, 3))
    low, high = {"": (1, 1), "*": (0, 3), "+": (1, 3), "?": (0, 1), "{m}": (m, m), "{m,}": (m, m + 2)}.get(kind, (m, n))
    text = kind.replace("m", str(m)).replace("n", str(n))
    text += draw(st.sampled_from(["", "?"])) if text else ""
    times = draw(st.integers(low, high))
    sample = atom[1] * times if atom[1] is not None else ("" if times == 0 else None)
    return atom[0] + text, sample


def _looping(text: str) -> bool:
    return bool(re.search(r"(?<!\\)(?:[*+]|\{\d+,\})", text))


def _level(inner: st.SearchStrategy[Drawn]) -> st.SearchStrategy[Drawn]:
    """Alternations of sequences of repeated atoms, whose groups hold ``inner``.

    A group holding a loop is repeated a small fixed number of times at most: a loop over loops (``(a*)*``) is in
    the dialect, but both engines backtrack through it exponentially, and the test would measure that, not
    agreement.
    """
    group = st.tuples(st.sampled_from(["(", "(?:"]), inner).map(lambda t: (f"{t[0]}{t[1][0]})", t[1][1]))
    atom = st.one_of(_single(), _char_class(), group)
    item = atom.flatmap(lambda a: _repeated(a, loops=not (a[0].startswith("(") and _looping(a[0]))))

    def joined(parts: list[Drawn]) -> Drawn:
        samples = [s for _, s in parts]
        return "".join(t for t, _ in parts), None if None in samples else "".join(s for s in samples if s)

    sequence = st.lists(item, max_size=3).map(joined)

    @st.composite
    def alternation(draw: st.DrawFn) -> Drawn:
        branches = draw(st.lists(sequence, min_size=1, max_size=3))
        matching = [s for _, s in branches if s is not None]
        return "|".join(t for t, _ in branches), draw(st.sampled_from(matching)) if matching else None

    return alternation()


@st.composite
def patterns_with_names(draw: st.DrawFn) -> Drawn:
    """A pattern of the dialect's grammar (groups nested a few levels deep, optional end anchors) and a name it
    matches, if one was found."""
    text, sample = draw(st.recursive(_level(st.just(("", ""))), _level, max_leaves=5))
    text = draw(st.sampled_from(["", "^"])) + text + draw(st.sampled_from(["", "$"]))
    if not text:
        return "a", "a"
    return text, sample if sample and len(sample) <= MAX_NAME else None


def patterns() -> st.SearchStrategy[str]:
    """A pattern of the dialect's grammar."""
    return patterns_with_names().map(lambda d: d[0])


@st.composite
def pairs(draw: st.DrawFn) -> list[tuple[str, str]]:
    """A pattern with a few names: the one made to match it (when there is one) and random ones."""
    pattern, sample = draw(patterns_with_names())
    return [(pattern, n) for n in ([sample] if sample else []) + draw(st.lists(names, min_size=1, max_size=4))]
