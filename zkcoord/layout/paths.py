"""Every znode path of the layout in ``docs/zookeeper-layout.md``, built in one place.

Nothing else in the project formats a ZooKeeper path by hand; tests, tools and users read this layout as a contract.
Path segments are validated names (:mod:`zkcoord.layout.names`), so no segment can contain ``/``.
"""

from __future__ import annotations

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"
COORDINATOR = "/consumers/coordinator"
COORDINATOR_EPOCH = "/consumers/coordinator_epoch"
#: Parent of the current coordinator term's node (``<epoch>``), which every write of the term checks.
COORDINATOR_TERMS = "/consumers/coordinator_terms"
GROUPS = "/consumers/groups"
CONFIG = "/config"
CONFIG_GROUPS = "/config/groups"

#: Persistent parents created once (idempotently) by every process that needs them, as Kafka's ``setupCommonPaths``.
COMMON_PATHS = (BROKER_IDS, BROKER_TOPICS, GROUPS)


def group_config(name: str) -> str:
    """A group's dynamic configuration (:mod:`zkcoord.layout.group_config`); it may exist before, and outlive, the
    group (seed 000: its life cycle is decoupled from the group's)."""
    return f"{CONFIG_GROUPS}/{name}"


def group_of_config(path: str) -> str | None:
    """The group whose config path :func:`group_config` built, or None if ``path`` is not one."""
    head = f"{CONFIG_GROUPS}/"
    name = path[len(head) :] if path.startswith(head) else ""
    return name if name and "/" not in name else None


def coordinator_term(epoch: int) -> str:
    return f"{COORDINATOR_TERMS}/{epoch}"


#: The largest broker id: a Java int in Kafka, and the name of its registration znode (``/brokers/ids/<id>``), so the
#: broker refuses a larger one and topic placement ignores a registration named past it.
MAX_BROKER_ID = 2**31 - 1


