"""Fixtures for the whole suite: one real ZooKeeper for the run, a fresh chroot per test, diagnostics on failure.

- ``zk_server`` (session): a real :class:`~zkcoord.zkserver.ZkServer` (tick 200 ms, so sessions can expire in under
  a second).  Integration tests skip cleanly when Java or ZooKeeper is not installed.
- ``zk_hosts``: ``127.0.0.1:PORT/t_<uuid hex>``, a chroot of its own for each test (created before the test).
- ``zk_client``: a started ``KazooClient`` on that chroot, stopped at teardown.
- ``zk_factory``: a :class:`~tests.zkutil.ZkFactory` for tests that need servers or ensembles of their own.
- ``cluster``: a :class:`~tests.clusters.Cluster` on the test's chroot (no broker yet), torn down after the test.

When a test that uses ZooKeeper fails, its report carries the tail of every server log involved.  faulthandler dumps
every thread's stack shortly before pytest-timeout's deadline, and on ``kill -USR1 <pytest pid>`` at any time.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from hypothesis import HealthCheck, settings
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from tests.clusters import Cluster
from tests.scheduling import SparkTogether, scope_of
from tests.zkutil import TEST_CONFIG, ZkFactory
from zkcoord.errors import ZkServerError
from zkcoord.zkserver import ZkServer, find_java, find_zookeeper_classpath, log_tail

LOG_TAIL_LINES = 40
_SERVER = pytest.StashKey[ZkServer]()
_FAULT_STREAM = pytest.StashKey[IO[str]]()


# --- ZooKeeper ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def zk_server(request: pytest.FixtureRequest) -> Iterator[ZkServer]:
    """One real ZooKeeper for the whole run.  Tests must not stop or pause it (use ``zk_factory`` for that)."""
    try:
        find_java()
        find_zookeeper_classpath()
    except ZkServerError as err:
        pytest.skip(f"integration tests need a local ZooKeeper: {err}")
    with ZkServer(TEST_CONFIG) as server:
        request.config.stash[_SERVER] = server
        yield server
        del request.config.stash[_SERVER]


def _with_admin_client(server: ZkServer, action: Callable[[KazooClient], object]) -> None:
    """Run ``action`` with a short-lived client on the server's root (outside any chroot)."""
    client = KazooClient(hosts=server.connect_string, timeout=5.0)
    client.start(timeout=15.0)
    try:
        action(client)
    finally:
        client.stop()
        client.close()


@pytest.fixture
def zk_hosts(zk_server: ZkServer) -> Iterator[str]:
    """A connect string with a chroot no other test uses: ``127.0.0.1:PORT/t_<uuid hex>``.

    The chroot node exists before the test runs (kazoo does not create it, and every operation under a missing chroot
    fails with NoNode).  It is deleted afterwards, best effort, to keep the shared server small.
    """
    chroot = f"/t_{uuid.uuid4().hex}"
    _with_admin_client(zk_server, lambda client: client.ensure_path(chroot))
    yield zk_server.connect_string + chroot
    # Best effort only: a process the test started may still be writing under the chroot, and a failed clean-up must
    # not turn a passing test into an error.
    with contextlib.suppress(KazooException, KazooTimeoutError):
        _with_admin_client(zk_server, lambda client: client.delete(chroot, recursive=True))


