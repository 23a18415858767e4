"""How a long-running command stops: ``--shutdown-timeout``, the signals, the watchdog and the exit status.

The first SIGTERM or SIGINT starts the stop's budget (:class:`~zkcoord.runtime.shutdown.StopBudget`, measured from the
signal) and sets :attr:`SignalStop.requested`; the command then stops its broker or consumer within that budget and
calls :meth:`SignalStop.finish`, which prints the one line saying what was skipped (if anything) and returns the
exit status: :data:`~zkcoord.runtime.shutdown.EXIT_CLEAN` (0) or :data:`~zkcoord.runtime.shutdown.EXIT_INCOMPLETE` (3).

Two guarantees do not depend on the stopping code keeping its budget:

* a second SIGTERM or SIGINT exits at once, with ``128 + signal`` (130 for SIGINT, 143 for SIGTERM);
* a watchdog thread ends the process at the budget's deadline with status 3, after one line on stderr and a
  ``shutdown.incomplete`` event (``skipped: [unfinished]``, ``forced: true``), should the stop overrun it; and,
  should the interpreter's own exit hang after :meth:`~SignalStop.finish`, at the deadline plus
  :data:`~zkcoord.runtime.shutdown.EXIT_GRACE_S` with the status decided.  So the process is gone at most
  :func:`~zkcoord.runtime.shutdown.hard_bound` after the first signal (or :meth:`~SignalStop.begin`), whatever happens.

Any program may use it (``zkcoord consume``, ``zkcoord broker``, the benchmark worker): nothing here needs click's
context except the option.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from zkcoord.runtime.journal import Journal
from zkcoord.runtime.shutdown import (
    EXIT_CLEAN,
    EXIT_GRACE_S,
    EXIT_INCOMPLETE,
    EXIT_SIGNAL_BASE,
    MAX_TIMEOUT_S,
    MIN_TIMEOUT_S,
    UNFINISHED,
    StopBudget,
    StopReport,
)

F = TypeVar("F", bound=Callable[..., Any])


def shutdown_timeout_option(default: float) -> Callable[[F], F]:
    """``--shutdown-timeout SECONDS``: how long a stop may take, whatever ZooKeeper does."""
    return click.option(
        "--shutdown-timeout",
        type=click.FloatRange(MIN_TIMEOUT_S, MAX_TIMEOUT_S),
        default=default,
        show_default=True,
        help="Seconds a stop (SIGTERM/SIGINT) may take, whatever ZooKeeper does; exit 3 if it had to skip steps "
        "(docs/consumer.md, 'Stopping').",
    )


class SignalStop:
    """The signal handling of one long-running command.  Create it before anything connects; call :meth:`attach`
    once the journal is open, :meth:`finish` once stopped.  The handlers run on the main thread; the watchdog on a
    daemon thread of its own."""

    def __init__(self, name: str, timeout_s: float) -> None:
        self.name = name
        self.timeout_s = timeout_s
        #: set by the first SIGTERM or SIGINT
        self.requested = threading.Event()
        self.budget: StopBudget | None = None
        self._stopping = threading.Event()
        self._journal: Journal | None = None
        self._who: dict[str, object] = {}
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._code = EXIT_INCOMPLETE
        #: set by :meth:`fail`: the one ``Error:`` line and the exit status of a stop the process asked for itself
        self.failure: tuple[str, int] | None = None
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        threading.Thread(target=self._watch, name="stop-watchdog", daemon=True).start()

    def attach(self, journal: Journal, **who: object) -> None:
        """Where the watchdog journals a forced stop, and the process's identity fields."""
        self._journal = journal
        self._who = dict(who)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.requested.is_set():
            # A second signal: the operator will not wait.  os.write and os._exit only (no locks: this handler may
            # have interrupted a thread holding any of them).
            os.write(2, f"{self.name}: second signal, exiting now\n".encode())
            os._exit(EXIT_SIGNAL_BASE + signum)
        self._start()
        self.requested.set()

    def fail(self, message: str, code: int) -> None:
        """Stop the command by itself, as a first signal would (any thread: it only sets flags); :meth:`finish` then
        prints ``Error: message`` and returns ``code``.  The first failure wins; a signal after it exits at once."""
        with self._lock:
            if self.failure is None:
                self.failure = (message, code)
        self.requested.set()

    def _start(self) -> StopBudget:
        if self.budget is None:
            self.budget = StopBudget.start(self.timeout_s)
        self._stopping.set()
        return self.budget

    def begin(self) -> StopBudget:
        """The stop's budget (started by the signal, or now: a command that ends by itself, as ``consume
        --max-records``, stops within the same timeout); says on stderr that the stop began.  Main thread."""
        budget = self._start()
        click.echo(f"{self.name}: stopping (within {self.timeout_s:g} s; a second signal exits at once)", err=True)
        return budget

    def finish(self, report: StopReport) -> int:
        """Say what the stop skipped (one line on stderr; the event was journalled by whoever stopped), and why the
        process stopped itself if it did (:meth:`fail`: one ``Error:`` line, and its status), and return the
        exit status, which the watchdog uses should the process still be here at the deadline plus
        :data:`~zkcoord.runtime.shutdown.EXIT_GRACE_S`."""
        with self._lock:
            failure = self.failure
            self._code = report.exit_code if failure is None else failure[1]
            self._finished.set()
        if failure is not None:
            click.echo(f"Error: {self.name}: {failure[0]}", err=True)
        if not report.complete:
            click.echo(f"Warning: {self.name}: {report.summary(self.timeout_s)}", err=True)
        return self._code

    def exit(self, code: int) -> NoReturn:
        """End the command with ``code``.  After an incomplete stop, at once (streams flushed, the journal closed by
        the caller): the interpreter's own teardown (a few hundred ms, with threads abandoned to a server that is
        gone) would eat into, or past, the deadline.  Outside a click command, a clean exit is ``sys.exit``."""
        if code == EXIT_CLEAN:
            context = click.get_current_context(silent=True)
            if context is None:
                sys.exit(code)
            context.exit(code)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def _watch(self) -> None:
        self._stopping.wait()
        budget = self.budget
        if budget is None:
            return
        if not self._finished.wait(budget.deadline.remaining()):
            with self._lock:
                if not self._finished.is_set():
                    self._force(budget)
        # Finished in time, so the process is exiting: if it is still here at the deadline plus the grace (an exit
        # hook hung), it ends with the status it decided on.  The grace is counted from the deadline, not from
        # finish(): the bound is the documented one however late in the budget the stop finished.
        time.sleep(budget.deadline.remaining() + EXIT_GRACE_S)
        os._exit(self._code)

    def _force(self, budget: StopBudget) -> None:
        """The stop overran its deadline: say so, journal it, and end the process (watchdog thread)."""
        report = StopReport()
        report.skip(UNFINISHED, f"still stopping after {budget.timeout_s:g} s")
        sys.stderr.write(f"Warning: {self.name}: {report.summary(budget.timeout_s)}\n")
        sys.stderr.flush()
        if self._journal is not None:
            report.journal(self._journal, budget, forced=True, **self._who)
            self._journal.close()
        os._exit(EXIT_INCOMPLETE)
