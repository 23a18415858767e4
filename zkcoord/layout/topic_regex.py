"""The topic-pattern dialect: the one regex language of ``white_list`` / ``black_list`` subscriptions.

A pattern is matched against a whole topic name, by Python's ``re.fullmatch`` in the coordinator and both consumers
and by Java's ``java.util.regex`` (Spark's ``rlike``, Kafka 0.8's ``String.matches``) in the analysis and in 0.8
clients.  The two engines disagree on much of their syntax, so every place that accepts a pattern (the command line,
:class:`~zkcoord.consumer.config.Subscription`, a registration's decode, the analysis) accepts only this dialect: a
subset that both evaluate identically on every topic name (``zkcoord.layout.names``: ASCII letters, digits, ``.``,
``_``, ``-``).  Anything else is refused in one line that says what and where.  Pure: imports only
:mod:`zkcoord.errors`.

The dialect, and why each construct is in or out (the engines' documentation: Python's ``re`` module, Java's
``java.util.regex.Pattern``; each "differs" below was also observed on CPython 3.11 and OpenJDK 17):

* **In**: the literals ``a-z A-Z 0-9 _ -``; ``.``; a backslash before one of ``\\ . ^ $ | ? * + ( ) [ ] { } -``
  (that character, in both); ``\\d \\D \\w \\W``; character classes ``[...]`` and ``[^...]`` of those literals, ``.``,
  escapes and ranges ``x-y`` (``x <= y``); groups ``(...)`` and ``(?:...)``; alternation ``|`` (empty branches too);
  ``* + ?``, ``{m}``, ``{m,}``, ``{m,n}`` (``m <= n <= 1000``), each optionally lazy (``*?``): laziness changes which
  match is found, never whether a whole name matches; ``^`` as the very first and ``$`` as the very last character,
  which whole-name matching makes redundant (Kafka 0.8 users wrote them).
* ``\\d`` and ``\\w`` are Unicode-aware in Python's str patterns and ASCII in Java's default mode; they differ only
  on non-ASCII characters, which no topic name holds.  ``.`` excludes ``\\n`` in Python but every line terminator
  (``\\r``, ``\\u0085``, ``\\u2028``...) in Java: again none is in a topic name.  So "identically" is on topic names,
  the only strings a subscription is ever matched against.
* **Out: any other unescaped character.**  ``{`` not starting a repetition is a literal in Python and an error in
  Java; ``{,n}`` is ``{0,n}`` in Python and an error in Java; ``]`` and ``}`` alone are literals in both but never
  part of a topic name; ``#`` and whitespace change meaning under a verbose flag; ``,``, spaces and quotes are what
  Kafka 0.8's ``TopicFilter`` rewrote (``a,b`` became ``a|b``) before registering, so a registration never holds one
  and a pattern with one is a mistake: write ``a|b``.
* **Out: ``^`` or ``$`` anywhere but the ends** (Python refuses ``^*``, Java accepts it; ``$`` before a final newline
  differs), and ``\\A \\Z \\z \\G`` (Python's ``\\Z`` is Java's ``\\z``; Java's ``\\Z`` and ``\\G`` have no Python
  meaning).
* **Out: stacked repetitions** (Python refuses ``a{2}{3}``, Java reads it) and **possessive** ``*+ ++ ?+ {m,n}+``
  (Java's, and Python's only from 3.11) and **atomic groups** ``(?>...)``: they change what matches.
* **Out: every other ``(?``**: lookaround ``(?= (?! (?<= (?<!`` (both have it, with different limits on what a
  lookbehind may hold; out, so that the dialect stays what an automaton such as RE2 could run too), inline flags
  ``(?i)`` (Python allows them only at the start and has ``a``/``L``/``u``, Java has ``d``/``u``/``U`` and scoped
  forms anywhere), named groups ``(?P<n>`` (Python's) and ``(?<n>`` (Java's),
  comments ``(?#`` and conditionals ``(?(1)`` (Python's).
* **Out: backreferences** ``\\1``: Java reads ``\\12`` as group 1 then ``2`` when there is no group 12, Python as
  group 12; ``\\0`` is octal in Java and NUL in Python.
* **Out: other escapes.**  ``\\b \\B``: a word boundary in both, but Java's word characters for ``\\b`` were not its
  ``\\w`` before Java 19, and inside a class Python reads ``\\b`` as a backspace.  ``\\s \\S``: Python's ``\\s`` also
  matches ``\\x1c``-``\\x1f`` and Unicode spaces; none is in a topic name (write ``.`` for ``\\S``).
  ``\\p{..} \\P{..}`` (Unicode and POSIX classes) and ``\\Q..\\E`` (quoting) are Java's only; ``\\x \\u \\N \\c \\e
  \\t \\n`` and friends name characters differently in each and none a topic-name character.  A backslash before any
  other letter is an error in Python and reserved in Java.
* **Out, in classes**: ``[`` (Java reads a nested class, a union; Python a literal), ``&&`` (Java's intersection,
  Python's literals), ``^`` not first, ``]`` first (``[]a]``: escape it), an empty class, ``-`` other than first, last
  or between two single characters (``[\\w-a]``: Python refuses, Java reads a literal ``-``), a range to an unescaped
  ``-`` (``[a\\---]``: Python warns of a set difference to come), a shorthand as a range's end, POSIX ``[:alpha:]``
  (Java's ``\\p{Alpha}``, Python has neither).
* **Limits**: at most :data:`MAX_LENGTH` characters, :data:`MAX_NESTING` nested groups, repetition bounds up to
  :data:`MAX_REPEAT`: a topic name has at most 249 characters, and the parser's recursion stays bounded.  The empty
  pattern is refused: as a white list it matches no topic, as a black list every one -- either is a mistake.

Not addressed: catastrophic backtracking (``(a|a)*b``) is in the dialect; both engines backtrack alike, slowly.
"""

