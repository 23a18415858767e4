"""What a long-running process does when ZooKeeper refuses it an operation (``--zk-auth``; docs/security.md,
"Refused while running").

A refusal (:class:`~zkcoord.errors.AccessRefusedError`, kazoo's ``NoAuthError``) is not retriable: the znode's ACL
does not grant the operation to this identity, and asking again with the same identity is refused again.  So it is
never retried in a loop: :class:`Refusals`, registered as the process's ZooKeeper client's refusal listener, journals
``zk.refused`` once per znode and operation, and judges what follows:

* ``stop``: the identity cannot do its role's work (a consumer refused anything; a broker refused a znode of the
  cluster: its registration, the election's, a shared parent).  ``on_stop`` is called once, and the process stops
  by itself through its ordinary bounded stop, exiting :data:`~zkcoord.runtime.shutdown.EXIT_REFUSED`;
* ``group``: a broker's coordinator refused a znode of one group (an operator locked it, or a member created it
  with an ACL of its own before the group's first rebalance): only that group's rebalance fails; the broker and
  every other group go on (stopping the broker would not help: every broker holds the same identity, and one group
  could then stop them all).

Thread: the listener runs on whichever thread was refused; it only journals and calls ``on_stop`` (which must not
block either).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from zkcoord.errors import AccessRefusedError
from zkcoord.runtime.journal import Journal

log = logging.getLogger(__name__)

#: the process stops (exit 4)
STOP = "stop"
#: one group's rebalance fails; the process goes on
GROUP = "group"


def describe(error: AccessRefusedError) -> str:
    """One line naming what was refused to whom (never a password)."""
    who = f"the {error.role} identity {error.user!r}" if error.user else "this session (no credentials)"
    return f"ZooKeeper refused {error.op or 'an operation'} on {error.path or '?'} to {who}"


class Refusals:
    """The refusal listener of one process.  ``judge(error)`` says :data:`STOP` or :data:`GROUP`; ``who``: the
    process's identity fields of the journal event (``broker``, or ``group`` and ``consumer``)."""

    def __init__(
        self,
        journal: Journal,
        on_stop: Callable[[AccessRefusedError], None],
        judge: Callable[[AccessRefusedError], str] = lambda _e: STOP,
        **who: object,
    ) -> None:
        self._journal = journal
        self._on_stop = on_stop
        self._judge = judge
        self._who = who
        self._lock = threading.Lock()
        self._seen: set[tuple[str | None, str | None]] = set()
        #: the first refusal that stops the process (None: none yet)
        self.fatal: AccessRefusedError | None = None

    def __call__(self, error: AccessRefusedError) -> None:
        action = self._judge(error)
        with self._lock:
            first = (error.path, error.op) not in self._seen
            self._seen.add((error.path, error.op))
            stop = action == STOP and self.fatal is None
            if stop:
                self.fatal = error
        if first:
            self._journal.emit(
                "zk.refused",
                path=error.path,
                op=error.op,
                acl_role=error.role,
                user=error.user,
                action=action,
                **self._who,
            )
            log.error("%s (%s)", describe(error), "stopping" if action == STOP else "the group's rebalance fails")
        if stop:
            self._on_stop(error)
