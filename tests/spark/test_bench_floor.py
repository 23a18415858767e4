"""``zkcoord bench analyze``'s floor on a small synthetic run: Spark reading, parsing and grouping the journals with
the analysis' own schema.  It once failed at every size (Spark refuses to hash the schema's map columns), so the
benchmark measured nothing; this keeps it running without paying for a whole benchmark in the suite."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from zkcoord.bench.analyze import floor, generate

pytestmark = pytest.mark.spark


def test_the_floor_parses_and_groups_every_field_of_a_synthetic_run(spark: SparkSession, tmp_path: Path) -> None:
    written = generate(tmp_path / "run", 2_000, violations=True)
    assert written > 0
    assert floor(spark, [tmp_path / "run"]) > 0
