"""The Spark pipeline over a run's journal: tables, the S1-S5 verdict and a report (docs/analysis.md).

Entry point: :func:`run_analysis` (``zkcoord analyze`` and ``zkcoord demo`` call it).  Importing this package does
not import PySpark; :func:`run_analysis` does, on first use.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from zkcoord.analysis.errors import (
    AnalysisError,
    JournalRefusedError,
    JournalUnreadableError,
    NoJournalError,
    SparkJobError,
    SparkUnavailableError,
)
from zkcoord.analysis.verdict import PROPERTIES, PropertyResult, ReadCounts, RunVerdict, Verdict

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "PROPERTIES",
    "AnalysisError",
    "JournalRefusedError",
    "JournalUnreadableError",
    "NoJournalError",
    "PropertyResult",
    "ReadCounts",
    "RunVerdict",
    "SparkJobError",
    "SparkUnavailableError",
    "Verdict",
    "run_analysis",
]


def run_analysis(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    master: str | None = "local[2]",
    *,
    report: bool = True,
    spark: SparkSession | None = None,
    conf: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Verdict:
    """Analyse runs and write ``out_dir/{tables/,verdict.json,report.html}``; see
    :func:`zkcoord.analysis.pipeline.run_analysis`."""
    from zkcoord.analysis.pipeline import run_analysis as run  # noqa: PLC0415  # PySpark is imported on first use

    return run(run_dirs, out_dir, master, report=report, spark=spark, conf=conf, progress=progress)