from __future__ import annotations

import functools
import re
import string

from zkcoord.errors import TopicPatternError

MAX_LENGTH = 1000
MAX_NESTING = 32
MAX_REPEAT = 1000

#: what may stand unescaped as a literal: the topic-name alphabet but ``.``, which means any character
LITERALS = frozenset(string.ascii_letters + string.digits + "_-")
#: what a backslash may precede to stand for itself
ESCAPABLE = frozenset("\\.^$|?*+()[]{}-")
#: the shorthand classes in the dialect
SHORTHANDS = frozenset("dDwW")

_DIGITS = frozenset(string.digits)
_GROUP_KINDS = (
    ("(?=", "a lookahead"),
    ("(?!", "a negative lookahead"),
    ("(?<=", "a lookbehind"),
    ("(?<!", "a negative lookbehind"),
    ("(?>", "an atomic group (it changes what matches)"),
    ("(?P", "a Python named group"),
    ("(?<", "a Java named group"),
    ("(?#", "a Python comment"),
    ("(?(", "a Python conditional"),
)
_ESCAPE_REASONS = {
    **dict.fromkeys(
        "bB",
        "a word boundary: its word characters differ between the engines (and Python reads "
        "'\\b' in a class as a backspace)",
    ),
    **dict.fromkeys(
        "AZzG",
        "an anchor whole-name matching already makes (Python's \\Z is Java's \\z; Java's \\Z "
        "and \\G have no Python meaning)",
    ),
    **dict.fromkeys(
        "sS",
        "Python's \\s also matches \\x1c-\\x1f and Unicode spaces; no topic name holds a space (write '.' for \\S)",
    ),
    **dict.fromkeys("pP", "a Unicode or POSIX class: Java's only"),
    **dict.fromkeys("QE", "Java's quoting: escape each metacharacter instead"),
    **dict.fromkeys(string.digits, "a backreference or an octal escape: the engines read them differently"),
}


def refusal(pattern: str) -> str | None:
    """Why ``pattern`` is outside the dialect (one line, with the position), or ``None`` when it is inside."""
    if not pattern:
        return "an empty pattern (it matches no topic as a white list, every topic as a black list)"
    if len(pattern) > MAX_LENGTH:
        return f"longer than {MAX_LENGTH} characters ({len(pattern)})"
    try:
        _Parser(pattern).parse()
    except _Refused as e:
        return f"at position {e.position}, {e.reason}"
    return None


def check(pattern: str) -> str:
    """Return ``pattern`` if it is in the dialect.

    :raises TopicPatternError: it is not (a :class:`~zkcoord.errors.ConfigurationError`; its message is one line).
    """
    reason = refusal(pattern)
    if reason is not None:
        raise TopicPatternError(pattern, reason)
    return pattern


