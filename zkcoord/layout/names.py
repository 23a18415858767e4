"""Validation of the names users choose: topics, groups, consumer ids, racks.

The rules are Kafka's (``kafka.common.Topic.validate``): ASCII letters, digits, ``.``, ``_`` and ``-``; not ``.`` or
``..``; at most 249 characters, so that ``<topic>-<partition>`` still fits a file name.  Group names follow the same
rules here, because a group name becomes a znode name and a part of every consumer id.
"""

from __future__ import annotations

import re

from zkcoord.errors import ConfigurationError, InvalidNameError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
#: Upper bound on partitions per topic: far above any demo, low enough that a typo (1e9) is refused, not obeyed.
MAX_PARTITIONS = 10_000


def validate_name(kind: str, name: str) -> str:
    """Return ``name`` if it is a legal topic/group name, else raise :class:`InvalidNameError`."""
    if not name:
        raise InvalidNameError(kind, name, "must not be empty")
    if name in (".", ".."):
        raise InvalidNameError(kind, name, "'.' and '..' are not allowed")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidNameError(kind, name[:40] + "...", f"longer than {MAX_NAME_LENGTH} characters ({len(name)})")
    if not _LEGAL.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL.fullmatch(c)})
        hint = "use ASCII letters, digits, '.', '_', '-'"
        raise InvalidNameError(kind, name, f"illegal characters {''.join(bad)!r}; {hint}")
    return name


def validate_topic(name: str) -> str:
    return validate_name("topic", name)


def validate_group(name: str) -> str:
    return validate_name("group", name)


def validate_rack(name: str) -> str:
    """A rack id (a broker's ``--rack``, a consumer's ``--rack``: Kafka's ``broker.rack`` and ``client.rack``), under
    the same rules as topic names: it is compared, never parsed, and these rules keep it printable in one line."""
    return validate_name("rack", name)


def validate_partition_count(count: int) -> int:
    """Return ``count`` if it is a legal number of partitions (1..MAX_PARTITIONS), else raise."""
    if not 1 <= count <= MAX_PARTITIONS:
        raise ConfigurationError(f"partition count must be between 1 and {MAX_PARTITIONS}, got {count}")
    return count
