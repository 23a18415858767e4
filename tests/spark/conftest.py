"""One real SparkSession (local[2], few shuffle partitions, no UI) for every test of this directory.

The tests skip cleanly when Java is not installed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from zkcoord.analysis.errors import SparkUnavailableError
from zkcoord.analysis.session import get_spark


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    try:
        session, created = get_spark("local[2]", {"spark.sql.shuffle.partitions": "2"})
    except SparkUnavailableError as e:
        pytest.skip(f"the analysis tests need Spark: {e}")
    yield session
    if created:
        session.stop()
