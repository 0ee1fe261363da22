"""A guest that answers each record with what the worker gave it: the grouping key, the Kafka
record's own key, its headers and timestamp, the partition, offset and event time. A starting
point for a guest of your own, and how the tests check that a record reaches a guest whole.

Output per record: key = the grouping key, value = a JSON object; bytes that are not UTF-8 are
shown as a list of numbers. No state."""

import json

import wit_world
from wit_world.imports import host


def readable(data):
    if data is None:
        return None
    try:
        return bytes(data).decode()
    except UnicodeDecodeError:
        return list(data)


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        pass

    def process(self, input):
        described = {
            "key": input.key,
            "value": json.loads(input.value),
            "kafkaKey": readable(input.kafka_key),
            "headers": [[name, readable(value)] for name, value in input.headers],
            "timestampMs": input.timestamp_ms,
            "partition": input.partition,
            "offset": input.offset,
            "eventTimeMs": input.event_time_ms,
        }
        host.emit(input.key.encode(), json.dumps(described, separators=(",", ":")).encode())

    def advance(self, stream_time_ms):
        pass