def broker(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic(name: str) -> str:
    return f"{BROKER_TOPICS}/{name}"


def group(name: str) -> str:
    return f"{GROUPS}/{name}"


def group_ids(name: str) -> str:
    return f"{GROUPS}/{name}/ids"


def group_of_ids(path: str) -> str | None:
    """The group whose ``ids`` path :func:`group_ids` built, or None if ``path`` is not one."""
    head, tail = f"{GROUPS}/", "/ids"
    if path.startswith(head) and path.endswith(tail) and "/" not in path[len(head) : -len(tail)]:
        return path[len(head) : -len(tail)] or None
    return None


def group_of_member(path: str) -> str | None:
    """The group whose member registration path :func:`member` built, or None if ``path`` is not one."""
    head = f"{GROUPS}/"
    if not path.startswith(head):
        return None
    parts = path[len(head) :].split("/")
    return parts[0] if len(parts) == 3 and parts[1] == "ids" and parts[0] and parts[2] else None


def member(group_name: str, consumer_id: str) -> str:
    return f"{GROUPS}/{group_name}/ids/{consumer_id}"


def channel_root(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/channel"


def channel(group_name: str, consumer_id: str) -> str:
    return f"{GROUPS}/{group_name}/channel/{consumer_id}"


#: Prefix of command znodes; ZooKeeper appends a 10-digit sequence number.
COMMAND_PREFIX = "cmd-"


def command_prefix(group_name: str, consumer_id: str) -> str:
    return f"{channel(group_name, consumer_id)}/{COMMAND_PREFIX}"


def command_of(path: str) -> tuple[str, str, str] | None:
    """``(group, consumer id, command name)`` of a command path ``channel(g, c)/<name>``, or None."""
    if not path.startswith(f"{GROUPS}/"):
        return None
    parts = path[len(GROUPS) + 1 :].split("/")
    if len(parts) != 4 or parts[1] != "channel" or not all(parts):
        return None
    return parts[0], parts[2], parts[3]


def assignments_root(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/assignment"


def assignment(group_name: str, consumer_id: str) -> str:
    """A consumer-protocol member's assignment: the coordinator's last command to it, rewritten in place (one znode
    per member, read through a data watch; ``docs/protocol.md``, "The assignment channel")."""
    return f"{GROUPS}/{group_name}/assignment/{consumer_id}"


def acks_root(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/ack"


def ack(group_name: str, consumer_id: str) -> str:
    """A consumer-protocol member's acknowledgement of its assignment (:class:`~zkcoord.layout.kip848.AssignmentAck`):
    written by the member, watched by the coordinator."""
    return f"{GROUPS}/{group_name}/ack/{consumer_id}"


def member_record_of(path: str, kind: str) -> tuple[str, str] | None:
    """``(group, consumer id)`` of a per-member record path ``<group>/<kind>/<consumer id>``, or None."""
    if not path.startswith(f"{GROUPS}/"):
        return None
    parts = path[len(GROUPS) + 1 :].split("/")
    if len(parts) != 3 or parts[1] != kind or not all(parts):
        return None
    return parts[0], parts[2]


def owners_root(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/owners"


def offsets_root(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/offsets"


def owners(group_name: str, topic_name: str) -> str:
    return f"{GROUPS}/{group_name}/owners/{topic_name}"


def owner(group_name: str, topic_name: str, partition: int) -> str:
    return f"{GROUPS}/{group_name}/owners/{topic_name}/{partition}"


def offsets(group_name: str, topic_name: str) -> str:
    return f"{GROUPS}/{group_name}/offsets/{topic_name}"


def offset(group_name: str, topic_name: str, partition: int) -> str:
    return f"{GROUPS}/{group_name}/offsets/{topic_name}/{partition}"


def group_state(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/state"


def kip848(group_name: str) -> str:
    """A consumer-protocol group's epochs (:class:`~zkcoord.layout.kip848.GroupEpochs`)."""
    return f"{GROUPS}/{group_name}/kip848"


def classic_root(group_name: str) -> str:
    """A classic-protocol group's join and sync records (issue 17, ``docs/classic-protocol.md``)."""
    return f"{GROUPS}/{group_name}/classic"


def classic_join(group_name: str) -> str:
    """The coordinator's JoinGroup answer (:class:`~zkcoord.layout.classic.JoinRecord`)."""
    return f"{GROUPS}/{group_name}/classic/join"


def classic_sync(group_name: str) -> str:
    """The leader's SyncGroup (:class:`~zkcoord.layout.classic.SyncRecord`), empty until the leader writes it."""
    return f"{GROUPS}/{group_name}/classic/sync"


def group_of_classic_sync(path: str) -> str | None:
    """The group whose sync record ``path`` is, or None."""
    prefix, sep, rest = path.partition(f"{GROUPS}/")
    if prefix or not sep:
        return None
    group, _, tail = rest.partition("/")
    return group if tail == "classic/sync" and group else None


def targets_root(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/target"


def target(group_name: str, consumer_id: str) -> str:
    """One member's target (:class:`~zkcoord.layout.kip848.MemberTarget`)."""
    return f"{GROUPS}/{group_name}/target/{consumer_id}"


def currents_root(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/current"


def current(group_name: str, consumer_id: str) -> str:
    """One member's current assignment (:class:`~zkcoord.layout.kip848.CurrentAssignment`)."""
    return f"{GROUPS}/{group_name}/current/{consumer_id}"


def instances_root(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/instances"


def instance(group_name: str, instance_id: str) -> str:
    """A static member's instance id, held (ephemeral, its consumer id as data) by the one live member using it."""
    return f"{GROUPS}/{group_name}/instances/{instance_id}"


def resets_root(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/resets"


def resets(group_name: str, topic_name: str) -> str:
    return f"{GROUPS}/{group_name}/resets/{topic_name}"


def reset(group_name: str, topic_name: str, partition: int) -> str:
    """The last out-of-range position a consumer of the group found in the partition
    (``zkcoord.protocol.offset_reset``)."""
    return f"{GROUPS}/{group_name}/resets/{topic_name}/{partition}"


def checkpoints_root(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/checkpoints"


def checkpoint(group_name: str, name: str) -> str:
    """A named checkpoint of the group's committed offsets (:class:`~zkcoord.layout.checkpoints.Checkpoint`), written
    by ``zkcoord group checkpoint`` and read by ``group reset-offsets --to-checkpoint``."""
    return f"{GROUPS}/{group_name}/checkpoints/{name}"


# --- a consistent region's shared data (issue 24, seed 003: docs/regions.md) -----------------------------------------


def region_root(group_name: str) -> str:
    """The group's consistent region: its id (``RegionRecord``), created once by the first member, never changed."""
    return f"{GROUPS}/{group_name}/region"


def region_members(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/region/members"


def region_member(group_name: str, name: str) -> str:
    """A member taking part (ephemeral, its consumer id): the names give every member N."""
    return f"{GROUPS}/{group_name}/region/members/{name}"


def region_initial(group_name: str, topic_name: str, partition: int) -> str:
    """A partition's control variable: its initial fetch offset, created by the first member that sees the
    partition (create-if-absent) and never overwritten."""
    return f"{GROUPS}/{group_name}/region/initial/{topic_name}/{partition}"


def region_control(group_name: str) -> str:
    """The driver's last order (``ControlOrder``), written at the version read (a stale driver is refused)."""
    return f"{GROUPS}/{group_name}/region/control"


def region_completed(group_name: str) -> str:
    """The driver's record of the last complete checkpoint (``CompletedRecord``): written at the version read, in a
    transaction that checks ``control``'s version (a stale driver's write is refused)."""
    return f"{GROUPS}/{group_name}/region/completed"


def region_ack(group_name: str, name: str) -> str:
    """The last order a member carried out (``Ack``); written by that member only."""
    return f"{GROUPS}/{group_name}/region/acks/{name}"


def region_requests(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/region/requests"


def region_request(group_name: str, name: str) -> str:
    """A member's request for a reset of the region (``ResetRequest``); written by that member only."""
    return f"{GROUPS}/{group_name}/region/requests/{name}"


def region_merges(group_name: str) -> str:
    return f"{GROUPS}/{group_name}/region/merges"


def region_merge(group_name: str, seq: int) -> str:
    """The merge of checkpoint ``seq``: one child per member's contribution; removed when ``seq`` is retired."""
    return f"{GROUPS}/{group_name}/region/merges/{seq}"


def region_contribution(group_name: str, seq: int, name: str) -> str:
    return f"{GROUPS}/{group_name}/region/merges/{seq}/{name}"
