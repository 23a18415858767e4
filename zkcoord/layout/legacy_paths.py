"""Kafka 0.8's consumer znode paths (``ZkUtils.ZKGroupDirs`` / ``ZKGroupTopicDirs``), built in one place.

The legacy protocol keeps each group directly under ``/consumers/<group>``, as Kafka 0.8 did::

    /consumers/<group>/ids/<consumerId>            ephemeral   registration JSON (MemberRegistration)
    /consumers/<group>/owners/<topic>/<partition>  ephemeral   "<consumerId>-<threadId>"
    /consumers/<group>/offsets/<topic>/<partition> persistent  committed offset, decimal string

The coordinator protocol lives beside it under ``/consumers/groups/<group>`` and ``/consumers/coordinator*``
(:mod:`zkcoord.layout.paths`), so a legacy group may not be called ``groups``, ``coordinator``, ``coordinator_epoch`` or
``coordinator_terms``: its directory would be one of the coordinator's znodes (:func:`check_group`).  Topics are
read from ``/brokers/topics`` and brokers from ``/brokers/ids``, shared with everything else
(:mod:`zkcoord.layout.paths`).
"""

from __future__ import annotations

from zkcoord.errors import ConfigurationError
from zkcoord.layout import paths as common
from zkcoord.layout.names import validate_group

CONSUMERS = common.CONSUMERS

#: Children of ``/consumers`` the coordinator protocol owns; a legacy group of that name would collide with them.
RESERVED_GROUPS = frozenset(
    name.rsplit("/", 1)[1]
    for name in (common.GROUPS, common.COORDINATOR, common.COORDINATOR_EPOCH, common.COORDINATOR_TERMS)
)


def check_group(group: str) -> str:
    """Return ``group`` if it can be a legacy group (Kafka's naming rules, not a reserved name).

    :raises ConfigurationError: the name breaks the naming rules or is one of :data:`RESERVED_GROUPS`.
    """
    validate_group(group)
    if group in RESERVED_GROUPS:
        reserved = ", ".join(sorted(RESERVED_GROUPS))
        raise ConfigurationError(
            f"group {group!r} cannot use the legacy protocol: /consumers/{group} belongs to the coordinator "
            f"(reserved: {reserved})"
        )
    return group


def group_dir(group: str) -> str:
    """``/consumers/<group>`` (``ZKGroupDirs.consumerGroupDir``)."""
    return f"{CONSUMERS}/{group}"


def ids(group: str) -> str:
    """``/consumers/<group>/ids`` (``ZKGroupDirs.consumerRegistryDir``): the members, watched by every member."""
    return f"{CONSUMERS}/{group}/ids"


def member(group: str, consumer_id: str) -> str:
    """``/consumers/<group>/ids/<consumerId>``: one member's ephemeral registration."""
    return f"{CONSUMERS}/{group}/ids/{consumer_id}"


def owners_root(group: str) -> str:
    """``/consumers/<group>/owners``: one child per topic with a claimed partition."""
    return f"{CONSUMERS}/{group}/owners"


def offsets_root(group: str) -> str:
    """``/consumers/<group>/offsets``: one child per topic with a committed offset."""
    return f"{CONSUMERS}/{group}/offsets"


def owners(group: str, topic: str) -> str:
    """``/consumers/<group>/owners/<topic>`` (``ZKGroupTopicDirs.consumerOwnerDir``)."""
    return f"{CONSUMERS}/{group}/owners/{topic}"


def owner(group: str, topic: str, partition: int) -> str:
    """``/consumers/<group>/owners/<topic>/<partition>``: the ephemeral claim, value ``<consumerId>-<n>``."""
    return f"{CONSUMERS}/{group}/owners/{topic}/{partition}"


def offsets(group: str, topic: str) -> str:
    """``/consumers/<group>/offsets/<topic>`` (``ZKGroupTopicDirs.consumerOffsetDir``)."""
    return f"{CONSUMERS}/{group}/offsets/{topic}"


def offset(group: str, topic: str, partition: int) -> str:
    """``/consumers/<group>/offsets/<topic>/<partition>``: the committed offset, a persistent decimal string."""
    return f"{CONSUMERS}/{group}/offsets/{topic}/{partition}"
