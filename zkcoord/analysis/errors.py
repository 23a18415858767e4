"""Errors of the analysis pipeline: each one is a single line a user can act on (the CLI prints ``Error: ...``)."""

from __future__ import annotations

from zkcoord.errors import ZkCoordError


class AnalysisError(ZkCoordError):
    """The analysis of a run could not be done."""


class NoJournalError(AnalysisError):
    """A run directory holds no journal files."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f"no journal in {path}: expected {path}/journal/*.jsonl, {path}/*.jsonl or {path}/RUN/journal/*.jsonl"
        )


class JournalRefusedError(AnalysisError):
    """A run's journal holds no event this reader can use (every line skipped); the reason is in the message."""


class JournalUnreadableError(AnalysisError):
    """Spark's executors could not read a journal file the driver found: on a cluster, the journals are not on
    storage every executor sees at the same path."""


class SparkUnavailableError(AnalysisError):
    """Spark could not be started (no Java, no PySpark, or the JVM failed to launch)."""

    retriable = False


class SparkJobError(AnalysisError):
    """A Spark job failed; the message carries the first line of Spark's error, never a Java stack trace."""
