"""The zkcoord consumer client: registers in its group, obeys the coordinator's command channel, fetches.

See ``docs/consumer.md`` for the API with an example, and :mod:`consumer.client` for the threads.
"""

from consumer.client import Consumer
from consumer.config import ConsumerConfig, Subscription, new_consumer_id
from consumer.offsets import OffsetCommitFencedError
from consumer.records import ConsumerRecord, TopicPartition
from consumer.shared import ConsumerMetrics

__all__ = [
    "Consumer",
    "ConsumerConfig",
    "ConsumerMetrics",
    "ConsumerRecord",
    "OffsetCommitFencedError",
    "Subscription",
    "TopicPartition",
    "new_consumer_id",
]
