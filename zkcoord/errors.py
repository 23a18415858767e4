"""The project's exception hierarchy.

Every error zkcoord raises on purpose derives from :class:`ZkCoordError`.  Callers branch on the class and on the
``retriable`` flag, never on message text.  Third-party exceptions (kazoo's in particular) are translated at the
boundary that calls the library (:mod:`zkcoord.zk`) and chained with ``raise ... from``, so no caller outside that
module imports ``kazoo.exceptions``.

The message of every error is written to be shown to a user as one line: it says what went wrong and, where there
is one, what to do about it.
"""

from __future__ import annotations


class ZkCoordError(Exception):
    """Root of every error raised by zkcoord.

    :cvar retriable: whether repeating the same operation later may succeed without any change of input.
    """

    retriable = False


# --- input and configuration -------------------------------------------------------------------------------------


class ConfigurationError(ZkCoordError):
    """A configuration value or command-line argument is invalid."""


class InvalidNameError(ConfigurationError):
    """A topic, group or consumer name breaks the naming rules."""

    def __init__(self, kind: str, name: str, reason: str) -> None:
        self.kind = kind
        self.name = name
        self.reason = reason
        super().__init__(f"invalid {kind} name {name!r}: {reason}")


class TopicPatternError(ConfigurationError):
    """A subscription's regex is outside the topic-pattern dialect (:mod:`zkcoord.layout.topic_regex`)."""

    def __init__(self, pattern: str, reason: str) -> None:
        self.pattern = pattern
        self.reason = reason
        shown = pattern if len(pattern) <= 60 else pattern[:60] + "..."
        super().__init__(f"invalid regex {shown!r}: {reason} (the topic-pattern dialect: docs/consumer.md)")


class CodecError(ZkCoordError):
    """Znode data that cannot be decoded or fails validation (S7: refused, never fatal)."""

    def __init__(self, what: str, reason: str, path: str | None = None) -> None:
        self.what = what
        self.reason = reason
        self.path = path
        where = f" at {path}" if path else ""
        super().__init__(f"malformed {what}{where}: {reason}")


# --- ZooKeeper boundary ------------------------------------------------------------------------------------------


class ZkError(ZkCoordError):
    """An error talking to ZooKeeper.  ``path`` names the znode involved, when there is one."""

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)


class ZkUnavailableError(ZkError):
    """ZooKeeper could not be reached (connection loss, timeout, no quorum).  The operation may be retried."""

    retriable = True


class ZkNotSentError(ZkUnavailableError):
    """The request was not sent (the stop deadline had passed): unlike its parent's, its outcome is known -- it did
    not happen."""


class ZkSessionExpiredError(ZkError):
    """The ZooKeeper session expired: every ephemeral node of it is gone and every watch must be set again."""


class NoNodeError(ZkError):
    """The znode does not exist."""


class NodeExistsError(ZkError):
    """The znode already exists."""


class BadVersionError(ZkError):
    """A conditional write found a different znode version than it expected."""


class NotEmptyError(ZkError):
    """The znode cannot be deleted because it has children."""


class AccessRefusedError(ZkError):
    """ZooKeeper refused the operation: the znode's ACL does not grant it to this session's identities (kazoo's
    ``NoAuthError``; ``--zk-auth``, docs/security.md).  Not retriable: the same identity is refused again.

    ``op`` names the operation refused (``create``, ``set``, ``delete``, ``get``, ...; ``None`` if unknown); the
    boundary that raised it fills in ``role`` and ``user`` (the session's role in the ACL policy and its credential's
    user name -- never the password; ``None`` without credentials) and sets ``reported`` once its refusal listeners
    have been told (:meth:`zkcoord.zk.ZkClient.add_refusal_listener`)."""

    def __init__(self, message: str, path: str | None = None, op: str | None = None) -> None:
        super().__init__(message, path)
        self.op = op
        self.role: str | None = None
        self.user: str | None = None
        self.reported = False


class FencedError(ZkError):
    """A fenced write failed its epoch or generation check: the writer has been superseded and must stop acting."""


class AssignorError(ZkCoordError):
    """A classic-protocol leader's client-side assignor failed: it could not be loaded, it raised, or it returned
    something that is not an assignment (``docs/classic-protocol.md``).  The leader reports it; the coordinator
    fails the generation and retries it with another leader."""


class EpochExhaustedError(ZkCoordError):
    """The coordinator epoch on record is the largest there can be: no new term can be elected (a person must
    decide: only a hand-written epoch gets there)."""


# --- domain ------------------------------------------------------------------------------------------------------


class TopicExistsError(ZkCoordError):
    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic!r} already exists")


class TopicNotFoundError(ZkCoordError):
    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(f"topic {topic!r} does not exist (create it: zkcoord topic create {topic} --partitions N)")


class NoBrokersError(ZkCoordError):
    retriable = True

    def __init__(self) -> None:
        super().__init__("no live broker is registered (start one with: zkcoord broker --id 0)")


class BrokerIdInUseError(ZkCoordError):
    def __init__(self, broker_id: int, waited_s: float | None = None) -> None:
        self.broker_id = broker_id
        waited = f" (still there after waiting {waited_s:.1f} s for its session to expire)" if waited_s else ""
        super().__init__(f"broker id {broker_id} is already registered by a live broker{waited}; choose another --id")


class ConsumerIdInUseError(ZkCoordError):
    """Our consumer id is registered by another live session: another process runs with the same id.  ``path`` is
    the znode that session holds (our registration, or our instance id's)."""

    def __init__(self, consumer_id: str, session: int, path: str | None = None, message: str | None = None) -> None:
        self.consumer_id = consumer_id
        self.session = session
        self.path = path
        super().__init__(
            message
            or f"consumer id {consumer_id} is registered by another live session ({session:#x}): is another process "
            "running with the same --consumer-id?"
        )


class InstanceIdInUseError(ConsumerIdInUseError):
    """Our static member's instance id is held by another live member (KIP-848's UNRELEASED_INSTANCE_ID)."""

    def __init__(self, consumer_id: str, instance_id: str, session: int, path: str) -> None:
        self.instance_id = instance_id
        super().__init__(
            consumer_id,
            session,
            path,
            f"instance id {instance_id!r} is held by another live member (session {session:#x}): two members of a "
            "group cannot share one --instance-id",
        )


# --- embedded ZooKeeper server ---------------------------------------------------------------------------------


class ZkServerError(ZkCoordError):
    """The embedded ZooKeeper server could not be started, stopped or found."""


# --- metrics endpoint -------------------------------------------------------------------------------------------------


class MetricsServerError(ZkCoordError):
    """The ``/metrics`` endpoint could not be served at the address asked for (a port in use, an unknown host)."""

    def __init__(self, address: str, port: int, reason: str) -> None:
        self.address = address
        self.port = port
        self.reason = reason
        super().__init__(f"cannot serve metrics on {address}:{port}: {reason}")


# --- partition log -----------------------------------------------------------------------------------------------


class LogError(ZkCoordError):
    """An error of the on-disk partition log."""


class CorruptLogError(LogError):
    """The log holds bytes that are not a valid record at a place where a torn tail cannot explain them."""


class OffsetOutOfRangeError(LogError):
    def __init__(self, offset: int, start: int, end: int) -> None:
        self.offset = offset
        self.start = start
        self.end = end
        super().__init__(f"offset {offset} is outside the log's range [{start}, {end})")


class LogLockedError(LogError):
    """Another process holds the partition's writer lock."""
