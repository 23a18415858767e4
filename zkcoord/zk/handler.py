"""kazoo's threading handler with a cheaper ``select``, and closing a client without waiting for a server that is gone.

kazoo's connection loop calls its handler's ``select`` on every turn (each request sent, each reply read), and the
stock handler builds a fresh :class:`selectors.DefaultSelector` -- on Linux an epoll instance: ``epoll_create``,
one ``epoll_ctl`` per descriptor, ``close`` -- for every call.  In a process hosting many sessions (a benchmark
worker with 25 consumers, a broker) that bookkeeping was half of the process's CPU time (py-spy, 50 consumers over
500 partitions: ``selector_select`` 49 % of active samples).  ``poll()`` needs no kernel object: registering is a
dictionary insert and the wait is one system call, and unlike ``select()`` it has no limit on descriptor numbers.

Part of the ZooKeeper boundary (:mod:`zkcoord.zk`), the only package of the product that imports kazoo.

Same contract as kazoo's :class:`~kazoo.handlers.threading.SequentialThreadingHandler`, which this only narrows;
the ``selectors_module`` hook it uses is kazoo's own (``kazoo.handlers.utils.selector_select``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import selectors
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, WriterNotClosedException
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import selector_select
from kazoo.protocol.serialization import Connect

log = logging.getLogger(__name__)

#: ``wait(async_result, path, timeout) -> value``: how :class:`zkcoord.zk.ZkClient` waits for a reply (at most
#: ``timeout`` s when not None, and never past its stop deadline).
Waiter = Callable[[Any, str | None, float | None], Any]


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


def close_kazoo(client: KazooClient, timeout: float | None) -> bool:
    """Stop and close ``client``; return whether ZooKeeper acknowledged the close of its session.

    kazoo's ``stop()`` returns once its connection thread has ended: at once after the server answers the close
    request, but with the server gone after the connection retry's current sleep (up to about 1.4 s here), and with
    it paused after the current connection attempt or ping times out (up to the session timeout).  Before that it
    joins its callback threads, one of which may be waiting for a reply as long.  With ``timeout``, the stop runs on
    a daemon thread and is abandoned after ``timeout`` seconds: it finishes on its own, and kazoo's exit hook (which
    would join the same threads again when the interpreter exits) is removed.

    Acknowledged means: connected when asked, and closed without the connection dropping first (a close answered by
    the server goes from connected straight to lost; any other way passes through suspended).
    """
    was_connected = client.state == KazooState.CONNECTED
    dropped = threading.Event()

    def on_state(state: str) -> bool:  # kazoo's connection thread: record only
        if state == KazooState.SUSPENDED:
            dropped.set()
        return False

    client.add_listener(on_state)
    done = threading.Event()

    def close() -> None:
        try:
            client.stop()
        except WriterNotClosedException as e:
            log.info("kazoo connection thread still running after stop: %s", e)
            return  # kazoo refuses close() until it has stopped
        except KazooException as e:
            log.info("stopping the ZooKeeper client: %s", e)
        finally:
            done.set()
        with contextlib.suppress(KazooException):
            client.close()

    if timeout is None:
        close()
    else:
        threading.Thread(target=close, name="zk-close", daemon=True).start()
        if not done.wait(max(0.0, timeout)):
            atexit.unregister(client.handler.stop)
            return False
    return was_connected and not dropped.is_set()