def fullmatch(pattern: str, name: str) -> bool:
    """Whether ``pattern`` (checked) matches the whole of ``name``, as Python evaluates the dialect.

    :raises TopicPatternError: ``pattern`` is outside the dialect.
    """
    return _compiled(pattern).fullmatch(name) is not None


#: what :func:`java_whole` puts around a pattern (the analysis builds the same around a column of them)
JAVA_WHOLE = ("\\A(?:", ")\\z")


def java_whole(pattern: str) -> str:
    """``pattern`` as a Java regex that ``Matcher.find`` (Spark's ``rlike``) matches only on whole names.

    ``\\A``/``\\z`` rather than ``^``/``$``: Java's ``$`` also matches before a final line terminator.
    """
    return JAVA_WHOLE[0] + pattern + JAVA_WHOLE[1]


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(check(pattern))


class _Refused(Exception):
    def __init__(self, position: int, reason: str) -> None:
        super().__init__(reason)
        self.position = position
        self.reason = reason


class _Parser:
    """A recursive-descent recogniser of the dialect's grammar (it builds nothing: the engines compile the text)::

    pattern := '^'? alternation '$'?
    alternation := sequence ('|' sequence)*
    sequence := (atom repetition?)*
    repetition := ('*' | '+' | '?' | '{' m '}' | '{' m ',' '}' | '{' m ',' n '}') '?'?
    atom := literal | '.' | escape | class | '(' alternation ')' | '(?:' alternation ')'
    class := '[' '^'? member+ ']' ;  member := single ('-' single)? | shorthand
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0

    def peek(self, ahead: int = 0) -> str:
        i = self.pos + ahead
        return self.text[i] if i < len(self.text) else ""

    def refuse(self, reason: str, at: int | None = None) -> _Refused:
        return _Refused(self.pos if at is None else at, reason)

    def parse(self) -> None:
        if self.peek() == "^":
            self.pos += 1
        self.alternation()
        if self.pos < len(self.text):  # only a ')' stops an alternation at depth 0
            raise self.refuse("an unbalanced ')'")

    def alternation(self) -> None:
        self.sequence()
        while self.peek() == "|":
            self.pos += 1
            self.sequence()

    def sequence(self) -> None:
        while (c := self.peek()) not in ("", "|", ")"):
            if c == "$" and self.pos == len(self.text) - 1 and self.depth == 0:
                self.pos += 1
                return
            if c in "*+?{":
                raise self.refuse(f"nothing to repeat before {c!r}")
            self.atom()
            self.repetition()

    def repetition(self) -> None:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.pos += 1
        elif c == "{":
            self.bounds()
        else:
            return
        if self.peek() == "?":
            self.pos += 1  # lazy
        elif self.peek() == "+":
            raise self.refuse("a possessive repetition (it changes what matches; Python has it only from 3.11)")
        if self.peek() and self.peek() in "*+?{":
            raise self.refuse("a repetition of a repetition (Python refuses it, Java reads it): use a group")

    def bounds(self) -> None:
        start = self.pos
        self.pos += 1
        low = self.number()
        if low is None:
            hint = "Python reads {,n} as {0,n}, Java refuses it" if self.peek() == "," else "escape a literal '\\{'"
            raise self.refuse(f"a '{{' that starts no repetition {{m}}, {{m,}} or {{m,n}} ({hint})", start)
        high: int | None = low
        if self.peek() == ",":
            self.pos += 1
            high = self.number()
        if self.peek() != "}":
            raise self.refuse("an unterminated repetition: expected '}'", start)
        self.pos += 1
        if high is not None and high < low:
            raise self.refuse(f"a repetition {{{low},{high}}} whose maximum is below its minimum", start)

    def number(self) -> int | None:
        start = self.pos
        while self.peek() and self.peek() in _DIGITS:
            self.pos += 1
        if self.pos == start:
            return None
        if self.pos - start > len(str(MAX_REPEAT)) or int(self.text[start : self.pos]) > MAX_REPEAT:
            raise self.refuse(f"a repetition bound above {MAX_REPEAT}", start)
        return int(self.text[start : self.pos])

    def atom(self) -> None:
        c = self.peek()
        if c == "(":
            self.group()
        elif c == "[":
            self.char_class()
        elif c == "\\":
            self.escape()
        elif c == "." or c in LITERALS:
            self.pos += 1
        else:
            raise self.refuse(self.unescaped(c))

    def unescaped(self, c: str, in_class: bool = False) -> str:
        if c in ESCAPABLE and in_class:
            return f"an unescaped {c!r} in a class (escape a literal as '\\{c}')"
        if c == "^":
            return "'^' other than as the first character (whole-name matching anchors anyway)"
        if c == "$":
            return "'$' other than as the last character (whole-name matching anchors anyway)"
        if c == ",":
            return "',' (Kafka 0.8's TopicFilter read ',' as '|': write 'a|b')"
        if c in ESCAPABLE:
            return f"an unescaped {c!r} (escape a literal as '\\{c}')"
        return f"{c!r}, which no topic name holds (letters, digits, '.', '_', '-')"

    def group(self) -> None:
        start = self.pos
        if self.text.startswith("(?:", start):
            self.pos += 3
        elif self.peek(1) == "?":
            kind = next((what for prefix, what in _GROUP_KINDS if self.text.startswith(prefix, start)), None)
            raise self.refuse(kind or "inline flags (each engine has its own)")
        else:
            self.pos += 1
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.refuse(f"groups nested deeper than {MAX_NESTING}", start)
        self.alternation()
        if self.peek() != ")":
            raise self.refuse("a '(' without its ')'", start)
        self.pos += 1
        self.depth -= 1

    def escape(self) -> str | None:
        """One escape: the character it stands for, or ``None`` for a shorthand class."""
        start = self.pos
        self.pos += 1
        c = self.peek()
        if not c:
            raise self.refuse("a trailing '\\' that escapes nothing", start)
        self.pos += 1
        if c in ESCAPABLE:
            return c
        if c in SHORTHANDS:
            return None
        shown = repr("\\" + c)  # repr: the character may be a newline
        if c in _ESCAPE_REASONS:
            raise self.refuse(f"{shown}: {_ESCAPE_REASONS[c]}", start)
        if c in string.ascii_letters:
            raise self.refuse(f"{shown}: an escape the engines read differently (or not at all)", start)
        instead = f"write {c!r}" if c in LITERALS else f"no topic name holds {c!r}"
        raise self.refuse(f"{shown}: only metacharacters are escaped ({instead})", start)

    def char_class(self) -> None:
        start = self.pos
        self.pos += 1
        if self.peek() == "^":
            self.pos += 1
        first = True
        while (c := self.peek()) != "]" or first:
            if not c:
                raise self.refuse("a '[' without its ']'", start)
            if c == "]":
                raise self.refuse("']' first in a class (escape it as '\\]')")
            plain_dash = c == "-"
            low = self.member(first)
            first = False
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                if low is None or plain_dash:
                    raise self.refuse("a range from a class shorthand or from an unescaped '-'")
                self.pos += 1
                at = self.pos
                if self.peek() == "-":  # Python warns of a set difference '--' to come, and reads a range
                    raise self.refuse("a range to an unescaped '-' (escape it as '\\-')")
                high = self.member(False)
                if high is None:
                    raise self.refuse("a range to a class shorthand", at)
                if high < low:
                    raise self.refuse(f"a reversed range {low!r}-{high!r}", at)
        self.pos += 1

    def member(self, first: bool) -> str | None:
        """One character of a class (``None``: a shorthand)."""
        c = self.peek()
        if c == "\\":
            return self.escape()
        if c == "-" and (first or self.peek(1) == "]"):
            self.pos += 1
            return c
        if c == "." or (c in LITERALS and c != "-"):
            self.pos += 1
            return c
        if c == "-":
            raise self.refuse("'-' in a class other than first, last or in a range x-y (escape it as '\\-')")
        if c == "[":
            raise self.refuse("'[' in a class (Java reads a nested class, Python a literal)")
        if c == "&" and self.peek(1) == "&":
            raise self.refuse("'&&' (Java's class intersection, Python's literals)")
        if c == "^":
            raise self.refuse("'^' in a class other than first (escape a literal as '\\^')")
        raise self.refuse(self.unescaped(c, in_class=True))
