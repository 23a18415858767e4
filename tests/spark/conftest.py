"""One real SparkSession (local[2], few shuffle partitions, no UI) for every test of this directory.

Spark is part of what the project installs (``make setup``: Java, the ``spark`` extra), so a session that cannot
start fails these tests with the reason rather than skipping them: a skipped check would pass CI checking nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.spark.journals import clean_run, damaged_run, finish, processed_runs, violations_run
from zkcoord.analysis import Verdict, run_analysis
from zkcoord.analysis.errors import SparkUnavailableError
from zkcoord.analysis.session import get_spark


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    try:
        session, created = get_spark("local[2]", {"spark.sql.shuffle.partitions": "2"})
    except SparkUnavailableError as e:
        pytest.fail(f"Spark cannot start (make setup installs what it needs): {e}")
    yield session
    if created:
        session.stop()


@pytest.fixture(scope="session")
def processed_runs_verdict(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Verdict]:
    """One analysis (no report) of the runs of ``tests/spark/journals.processed_runs``, side by side: their base
    directory and the verdict."""
    base = tmp_path_factory.mktemp("processed")
    return base, run_analysis(processed_runs(base), base / "out", report=False)


@pytest.fixture(scope="session")
def analysed_runs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Verdict]:
    """One analysis, report included, of three crafted runs side by side: ``clean``, ``violations`` (one of each
    violation: the unsafe contrast in miniature) and ``damaged`` (given as its journal directory).  Their base
    directory (the analysis is in ``out``) and the verdict; shared by test_analysis, the reader agreement and the
    browser test."""
    base = tmp_path_factory.mktemp("runs")
    finish(clean_run(base / "clean"))
    violations_run(base / "violations")
    damaged_run(base / "damaged")
    return base, run_analysis([base / "clean", base / "violations", base / "damaged" / "journal"], base / "out")
