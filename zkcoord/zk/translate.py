"""Kazoo's exceptions translated into the project's (:mod:`zkcoord.errors`), and the transaction that raises them.

Part of the ZooKeeper boundary (:mod:`zkcoord.zk`); may import kazoo, :mod:`zkcoord.errors` and
:mod:`zkcoord.zk.handler`, nothing above.

Everything above the boundary talks to :class:`~zkcoord.zk.client.ZkClient` and catches the project's own errors
(:mod:`zkcoord.errors`).  The translation is done in a single context manager, :func:`translate`, so every
operation maps failures the same way:

=================================================  ===========================================
kazoo                                              zkcoord
=================================================  ===========================================
``NoNodeError``                                    :class:`~zkcoord.errors.NoNodeError`
``NodeExistsError``                                :class:`~zkcoord.errors.NodeExistsError`
``BadVersionError``                                :class:`~zkcoord.errors.BadVersionError`
``NotEmptyError``                                  :class:`~zkcoord.errors.NotEmptyError`
``SessionExpiredError``                            :class:`~zkcoord.errors.ZkSessionExpiredError`
``NoAuthError``                                    :class:`~zkcoord.errors.AccessRefusedError`
``ConnectionLoss``, timeouts, closed connection    :class:`~zkcoord.errors.ZkUnavailableError` (retriable)
any other kazoo error                              :class:`~zkcoord.errors.ZkError`
=================================================  ===========================================

A refusal is also *reported*: :func:`translate` and :class:`Transaction` call the ``refused`` callback their client
gives them with every :class:`~zkcoord.errors.AccessRefusedError` they raise or pass through, before it propagates,
so a long-running process learns of each one whatever the code above it does with the exception
(:meth:`~zkcoord.zk.client.ZkClient.add_refusal_listener`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import RetryFailedError

from zkcoord import errors
from zkcoord.zk.handler import Waiter

log = logging.getLogger(__name__)

_UNAVAILABLE = (kz.ConnectionLoss, kz.OperationTimeoutError, kz.ConnectionClosedError, KazooTimeoutError)

#: told of a refusal before it is raised (the calling thread: it must not block nor call ZooKeeper)
Refused = Callable[[errors.AccessRefusedError], None]


@contextlib.contextmanager
def translate(path: str | None = None, refused: Refused | None = None, op: str | None = None) -> Iterator[None]:
    """Run the body and turn any kazoo exception into the project's typed error, chained to the original.  A refusal
    (``op`` on ``path``), or one raised already inside the body, is given to ``refused`` first."""
    try:
        yield
    except errors.AccessRefusedError as e:  # (a burst's, a transaction's, or a member's create the rules forbid)
        if refused is not None:
            refused(e)
        raise
    except kz.NoAuthError as e:
        error = errors.AccessRefusedError(
            f"ZooKeeper refused access to {path or '?'}: its ACL does not grant {op or 'it'} to this identity "
            "(--zk-auth; docs/security.md)",
            path,
            op,
        )
        if refused is not None:
            refused(error)
        raise error from e
    except kz.NoNodeError as e:
        raise errors.NoNodeError(f"znode {path or '?'} does not exist", path) from e
    except kz.NodeExistsError as e:
        raise errors.NodeExistsError(f"znode {path or '?'} already exists", path) from e
    except kz.BadVersionError as e:
        raise errors.BadVersionError(f"znode {path or '?'} changed concurrently (version mismatch)", path) from e
    except kz.NotEmptyError as e:
        raise errors.NotEmptyError(f"znode {path or '?'} has children", path) from e
    except kz.SessionExpiredError as e:
        raise errors.ZkSessionExpiredError("ZooKeeper session expired", path) from e
    except _UNAVAILABLE as e:
        raise errors.ZkUnavailableError(f"ZooKeeper unavailable ({type(e).__name__})", path) from e
    except RetryFailedError as e:
        raise errors.ZkUnavailableError("ZooKeeper unavailable (retries exhausted)", path) from e
    except (kz.ZookeeperError, kz.KazooException) as e:
        raise errors.ZkError(f"ZooKeeper error on {path or '?'}: {type(e).__name__} {e}", path) from e


class RefusalReporter:
    """The ``refused`` callback of one client: tells each listener of each refusal once, naming the session's role
    and credential's user on the error (never the password).  Listeners run on the thread that was refused: they must
    not block nor call ZooKeeper.  A listener's own failure is logged, never raised in the refusal's place."""

    def __init__(self, name: str, role: Callable[[], str | None], user: str | None) -> None:
        self._name = name
        self._role = role
        self._user = user
        self._listeners: list[Refused] = []

    def add(self, listener: Refused) -> None:
        self._listeners.append(listener)

    def __call__(self, error: errors.AccessRefusedError) -> None:
        if error.reported:
            return
        error.reported = True
        error.role, error.user = self._role(), self._user
        for listener in list(self._listeners):
            try:
                listener(error)
            except Exception:
                log.exception("%s: refusal listener %r failed", self._name, listener)


def _raise_op_error(result: BaseException, path: str | None, op: str, refused: Refused | None) -> None:
    """Re-raise a per-op transaction failure (kazoo returns them instead of raising) as a typed error."""
    with translate(path, refused, op):
        raise result


class Transaction:
    """A ZooKeeper multi: all operations commit atomically or none does.

    Built by :meth:`ZkClient.transaction`.  Not thread-safe.  :meth:`commit` raises instead of returning a list of
    exceptions (kazoo's style): a failing ``check`` raises :class:`~zkcoord.errors.BadVersionError` (or
    :class:`~zkcoord.errors.NoNodeError`) naming the checked path, which fencing code turns into
    :class:`~zkcoord.errors.FencedError`.
    """

    def __init__(
        self,
        client: KazooClient,
        wait: Waiter,
        acl: Callable[[str], list[Any] | None] | None = None,
        refused: Refused | None = None,
    ) -> None:
        self._txn = client.transaction()
        self._wait = wait
        self._acl = acl
        self._refused = refused
        self._paths: list[str] = []
        self._ops: list[str] = []

    def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False, sequence: bool = False) -> None:
        acl = None if self._acl is None else self._acl(path)
        self._txn.create(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence)
        self._paths.append(path)
        self._ops.append("create")

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self._txn.set_data(path, value, version)
        self._paths.append(path)
        self._ops.append("set")

    def delete(self, path: str, version: int = -1) -> None:
        self._txn.delete(path, version)
        self._paths.append(path)
        self._ops.append("delete")

    def check(self, path: str, version: int) -> None:
        self._txn.check(path, version)
        self._paths.append(path)
        self._ops.append("check")

    def __len__(self) -> int:
        return len(self._paths)

    def commit(self, timeout: float | None = None) -> list[Any]:
        """Commit; return kazoo's per-op results (created paths, stats, ``True``).  Waits for the reply at most
        ``timeout`` seconds (default: as any call, until it comes), and never past the client's :meth:`ZkClient.bound`
        deadline.

        :raises ZkError: subclass for the first failing operation; :class:`ZkUnavailableError` if the outcome is
            unknown because the connection was lost or no reply came in time (the caller must find out whether it
            landed before retrying).
        """
        return self.commit_end(self.commit_begin(), timeout)

    def commit_begin(self) -> Any:
        """Send the transaction without waiting (for pipelining); finish with :meth:`commit_end`."""
        with translate(self._paths[0] if self._paths else None):
            return self._txn.commit_async()

    def commit_end(self, pending: Any, timeout: float | None = None) -> list[Any]:
        """Wait for a transaction sent by :meth:`commit_begin`; same results and errors as :meth:`commit`."""
        path = self._paths[0] if self._paths else None
        with translate(path, self._refused, "multi"):
            results: list[Any] = self._wait(pending, path, timeout)
        for path, op, result in zip(self._paths, self._ops, results, strict=True):
            # Ops before the failing one report RolledBackError, ops after it RuntimeInconsistency: the first
            # error that is neither names the op that failed.
            if isinstance(result, Exception) and not isinstance(result, kz.RolledBackError | kz.RuntimeInconsistency):
                _raise_op_error(result, path, op, self._refused)
        return results
