"""The zkcoord consumer client: registers in its group, obeys the coordinator's command channel, fetches.

See ``docs/consumer.md`` for the API with an example, and :mod:`zkcoord.consumer.client` for the threads.
"""

from zkcoord.consumer.client import Consumer
from zkcoord.consumer.config import ConsumerConfig, Subscription, new_consumer_id
from zkcoord.consumer.offsets import OffsetCommitFencedError
from zkcoord.consumer.records import ConsumerRecord, TopicPartition
from zkcoord.consumer.shared import ConsumerMetrics

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
