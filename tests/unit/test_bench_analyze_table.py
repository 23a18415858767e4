"""The analyze benchmark's table sets each size's analysis beside its floor and the Python pass, as the ratios its
targets are stated in (the analysis within 3x its floor, 4x faster than one Python process)."""

from __future__ import annotations

from zkcoord.analysis.bench_tables import analyze_table


def test_each_row_shows_the_floor_and_both_ratios() -> None:
    row = {"events": 10_000_000, "journal_mb": 2200.0, "jvm_heap_mb": 2147.0, "floor_s": 5.0, "spark_s": 15.0,
           "python_s": 75.0, "counts_agree": True, "injected_found": True}  # fmt: skip
    header, line = analyze_table([row]).splitlines()
    assert header.split() == ["events", "MB", "JVM", "heap", "MB", "floor", "s", "spark", "s", "python", "s",
                              "spark/floor", "python/spark", "agree", "found"]  # fmt: skip
    assert line.split() == ["10000000", "2,200", "2,147", "5.0", "15.0", "75.0", "3.00", "5.00", "True", "True"]


def test_a_document_without_a_floor_shows_a_dash() -> None:
    """Documents written before the floor was measured are still tabulated."""
    row = {"events": 1_000, "journal_mb": 1.0, "spark_s": 2.0, "python_s": 1.0, "counts_agree": True,
           "injected_found": True}  # fmt: skip
    assert analyze_table([row]).splitlines()[1].split() == ["1000", "1", "-", "-", "2.0", "1.0", "-", "0.50", "True",
                                                            "True"]  # fmt: skip
