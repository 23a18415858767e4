"""How ``make test`` spreads the suite over its pytest-xdist workers.

pytest-xdist's own ``--dist loadgroup`` groups tests by renaming their node ids (``item._nodeid``), which pytest 9.2
no longer reads (a node's id is ``item._id``): the groups silently came apart, the tests that share one SparkSession
ran on both workers, and their module- and session-scoped analyses were computed twice (seen in CI: 72 s and 60 s
for the same module's verdict).  This scheduler groups by path instead, which needs nothing from pytest's internals:
every test under ``tests/spark/`` is one unit of work, so one worker runs them in order with one SparkSession and
each shared analysis once; so are the demo scenarios (``tests/integration/test_demo_scenarios.py``: their runs
and one analysis of them all are a module-scoped fixture).  Every other test is a unit of its own, handed out in
collection order to whichever worker has two or fewer tests left (xdist's ``LoadScopeScheduling``), so
:func:`order` puts the longest first.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

#: the directory whose tests share one SparkSession (``tests/spark/conftest.py``) and so one worker
SPARK_DIR = "tests/spark/"
#: the module whose tests share one module-scoped fixture (the demo scenarios' runs and their one analysis): split
#: over workers, each would run every demo and analysis again
DEMOS_MODULE = "tests/integration/test_demo_scenarios.py"


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: ``"spark"`` for the shared-session tests, ``"demos"`` for the demo
    scenarios, else the test itself."""
    if nodeid.startswith(SPARK_DIR):
        return "spark"
    return "demos" if nodeid.startswith(DEMOS_MODULE) else nodeid


class SparkTogether(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
    """``LoadScopeScheduling`` with :func:`scope_of` as its scopes.  Runs in the controller, which sees node ids
    only (it collects nothing itself), hence a rule on paths rather than on markers.  xdist sorts the units by size
    (its ``--loadscope-reorder`` default) with a stable sort: the Spark unit first, then the others in the order the
    workers collected them."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)