@pytest.fixture
def zk_client(zk_hosts: str) -> Iterator[KazooClient]:
    """A connected ``KazooClient`` rooted at the test's chroot; stopped and closed at teardown."""
    client = KazooClient(hosts=zk_hosts, timeout=10.0)
    client.start(timeout=15.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture
def zk_factory() -> Iterator[ZkFactory]:
    """Servers and ensembles of the test's own (``zk_factory.server()``, ``zk_factory.ensemble(3)``), all closed at
    teardown even when the test fails, and their logs shown in its failure report."""
    factory = ZkFactory()
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    """Brokers in this process on the test's chroot (``cluster.broker(1)`` starts one), journalling under
    ``tmp_path / "journal"``; every broker, consumer and client it started is stopped after the test, last first."""
    with contextlib.ExitStack() as stack:
        yield Cluster(zk_hosts, tmp_path / "journal", stack)


# --- diagnostics --------------------------------------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Attach the tail of every ZooKeeper log a failed test used to its report (shown with its captured output)."""
    report = yield
    if not report.failed:
        return report
    uses_zk = item.get_closest_marker("integration") is not None or "zk_server" in getattr(item, "fixturenames", ())
    logs = []
    server = item.config.stash.get(_SERVER, None)
    if uses_zk and server is not None:
        logs.append(("shared zk_server", server.log_path))
    factory = getattr(item, "funcargs", {}).get("zk_factory")
    if isinstance(factory, ZkFactory):
        logs += factory.log_paths()
    for label, path in logs:
        report.sections.append((f"ZooKeeper log: {label} ({path}, last {LOG_TAIL_LINES} lines)", log_tail(path)))
    return report


# Property tests judge what is generated, not how fast: on a 2-core machine shared with ZooKeeper, JVMs and other
# tests, generating one input (or running one example) can take seconds, which Hypothesis would report as a failure
# (its too_slow health check, its 200 ms deadline).
settings.register_profile("zkcoord", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("zkcoord")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test``'s scheduler (:mod:`tests.scheduling`): the shared-session Spark tests on one worker, the rest
    wherever a worker is free.  Only with ``--dist loadgroup`` (the Makefile's): other ``--dist`` modes still work."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return SparkTogether(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest first, so that the workers finish together: the tests sharing one SparkSession (one unit of work,
    see :mod:`tests.scheduling`), then the other tests that start Spark (whole demos), then the slow ones, then the
    rest, each part in collection order."""
    for item in items:
        if item.get_closest_marker("spark") is not None and item.get_closest_marker("timeout") is None:
            # A module's shared analysis runs in its first test's setup; a timeout's signal in the middle of a py4j
            # call garbles the gateway for every later test of the session (seen on a machine loaded by other
            # work): give Spark's tests room rather than a cascade.
            item.add_marker(pytest.mark.timeout(600))

    def rank(item: pytest.Item) -> int:
        if scope_of(item.nodeid) == "spark":
            return 0
        if item.get_closest_marker("spark") is not None:
            return 1
        return 2 if item.get_closest_marker("slow") is not None else 3

    items.sort(key=rank)


def pytest_configure(config: pytest.Config) -> None:
    # A stream on the real stderr, opened before output capture resumes, so stack dumps reach the terminal even when
    # the test's own output is captured (or lost to a hard timeout).
    stream = os.fdopen(os.dup(2), "w", buffering=1)
    config.stash[_FAULT_STREAM] = stream
    if not faulthandler.is_enabled():
        faulthandler.enable(stream)
    faulthandler.register(signal.SIGUSR1, file=stream, all_threads=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    faulthandler.cancel_dump_traceback_later()
    faulthandler.unregister(signal.SIGUSR1)
    stream = config.stash.get(_FAULT_STREAM, None)
    if stream is not None:
        stream.close()


def _timeout_of(item: pytest.Item) -> float:
    """The pytest-timeout deadline of ``item`` in seconds (0: none)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    # --timeout on the command line wins over the ini value; pytest raises ValueError for an unknown ini key (no
    # pytest-timeout installed).
    with contextlib.suppress(ValueError, TypeError):
        option = item.config.getoption("timeout", None)
        return float(option if option is not None else item.config.getini("timeout") or 0)
    return 0.0


@pytest.fixture(autouse=True)
def _dump_stacks_before_timeout(request: pytest.FixtureRequest) -> Iterator[None]:
    """Arm faulthandler to dump every thread's stack at 90 % of the test's timeout: if pytest-timeout then fails to
    interrupt a thread stuck in C code, the dump still says where everything was."""
    timeout = _timeout_of(request.node)
    stream = request.config.stash.get(_FAULT_STREAM, None)
    if timeout > 0 and stream is not None:
        faulthandler.dump_traceback_later(timeout * 0.9, exit=False, file=stream)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
