"""The built-in `count` processor (worker/src/processor/count.rs) as a Python guest, for comparing
an interpreted guest's throughput with the native processor and the C guest
(examples/wasm/c/count.c): per record, the key's count goes up by one and the new count is
emitted.

State per key (key: the record key's bytes; the host puts every guest key under its own prefix):
the count as 8 big-endian bytes, nothing else.
Output per record: key = the record key, value = {"key":"<key>","count":<n>}, byte for byte what
count.rs writes: compact, and with `ensure_ascii=False` Python escapes exactly what serde_json
does (quote, backslash, control characters)."""

import json
import struct

import wit_world
from componentize_py_types import Err
from wit_world.imports import host
from wit_world.imports.types import Failure_BadRecord

MAX_COUNT = (1 << 64) - 1


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        # count takes no config.
        pass

    def process(self, input):
        key = input.key.encode()
        stored = host.state_get(key)
        if stored is None:
            count = 0
        elif len(stored) == 8:
            (count,) = struct.unpack(">Q", stored)
        else:
            raise Err(Failure_BadRecord("the key's count is not 8 bytes"))
        count = min(count + 1, MAX_COUNT)  # saturating, as count.rs
        host.state_put(key, struct.pack(">Q", count))
        update = {"key": input.key, "count": count}
        host.emit(key, json.dumps(update, separators=(",", ":"), ensure_ascii=False).encode())

    def advance(self, stream_time_ms):
        pass
