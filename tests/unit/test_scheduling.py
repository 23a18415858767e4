"""``make test``'s scheduler keeps the tests that share one SparkSession on one worker (tests/scheduling.py)."""

from __future__ import annotations

from tests.scheduling import SparkTogether, scope_of


def test_every_test_under_tests_spark_is_one_unit_of_work() -> None:
    ids = ["tests/spark/test_analysis.py::test_a", "tests/spark/test_cli.py::test_b[x]"]
    assert {scope_of(i) for i in ids} == {"spark"}


def test_any_other_test_is_a_unit_of_its_own() -> None:
    ids = ["tests/integration/test_demo.py::test_a", "tests/unit/test_spark_names.py::test_b", "tests/sparkle.py::t"]
    assert [scope_of(i) for i in ids] == ids


def test_the_demo_scenarios_are_one_unit_of_work() -> None:
    ids = ["tests/integration/test_demo_scenarios.py::test_a", "tests/integration/test_demo_scenarios.py::test_b"]
    assert {scope_of(i) for i in ids} == {"demos"}
    assert scope_of("tests/integration/test_demo.py::test_c") == "tests/integration/test_demo.py::test_c"


def test_the_scheduler_splits_by_that_rule() -> None:
    sched = SparkTogether.__new__(SparkTogether)  # _split_scope reads no state
    assert sched._split_scope("tests/spark/test_cli.py::test_b") == "spark"
    assert sched._split_scope("tests/unit/test_x.py::t@g") == "tests/unit/test_x.py::t@g"
