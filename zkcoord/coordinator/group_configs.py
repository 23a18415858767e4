"""The groups' dynamic configs (``/config/groups/<g>``, :mod:`zkcoord.layout.group_config`) as the coordinator
follows them during a term.

The rule: **a group is planned with its config as last read; a change of the config is read afresh, journalled
(``group.config.changed``) and makes the group be examined again**, where the necessity check decides: a rebalance
follows only if the new config changes the target assignment (an ``assignor`` that assigns otherwise, a ``max.size``
that now leaves out a member holding partitions, or lets a waiting one in).  ``rebalance.timeout.ms`` alone starts
none: it applies from the group's next rebalance.  An attempt under way keeps the config it was planned with.

Watches: a one-shot children watch on ``/config/groups`` (a config created or deleted) and a one-shot data watch on
each config read (changed, deleted); a watch reset by a connection loss is handled as a change (read again).
``/config/groups`` is created at takeover if missing (a fenced write), so that it can be watched: configs may be set
before their group exists, and outlive it (seed 000).

A config that cannot be decoded (S7) is journalled once per write of it (``input.rejected``, by its ``mzxid``) and
the group uses the coordinator's defaults until it is readable again -- never a crash, never a guess.

Threads: the watch callbacks (:meth:`Watchers.new_watch <zkcoord.coordinator.watchers.Watchers.new_watch>`) only
enqueue; every method here runs on the coordinator's worker thread, which does every ZooKeeper call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from zkcoord.coordinator.rebalancer import Rebalancer
from zkcoord.errors import CodecError
from zkcoord.layout import paths
from zkcoord.layout.group_config import GroupConfig
from zkcoord.runtime.journal import Journal
from zkcoord.zk import Stat, WatchEvent, ZkClient

#: what a group without a (readable) config gets: every key unset, the coordinator's own settings
DEFAULT = GroupConfig()


class ConfigHost(Protocol):
    """What the configs need of the coordinator (satisfied by :class:`~zkcoord.coordinator.core.Coordinator`)."""

    @property
    def zk(self) -> ZkClient: ...

    @property
    def journal(self) -> Journal: ...

    @property
    def rebalancer(self) -> Rebalancer | None: ...

    def request(self, group: str, trigger: str) -> None:
        """Queue an examination of ``group`` (worker thread)."""


class GroupConfigs:
    """The term's view of ``/config/groups``; :meth:`reset` forgets it when the term ends."""

    def __init__(
        self,
        host: ConfigHost,
        new_watch: Callable[[str], Callable[[WatchEvent], None]],
        groups: Callable[[], set[str]],
    ) -> None:
        self._host = host
        self._new_watch = new_watch
        #: the groups the term knows (a config of another group is kept, and used once the group appears)
        self._groups = groups
        #: readable configs that set something, by group (any other group: :data:`DEFAULT`)
        self._configs: dict[str, GroupConfig] = {}
        #: unreadable configs, by group: the ``mzxid`` of the write journalled (each bad write is journalled once)
        self._bad: dict[str, int] = {}
        #: the children of ``/config/groups`` as last listed
        self._listed: set[str] = set()
        self._relist = False
        #: groups whose config's data watch fired: to read again
        self._reread: set[str] = set()
        self._list_watch: Callable[[WatchEvent], None] | None = None
        self._data_watch: Callable[[WatchEvent], None] | None = None

    def get(self, group: str) -> GroupConfig:
        """``group``'s config as last read (:data:`DEFAULT` if none, or unreadable)."""
        return self._configs.get(group, DEFAULT)

    # --- term (worker) ------------------------------------------------------------------------------------------

    def begin_term(self) -> None:
        """A term begins (the term number already advanced): this term's watches."""
        self._list_watch = self._new_watch("configs")
        self._data_watch = self._new_watch("config")

    def reset(self) -> None:
        """The term ended: forget everything (its watches end: their events are of an ended term)."""
        self._configs.clear()
        self._bad.clear()
        self._listed.clear()
        self._relist = False
        self._reread.clear()
        self._list_watch = self._data_watch = None

    def load(self) -> None:
        """At takeover, before any group is examined: list and read every config, watched.  Nothing is announced
        (every group is examined at takeover anyway); an unreadable config is journalled.

        :raises ZkError, FencedError: the caller's step fails (the takeover is retried as any other).
        """
        self._list(announce=False)
        self._read(announce=False)

    # --- watches fired (worker: queued events) ----------------------------------------------------------------------

    def on_listing_watch(self) -> None:
        """The children watch on ``/config/groups`` fired (or was reset): list it again at the next refresh."""
        self._relist = True

    def on_config_watch(self, path: str) -> None:
        """A config's data watch fired (or was reset): read it again at the next refresh."""
        group = paths.group_of_config(path)
        if group is not None:
            self._reread.add(group)

    def refresh(self) -> None:
        """List and read again what the watches said changed (one burst each).  A failure leaves it to do at the
        next turn of the worker.  :raises ZkError, FencedError:"""
        if self._relist:
            self._list(announce=True)
        if self._reread:
            self._read(announce=True)

    # --- reading ----------------------------------------------------------------------------------------------------

    def _list(self, *, announce: bool) -> None:
        watch = self._list_watch
        if watch is None:  # not coordinating
            return
        zk = self._host.zk
        got = zk.children_stat_many([paths.CONFIG_GROUPS], watch=watch)[0]
        rebalancer = self._host.rebalancer
        if got is None and rebalancer is not None:
            # Created (a fenced write, as every write of a term) so that a config set later is seen.
            rebalancer.writer.fence.ensure(paths.CONFIG_GROUPS)
            got = zk.children_stat_many([paths.CONFIG_GROUPS], watch=watch)[0]
        self._relist = False
        names = set(got[0]) if got is not None else set()
        gone, self._reread = self._listed - names, self._reread | (names - self._listed)
        self._listed = names
        for group in sorted(gone):
            self._apply(group, None, announce=announce)

    def _read(self, *, announce: bool) -> None:
        groups = sorted(self._reread)
        if not groups or self._data_watch is None:
            return
        reads = self._host.zk.get_many([paths.group_config(g) for g in groups], watch=self._data_watch)
        for group, got in zip(groups, reads, strict=True):
            self._reread.discard(group)
            self._apply(group, got, announce=announce)

    def _apply(self, group: str, got: tuple[bytes, Stat] | None, *, announce: bool) -> None:
        """``group``'s config as just read (``None``: absent): keep it; journal and examine the group if it
        changed (``announce``)."""
        old = self.get(group)
        new = DEFAULT
        if got is None:
            self._bad.pop(group, None)
        else:
            path = paths.group_config(group)
            try:
                new = GroupConfig.decode(got[0], path)
                self._bad.pop(group, None)
            except CodecError as e:
                if self._bad.get(group) != got[1].mzxid:  # a reset watch reads the same write again: said once
                    self._bad[group] = got[1].mzxid
                    reason = f"{e.reason}; the coordinator's defaults apply until it is fixed"
                    self._host.journal.emit("input.rejected", what="group config", path=path, reason=reason)
        if new.empty:
            self._configs.pop(group, None)
        else:
            self._configs[group] = new
        if new == old or not announce:
            return
        self._host.journal.emit("group.config.changed", group=group, config=new.to_mapping(), previous=old.to_mapping())
        if group in self._groups():
            self._host.request(group, "group config changed")
