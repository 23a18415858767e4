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
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import RetryFailedError

from zkcoord import errors
from zkcoord.zk.handler import Waiter

_UNAVAILABLE = (kz.ConnectionLoss, kz.OperationTimeoutError, kz.ConnectionClosedError, KazooTimeoutError)


@contextlib.contextmanager
def translate(path: str | None = None) -> Iterator[None]:
    """Run the body and turn any kazoo exception into the project's typed error, chained to the original."""
    try:
        yield
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
    except kz.NoAuthError as e:
        raise errors.AccessRefusedError(
            f"ZooKeeper refused access to {path or '?'}: its ACL does not grant it to this identity "
            "(--zk-auth; docs/security.md)",
            path,
        ) from e
    except _UNAVAILABLE as e:
        raise errors.ZkUnavailableError(f"ZooKeeper unavailable ({type(e).__name__})", path) from e
    except RetryFailedError as e:
        raise errors.ZkUnavailableError("ZooKeeper unavailable (retries exhausted)", path) from e
    except (kz.ZookeeperError, kz.KazooException) as e:
        raise errors.ZkError(f"ZooKeeper error on {path or '?'}: {type(e).__name__} {e}", path) from e


def _raise_op_error(result: BaseException, path: str | None) -> None:
    """Re-raise a per-op transaction failure (kazoo returns them instead of raising) as a typed error."""
    with translate(path):
        raise result


class Transaction:
    """A ZooKeeper multi: all operations commit atomically or none does.

    Built by :meth:`ZkClient.transaction`.  Not thread-safe.  :meth:`commit` raises instead of returning a list of
    exceptions (kazoo's style): a failing ``check`` raises :class:`~zkcoord.errors.BadVersionError` (or
    :class:`~zkcoord.errors.NoNodeError`) naming the checked path, which fencing code turns into
    :class:`~zkcoord.errors.FencedError`.
    """

    def __init__(self, client: KazooClient, wait: Waiter, acl: Callable[[str], list[Any] | None] | None = None) -> None:
        self._txn = client.transaction()
        self._wait = wait
        self._acl = acl
        self._paths: list[str] = []

    def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False, sequence: bool = False) -> None:
        acl = None if self._acl is None else self._acl(path)
        self._txn.create(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence)
        self._paths.append(path)

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self._txn.set_data(path, value, version)
        self._paths.append(path)

    def delete(self, path: str, version: int = -1) -> None:
        self._txn.delete(path, version)
        self._paths.append(path)

    def check(self, path: str, version: int) -> None:
        self._txn.check(path, version)
        self._paths.append(path)

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
        with translate(path):
            results: list[Any] = self._wait(pending, path, timeout)
        for path, result in zip(self._paths, results, strict=True):
            # Ops before the failing one report RolledBackError, ops after it RuntimeInconsistency: the first
            # error that is neither names the op that failed.
            if isinstance(result, Exception) and not isinstance(result, kz.RolledBackError | kz.RuntimeInconsistency):
                _raise_op_error(result, path)
        return results
