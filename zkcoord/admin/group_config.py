"""Reading and changing a group's dynamic config, ``/config/groups/<g>`` (:mod:`zkcoord.layout.group_config`), for
``zkcoord group config get|set|delete``.

Contract:

- Every change is a read, then a write conditional on the version read (a create for a config that does not exist,
  a delete when no key is left), repeated from the read when another writer got there first: two operators setting
  different keys at once both get theirs, and no write is ever based on a config that is no longer there.
- The new config is validated before anything is written (:class:`~zkcoord.layout.group_config.GroupConfig`); a
  stored config that cannot be decoded is never merged into: ``set`` and a ``delete`` of some keys refuse it
  (:class:`UnreadableConfigError`), a ``delete`` of the whole config removes it, whatever it holds.
- The znode is written by operators only; the coordinator reads it (``docs/zookeeper-layout.md``).

Runs on the caller's thread; every call blocks on ZooKeeper.  :raises ZkError: (typed) when ZooKeeper fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zkcoord.errors import BadVersionError, CodecError, NodeExistsError, NoNodeError, ZkCoordError
from zkcoord.layout import paths
from zkcoord.layout.group_config import GroupConfig, check_keys
from zkcoord.layout.names import validate_group
from zkcoord.zk import ZkClient

#: How many times a change is read and written again when other writers keep changing the config in between.
MAX_ATTEMPTS = 20


class UnreadableConfigError(ZkCoordError):
    """The stored config cannot be decoded: nothing can be merged into it."""

    def __init__(self, group: str, error: CodecError) -> None:
        self.group = group
        super().__init__(f"{error} (nothing changed; remove it with: zkcoord group config delete {group})")


class ConcurrentChangeError(ZkCoordError):
    """Other writers changed the config at every one of :data:`MAX_ATTEMPTS` attempts."""

    retriable = True


@dataclass(frozen=True, slots=True)
class StoredConfig:
    """``/config/groups/<g>`` as read: ``config`` None when absent or unreadable (``problem`` says why);
    ``version`` the znode's version (-1: absent)."""

    group: str
    config: GroupConfig | None
    version: int
    problem: CodecError | None = None

    @property
    def effective(self) -> GroupConfig:
        """What the coordinator applies: the config, or nothing set (absent or unreadable: its own settings)."""
        return self.config or GroupConfig()


def read_config(zk: ZkClient, group: str) -> StoredConfig:
    """``group``'s config.  :raises InvalidNameError: a bad group name."""
    path = paths.group_config(validate_group(group))
    try:
        data, stat = zk.get(path)
    except NoNodeError:
        return StoredConfig(group, None, -1)
    try:
        return StoredConfig(group, GroupConfig.decode(data, path), stat.version)
    except CodecError as e:
        return StoredConfig(group, None, stat.version, e)


def set_config(zk: ZkClient, group: str, changes: GroupConfig) -> GroupConfig:
    """Set every key ``changes`` sets (the others keep their values); return the config stored.

    :raises UnreadableConfigError: the stored config cannot be decoded (nothing written).
    :raises ConcurrentChangeError: other writers won every attempt (nothing written).
    """
    path = paths.group_config(validate_group(group))
    for _ in range(MAX_ATTEMPTS):
        stored = read_config(zk, group)
        if stored.problem is not None:
            raise UnreadableConfigError(group, stored.problem)
        new = stored.effective.updated(changes)
        if stored.version >= 0 and new == stored.config:
            return new  # already so: nothing to write
        try:
            if stored.version < 0:
                zk.create(path, new.encode(), makepath=True)
            else:
                zk.set(path, new.encode(), version=stored.version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # another writer got there first: read again and merge into what it wrote
        return new
    raise ConcurrentChangeError(f"the config of group {group!r} kept changing while it was written; try again")


def delete_config(zk: ZkClient, group: str, keys: Sequence[str] = ()) -> tuple[bool, GroupConfig]:
    """Unset ``keys`` (none: delete the whole config, readable or not).  Returns whether anything was stored to
    delete, and the config left (nothing set: the znode is gone).

    :raises ConfigurationError: an unknown key (before anything is read).
    :raises UnreadableConfigError: some keys to unset from a config that cannot be decoded (nothing written).
    :raises ConcurrentChangeError: other writers won every attempt (nothing written).
    """
    path = paths.group_config(validate_group(group))
    check_keys(keys)
    for _ in range(MAX_ATTEMPTS):
        stored = read_config(zk, group)
        if stored.version < 0:
            return False, GroupConfig()
        if stored.problem is not None and keys:
            raise UnreadableConfigError(group, stored.problem)
        left = stored.effective.without(keys) if keys else GroupConfig()
        if stored.problem is None and left == stored.config:
            return False, left  # none of the keys was set
        try:
            if left.empty:
                zk.delete(path, version=stored.version)
            else:
                zk.set(path, left.encode(), version=stored.version)
        except (BadVersionError, NoNodeError):
            continue
        return True, left
    raise ConcurrentChangeError(f"the config of group {group!r} kept changing while it was deleted; try again")
