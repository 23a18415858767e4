"""kazoo's threading handler with a cheaper ``select``.

kazoo's connection loop calls its handler's ``select`` on every turn (each request sent, each reply read), and the
stock handler builds a fresh :class:`selectors.DefaultSelector` -- on Linux an epoll instance: ``epoll_create``,
one ``epoll_ctl`` per descriptor, ``close`` -- for every call.  In a process hosting many sessions (a benchmark
worker with 25 consumers, a broker) that bookkeeping was half of the process's CPU time (py-spy, 50 consumers over
500 partitions: ``selector_select`` 49 % of active samples).  ``poll()`` needs no kernel object: registering is a
dictionary insert and the wait is one system call, and unlike ``select()`` it has no limit on descriptor numbers.

Same contract as kazoo's :class:`~kazoo.handlers.threading.SequentialThreadingHandler`, which this only narrows;
the ``selectors_module`` hook it uses is kazoo's own (``kazoo.handlers.utils.selector_select``).
"""

from __future__ import annotations

import selectors
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import selector_select
from kazoo.protocol.serialization import Connect


class _PollSelectors:
    """The parts of :mod:`selectors` that ``selector_select`` uses, with poll() as the default selector."""

    EVENT_READ = selectors.EVENT_READ
    EVENT_WRITE = selectors.EVENT_WRITE
    DefaultSelector = selectors.PollSelector


class PollThreadingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler whose ``select`` waits with poll() (see the module docstring)."""

    def select(self, *args: Any, **kwargs: Any) -> Any:
        return selector_select(*args, selectors_module=_PollSelectors, **kwargs)


def on_negotiated_timeout(client: KazooClient, record: Callable[[float], None]) -> None:
    """Call ``record(seconds)`` with the session timeout the server grants, each time a session is (re)connected,
    before kazoo reports the connection to its listeners.

    The server clamps the requested timeout to its ``[minSessionTimeout, maxSessionTimeout]``; kazoo only logs the
    value it was granted.  This wraps the client's connection handler's request method (kazoo's own, as the
    handler above uses kazoo's ``selectors_module`` hook) to see the reply to the ``Connect`` request.
    """
    connection = client._connection
    invoke = connection._invoke

    def invoke_and_record(timeout: float, request: Any, xid: int | None = None) -> Any:
        result = invoke(timeout, request, xid)
        if isinstance(request, Connect) and result[0].time_out > 0:
            record(result[0].time_out / 1000.0)
        return result

    connection._invoke = invoke_and_record
