"""The velocity check of examples/custom-processor as a Python guest: each transaction is answered
with how many of the card's transactions fall within the `windowMinutes` before it, and flagged
when that makes more than `maxTransactions`. State per card: its latest event times.

For the sandbox's tests, a record whose `poison` field is set misbehaves: `loop` never returns,
`allocate` grows without end, `trap` raises, `sleep` sleeps forever (the host's clock stands
still, so each sleep is over at once and the loop runs out of fuel). It writes the key `poisoned`
first: the worker undoes a failed record's writes, and the tests check that it did."""

import json
import struct
import time

import wit_world
from componentize_py_types import Err
from wit_world.imports import host
from wit_world.imports.types import Failure_BadRecord

FORMAT = 1
settings = {}


def decode(value):
    if value is None:
        return []
    if not value or value[0] != FORMAT or (len(value) - 1) % 8:
        raise ValueError("unreadable card times")
    return list(struct.unpack(">%dq" % ((len(value) - 1) // 8), value[1:]))


def encode(times):
    return bytes([FORMAT]) + struct.pack(">%dq" % len(times), *times)


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        parsed = json.loads(config) if config else {}
        unknown = set(parsed) - {"maxTransactions", "windowMinutes"}
        if unknown:
            raise Err("unknown config field(s): " + ", ".join(sorted(unknown)))
        limit = parsed.get("maxTransactions")
        minutes = parsed.get("windowMinutes")
        if not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise Err("maxTransactions is %r: it must be 1 to 1000" % (limit,))
        if not isinstance(minutes, int) or minutes < 1:
            raise Err("windowMinutes must be at least 1")
        settings["limit"] = limit
        settings["window_ms"] = minutes * 60_000

    def process(self, input):
        record = input
        transaction = json.loads(record.value)
        poison = transaction.get("poison")
        if poison is not None:
            host.state_put(b"poisoned", b"1")
        if poison == "loop":
            while True:
                pass
        if poison == "allocate":
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        if poison == "trap":
            raise RuntimeError("poisoned record")
        if poison == "sleep":
            while True:
                time.sleep(3600)
        at = record.event_time_ms
        if at is None:
            raise Err(Failure_BadRecord("no event time"))
        key = record.key.encode()
        times = decode(host.state_get(key))
        recent = sum(1 for t in times if at - settings["window_ms"] < t <= at) + 1
        times.append(at)
        times.sort()
        times = times[-settings["limit"]:]
        host.state_put(key, encode(times))
        answer = {"transaction": transaction, "recent": recent, "flagged": recent > settings["limit"]}
        host.emit(key, json.dumps(answer, separators=(",", ":")).encode())

    def advance(self, stream_time_ms):
        pass
