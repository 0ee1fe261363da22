/* The built-in `count` processor (worker/src/processor/count.rs) as a C guest, for comparing a
 * compiled guest's throughput with the native processor and the Python guest
 * (examples/wasm/python/count.py): per record, the key's count goes up by one and the new
 * count is emitted.
 *
 * State per key (key: the record key's bytes; the host puts every guest key under its own
 * prefix): the count as 8 big-endian bytes, nothing else (the native processor's CountState
 * has a format byte first; a guest's state is its own).
 * Output per record: key = the record key, value = {"key":"<key>","count":<n>}, byte for byte
 * what count.rs writes (serde_json's escaping).
 *
 * Lean on purpose: no allocation per record besides what the bindings hand over (the record
 * and the state's value, both freed here); the output is built in one buffer kept across
 * records. */
#include "guest.h"
#include "json.h"

#include <stdlib.h>

#define PREFIX "{\"key\":\""
#define MIDDLE "\",\"count\":"
#define SUFFIX "}"

/* The output buffer, grown to the largest record's need and then reused. */
static uint8_t *output;
static size_t output_cap;

static uint8_t *output_of_size(size_t size) {
  if (size > output_cap) {
    size_t cap = output_cap ? output_cap : 256;
    while (cap < size) cap *= 2;
    uint8_t *grown = realloc(output, cap);
    /* Only when the host's memory cap is reached, which has trapped already. */
    if (!grown) abort();
    output = grown;
    output_cap = cap;
  }
  return output;
}

bool exports_processor_init(processor_string_t *config, processor_string_t *err) {
  /* count takes no config. */
  (void)err;
  processor_string_free(config);
  return true;
}

static bool count(const processor_input_record_t *input, processor_failure_t *err) {
  processor_list_u8_t key = bytes_of(&input->key);
  processor_list_u8_t stored;
  uint64_t n = 0;
  if (streamkeeper_processor_host_state_get(&key, &stored)) {
    bool readable = stored.len == 8;
    for (size_t i = 0; readable && i < 8; i++) n = n << 8 | stored.ptr[i];
    processor_list_u8_free(&stored);
    if (!readable) return refuse(err, "the key's count is not 8 bytes");
  }
  if (n < UINT64_MAX) n++; /* saturating, as count.rs */

  uint8_t be[8];
  for (int i = 0; i < 8; i++) be[i] = (uint8_t)(n >> (56 - 8 * i));
  processor_list_u8_t value = {be, sizeof be};
  streamkeeper_processor_host_state_put(&key, &value);

  uint8_t *out = output_of_size(sizeof PREFIX + JSON_ESCAPED_MAX(key.len) + sizeof MIDDLE + 20 +
                                sizeof SUFFIX);
  uint8_t *at = out;
  memcpy(at, PREFIX, sizeof PREFIX - 1);
  at += sizeof PREFIX - 1;
  at += json_escape(at, key.ptr, key.len);
  memcpy(at, MIDDLE, sizeof MIDDLE - 1);
  at += sizeof MIDDLE - 1;
  at += json_write_u64(at, n);
  memcpy(at, SUFFIX, sizeof SUFFIX - 1);
  at += sizeof SUFFIX - 1;
  processor_list_u8_t update = {out, (size_t)(at - out)};
  streamkeeper_processor_host_emit(&key, &update);
  return true;
}

bool exports_processor_process(processor_input_record_t *input, processor_failure_t *err) {
  bool ok = count(input, err);
  processor_input_record_free(input);
  return ok;
}

bool exports_processor_advance(int64_t stream_time_ms, processor_failure_t *err) {
  (void)stream_time_ms;
  (void)err;
  return true;
}
