"""Subscription matching: which topics a member registration covers (Kafka 0.8's ``TopicCount``).  Pure: no I/O.

Shared by the coordinator (planning, routing topic changes to groups) and the ``zk-client`` consumer (its own
assignment and watches), so both protocols agree on what a registration covers.  A registration is taken by its
shape (:class:`Subscribing`, which :class:`zkcoord.layout.znodes.MemberRegistration` satisfies), so this package
stays independent of the layout's codecs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Protocol

#: the values of :class:`zkcoord.layout.znodes.Pattern` this module tells apart
STATIC = "static"
WHITE_LIST = "white_list"


class _Named(Protocol):
    @property
    def value(self) -> str: ...


class Subscribing(Protocol):
    """A member registration as matching sees it: its pattern and its subscription.

    ``subscription`` is ``topic -> threads`` for a static pattern, ``{regex: threads}`` for a wildcard.
    """

    @property
    def pattern(self) -> _Named: ...

    @property
    def subscription(self) -> Mapping[str, int]: ...


def matches(registration: Subscribing, topic: str) -> bool:
    """Whether a wildcard registration covers ``topic`` (Java ``String.matches``: the whole name).

    The regex is Python's to evaluate because it is in the topic-pattern dialect (``zkcoord.layout.topic_regex``),
    on which Python and Java agree: a registration or a ``Subscription`` holding one outside it is refused before it
    gets here.  (This package is independent of the layout, hence ``re`` here rather than that module's matcher.)
    """
    regex = next(iter(registration.subscription))
    hit = re.fullmatch(regex, topic) is not None
    return hit if registration.pattern.value == WHITE_LIST else not hit


def resolve(registration: Subscribing, topics: Mapping[str, int]) -> tuple[dict[str, int], list[str]]:
    """``(topic -> threads, missing static topics)`` for one member against the topics that exist."""
    if registration.pattern.value == STATIC:
        present = {t: n for t, n in registration.subscription.items() if t in topics}
        missing = sorted(t for t in registration.subscription if t not in topics)
        return present, missing
    threads = next(iter(registration.subscription.values()))
    return {t: threads for t in sorted(topics) if matches(registration, t)}, []
