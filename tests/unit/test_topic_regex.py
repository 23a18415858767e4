"""The topic-pattern dialect (``zkcoord/layout/topic_regex.py``): what it accepts, what it refuses and why, and that
any string gets one or the other.  Agreement with Java is ``tests/spark/test_topic_regex_agreement.py``."""

from __future__ import annotations

import itertools
import re
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.topic_patterns import patterns
from zkcoord.errors import ConfigurationError, TopicPatternError
from zkcoord.layout import topic_regex

ACCEPTED = [
    "orders-.*",
    "orders|payments",
    "^orders.*$",  # Kafka 0.8 users anchored; whole-name matching makes it redundant
    "events-\\d+",
    "[a-z0-9_-]+\\.log",
    "[^.]+",
    "(?:a|b){2,3}?c",
    "(ab)*",
    "a{2,}",
    "a|",
    "[-a]",
    "[a-]",
    "[^-a]",
    "[\\w-]",
    "\\.\\-\\\\",
]

#: pattern -> a fragment of the reason: each is a place where Python and Java differ, or a 0.8 convention
REFUSED = {
    "": "empty pattern",
    "a,b": "',' (Kafka 0.8's TopicFilter",
    "a b": "' ', which no topic name holds",
    "a{": "starts no repetition",  # Python: a literal; Java: an error
    "a{,2}": "Python reads {,n} as {0,n}",
    "a}": "unescaped '}'",
    "a]": "unescaped ']'",
    "^*": "nothing to repeat",  # Python refuses, Java accepts
    "a{2}{3}": "repetition of a repetition",  # Python refuses, Java accepts
    "a*+": "possessive",
    "(?>a)": "atomic group",
    "[[a]]": "nested class",  # Python: '[' literal; Java: a union
    "[a&&b]": "intersection",
    "[\\w-a]": "range from a class shorthand",  # Python refuses, Java reads a literal '-'
    "[a-z-9]": "'-' in a class",
    "[]a]": "']' first",
    "[^]": "']' first",
    "[a^]": "'^' in a class",
    "[z-a]": "reversed range",
    "[a\\---]": "range to an unescaped '-'",  # Python: a FutureWarning (a set difference to come)
    "(?i)orders": "inline flags",
    "(?=a)a": "lookahead",
    "(?<!a)b": "negative lookbehind",
    "(?P<n>a)": "Python named group",
    "(?<n>a)": "Java named group",
    "(?#x)a": "comment",
    "(a)\\1": "backreference",
    "\\bx": "word boundary",
    "\\sx": "\\s",
    "\\p{Alpha}": "Java's only",
    "\\Qa.b\\E": "quoting",
    "\\x41": "engines read differently",
    "\\_": "write '_'",
    "a$b": "'$' other than as the last",
    "a^b": "'^' other than as the first",
    "(a$)": "'$' other than as the last",
    "\\Aa\\z": "anchor",
    "a{1001}": "above 1000",
    "a{3,2}": "below its minimum",
    "(a": "without its ')'",
    "a)": "unbalanced ')'",
    "[a": "without its ']'",
    "a\\": "trailing",
    "a" * 1001: "longer than 1000",
    "(" * 33 + ")" * 33: "nested deeper than 32",
}


@pytest.mark.parametrize("pattern", ACCEPTED)
def test_accepted_patterns_mean_what_python_says(pattern: str) -> None:
    assert topic_regex.refusal(pattern) is None
    assert topic_regex.check(pattern) == pattern
    re.compile(pattern)


@pytest.mark.parametrize(("pattern", "why"), REFUSED.items(), ids=[repr(p)[:30] for p in REFUSED])
def test_refused_patterns_say_why_in_one_line(pattern: str, why: str) -> None:
    reason = topic_regex.refusal(pattern)
    assert reason is not None and why in reason
    with pytest.raises(TopicPatternError) as raised:
        topic_regex.check(pattern)
    assert isinstance(raised.value, ConfigurationError)
    assert "\n" not in str(raised.value) and str(raised.value).startswith("invalid regex ")
    assert len(str(raised.value)) < 300


def test_whole_name_matching() -> None:
    assert topic_regex.fullmatch("orders", "orders")
    assert not topic_regex.fullmatch("orders", "orders2")
    assert not topic_regex.fullmatch("rder", "orders")
    assert topic_regex.fullmatch("a|ab", "ab")  # alternation backtracks to reach the end, as Java's matches()
    assert topic_regex.java_whole("a|b") == "\\A(?:a|b)\\z"
    with pytest.raises(TopicPatternError):
        topic_regex.fullmatch("(?i)a", "A")


@settings(max_examples=500)
@given(st.text(st.sampled_from("ab.-_*+?{}[]()^$|\\,:&=!<>#PpdwbsiQE0123 \n"), max_size=20) | st.text(max_size=20))
def test_any_string_is_accepted_or_refused_in_one_line(text: str) -> None:
    reason = topic_regex.refusal(text)  # no other exception, whatever the text
    if reason is None:
        re.compile(text)  # accepted: Python compiles it
    else:
        assert "\n" not in reason and reason


@settings(max_examples=200)  # the grammar's strategy is slow to draw (~20 ms an example)
@given(patterns())
def test_patterns_of_the_grammar_are_accepted_and_compile(pattern: str) -> None:
    assert topic_regex.refusal(pattern) is None, pattern
    re.compile(pattern)


def test_every_accepted_class_of_up_to_four_members_compiles_in_python_without_a_warning() -> None:
    """Exhaustive over the characters that are syntax in a class: Python warns (FutureWarning) of the set operations
    it may add (``--``, ``&&``, ``||``, ``~~``, nested ``[``), which would mean a different thing later."""
    parts = ["-", "\\-", "a", "z", "[", "]", "\\]", "^", "&", "|", "~", "\\w"]
    accepted = 0
    for n in range(1, 5):
        for combo in itertools.product(parts, repeat=n):
            pattern = "[" + "".join(combo) + "]"
            if topic_regex.refusal(pattern) is None:
                accepted += 1
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    re.compile(pattern)
    assert accepted > 1000
