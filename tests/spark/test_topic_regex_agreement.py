"""One meaning everywhere: for patterns drawn from the topic-pattern dialect's grammar and topic names (some made to
match), the consumers' Python matching (:func:`zkcoord.protocol.subscriptions.matches`) and the analysis' Java matching
(:func:`zkcoord.analysis.checks.whole_name_match`, Spark's ``regexp_like``) agree on every pair.  One Spark job.

The pairs are drawn by Hypothesis with a fixed seed (``derandomize``): the same few hundred every run, so a failure
is reproducible; ``tests/topic_patterns.py`` is the grammar.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from tests.topic_patterns import pairs
from zkcoord.analysis.checks import whole_name_match
from zkcoord.layout import topic_regex
from zkcoord.layout.registrations import Pattern
from zkcoord.protocol.subscriptions import matches

pytestmark = pytest.mark.spark

#: grammar examples drawn (each gives up to four pairs); drawing costs ~20 ms an example
EXAMPLES = 250


@dataclass(frozen=True)
class _Member:
    pattern: Pattern
    subscription: dict[str, int]


def _drawn(examples: int) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(pairs())
    def collect(drawn: list[tuple[str, str]]) -> None:
        out.extend(drawn)

    collect()
    return sorted(set(out))


def test_python_and_java_agree_on_every_pattern_and_name(spark: SparkSession) -> None:
    drawn = _drawn(EXAMPLES)
    assert not [p for p, _ in drawn if topic_regex.refusal(p)]  # the grammar's patterns are all in the dialect
    rows = [(p, n, matches(_Member(Pattern.WHITE_LIST, {p: 1}), n)) for p, n in drawn]
    df = spark.createDataFrame(rows, "pattern string, name string, python boolean")
    java = whole_name_match(F.col("name"), F.col("pattern"))
    differ = df.where(java != F.col("python")).select("pattern", "name", "python").collect()
    assert not differ, [tuple(r) for r in differ[:10]]
    hits = sum(python for _, _, python in rows)
    assert len(rows) > 400 and 0.2 < hits / len(rows) < 0.8, (len(rows), hits)  # matches and misses both tested
