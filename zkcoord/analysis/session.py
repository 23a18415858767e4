"""The Spark session of the analysis: local mode tuned for a small machine by default, any master on request.

Local mode (``local[N]``, the default) gets settings that suit a laptop or a 2-core CI box: few shuffle partitions,
no web UI, no console progress bar, quiet logs, a bigger in-memory buffer for window functions.  The same code runs
on a cluster: pass ``spark://HOST:PORT`` or ``yarn``, or start the job with ``spark-submit`` (docs/analysis.md), and
only the settings every deployment wants (UI off, UTC, quiet logs) are applied.

When this process launches the JVM itself, the JVM's stderr goes to a log file (:data:`SPARK_LOG`) rather than to
the user's terminal: Spark's start-up chatter and Java stack traces never reach the user; errors are translated by
:func:`spark_errors` into one line that names the log file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from zkcoord.analysis.errors import JournalUnreadableError, SparkJobError, SparkUnavailableError
from zkcoord.errors import ZkServerError
from zkcoord.zkserver.util import find_java

try:
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession
except ImportError as _e:  # pragma: no cover - exercised only without the extra installed
    raise SparkUnavailableError("PySpark is not installed: pip install 'zkcoord[spark]'") from _e

from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # py4j ships no type information
from pyspark.logger import PySparkLogger

# PySpark 4 logs every failed DataFrame operation, Java stack trace included, as JSON on stderr before raising it.
# The analysis translates those errors into one line (spark_errors), so these loggers are silenced.
for _name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
    PySparkLogger.getLogger(_name).setLevel(logging.CRITICAL)

#: Where the JVM's stderr goes when this process starts Spark in local mode.
SPARK_LOG = Path(tempfile.gettempdir()) / f"zkcoord-spark-{os.getuid()}.log"

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
# PySpark counts as a shell: keep its "Setting default log level" banner quiet by agreeing with the root level.
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""

#: Settings for every deployment.
BASE_CONF: dict[str, str] = {
    "spark.app.name": "zkcoord-analyze",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.log.level": "ERROR",
    # Range merges sort every delivery of a partition into one window group: keep those rows in memory.
    "spark.sql.windowExec.buffer.in.memory.threshold": str(1 << 20),
}

#: Extra settings for local mode on a small machine (2 cores, a few GB).
LOCAL_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.driver.memory": "2g",
    # No adaptive execution in local mode: it runs every shuffle stage of a plan as a Spark job of its own and
    # re-plans (and re-compiles) what follows it, which on a few local cores costs more than it saves (issue 20: at
    # 10^6 events 101 jobs, 70 of them such stages; the verdict's one collect was 23 jobs).  There is no skew to
    # split and no cluster to share out; the shuffles are sized to the journal instead (pipeline._tuned), and the
    # small sides of joins are broadcast by hint.
    "spark.sql.adaptive.enabled": "false",
}

#: JVM options of a local-mode driver this process launches: the client compiler only, and the serial collector.
#: A demo's analysis is a short JVM whose C2 compiler threads spent a third of its CPU on code that runs for
#: seconds: measured on a demo's two runs (36 s each, 40 journals), the JVM's CPU 112.7 -> 76.3 s (start-up
#: 11.2 -> 5.5 s), wall 89 -> 63 s, same verdict.  A long analysis on a big machine may want C2 back: pass
#: ``spark.driver.extraJavaOptions`` in ``conf``, which replaces these.
#: The client compiler alone gets the JVM's small code cache (48 MB, as without tiered compilation), which an
#: analysis' thousands of generated classes filled: the JVM then stops compiling ("CodeCache is full. Compiler has
#: been disabled") and runs the rest interpreted (issue 20: seen 100-150 s into a demo's analysis).  The tiered
#: default's size is restored; it is reserved address space, used only as code is compiled.
LOCAL_JVM_OPTIONS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:ReservedCodeCacheSize=240m"]

DEFAULT_LOCAL_MASTER = "local[2]"


def _under_spark_submit() -> bool:
    """True when this Python process was started by ``spark-submit`` (its JVM is already there)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _log4j_config() -> Path:
    path = Path(tempfile.gettempdir()) / f"zkcoord-spark-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        path.write_text(_LOG4J2)
    return path


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` while the JVM is launched (it keeps it); restore it for Python after."""
    saved = os.dup(2)
    try:
        with path.open("ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _log_hint() -> str:
    """The last meaningful line of the Spark log, to explain a failed launch."""
    try:
        lines = [ln.strip() for ln in SPARK_LOG.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for line in reversed(lines):
        if not line.startswith(("at ", "WARNING:")):
            return f": {line[:300]}"
    return ""


def get_spark(
    master: str | None = DEFAULT_LOCAL_MASTER, conf: Mapping[str, str] | None = None
) -> tuple[SparkSession, bool]:
    """Return ``(session, created)``: the active session if there is one, else a new one for ``master``.

    ``master=None`` means "whatever ``spark-submit`` configured", or :data:`DEFAULT_LOCAL_MASTER` outside it.
    ``created`` says whether the caller owns the session (and should stop it).

    :raises SparkUnavailableError: no Java, or the JVM did not start.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    submitted = _under_spark_submit()
    if master is None and not submitted:
        master = DEFAULT_LOCAL_MASTER
    builder = SparkSession.builder
    if master is not None:
        builder = builder.master(master)
    settings = dict(BASE_CONF)
    if master is not None and master.startswith("local"):
        settings.update(LOCAL_CONF)
    if not submitted:
        options = [f"-Dlog4j2.configurationFile=file:{_log4j_config()}"]
        if master is not None and master.startswith("local"):
            options += LOCAL_JVM_OPTIONS
        settings["spark.driver.extraJavaOptions"] = " ".join(options)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    if submitted:
        with spark_errors("starting Spark"):
            return builder.getOrCreate(), True
    try:
        find_java()
    except ZkServerError as e:
        raise SparkUnavailableError(f"{e} (zkcoord analyze runs Spark, which needs Java 17 or newer)") from e
    try:
        with _stderr_to(SPARK_LOG):
            session = builder.getOrCreate()
    except (PySparkException, Py4JError, OSError, RuntimeError) as e:
        raise SparkUnavailableError(f"Spark did not start (master {master}){_log_hint()}; log: {SPARK_LOG}") from e
    session.sparkContext.setLogLevel("ERROR")
    return session, True


def first_line(err: BaseException) -> str:
    """The first non-empty line of an error's text (Spark's messages go on with a stack trace)."""
    java = getattr(err, "java_exception", None)
    text = str(java) if java is not None else str(err)
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:500]
    return type(err).__name__


@contextlib.contextmanager
def spark_errors(doing: str) -> Iterator[None]:
    """Turn Spark's and Py4J's exceptions into :class:`SparkJobError` with one line of text."""
    try:
        yield
    except (PySparkException, Py4JError) as e:
        hint = "" if _under_spark_submit() else f" (Spark's log: {SPARK_LOG})"
        raise SparkJobError(f"Spark failed while {doing}: {first_line(e)}{hint}") from e


@contextlib.contextmanager
def journals_readable(files: Iterable[Path]) -> Iterator[None]:
    """Turn a Spark job that failed to read one of ``files`` (journal files the driver found) into
    :class:`JournalUnreadableError`, one line that says what a cluster needs; any other error goes on as it was.

    The files are read by the executors, which on a cluster run on other hosts: a journal on the driver's local disk
    does not exist for them (Spark's ``FAILED_READ_FILE``, a ``FileNotFoundException`` in its cause).
    """
    try:
        yield
    except (PySparkException, Py4JError) as e:
        java = getattr(e, "java_exception", None)
        text = f"{e}\n{java}" if java is not None else str(e)
        if "FAILED_READ_FILE" not in text and "FileNotFoundException" not in text:
            raise
        path = next((p for p in map(os.path.abspath, files) if p in text), None)
        if path is None:
            raise
        why = (
            "it does not exist for them"
            if "FILE_NOT_EXIST" in text or "FileNotFoundException" in text
            else "permission denied"
            if "Permission denied" in text or "AccessDenied" in text
            else "the read failed"
        )
        raise JournalUnreadableError(
            f"Spark's executors cannot read the journal {path} ({why}): the journals must be on storage every "
            "executor sees at the same path (a shared filesystem or an object store); see docs/analysis.md, "
            '"Running on a cluster"'
        ) from e
