/* The velocity check of examples/custom-processor as a C guest: each transaction is answered
 * with how many of the card's transactions fall within the `windowMinutes` before it, and
 * flagged when that makes more than `maxTransactions`. It gives the same answers as the native
 * check and the Python guest (examples/wasm/python/app.py), from the same state.
 *
 * Config: {"maxTransactions": 1..1000, "windowMinutes": >= 1}.
 * State per card (key: the card's bytes): a format byte (1), then the card's latest event
 * times, oldest first, 8 big-endian bytes each; at most `maxTransactions` of them, so a card's
 * state is bounded whatever its traffic.
 * Answer (key: the card): {"transaction":<the record's value, verbatim>,"recent":n,"flagged":b}.
 *
 * For the sandbox's tests, a record whose top-level `poison` field is set misbehaves: "loop"
 * never returns, "allocate" grows memory without end, "trap" writes "poisoned record" to
 * stderr and traps, "sleep" sleeps forever (the host's clock stands still, so each sleep is
 * over at once and the loop runs out of fuel). It writes the key "poisoned" first: the worker
 * undoes a failed record's writes, and the tests check that it did. */
#include "guest.h"
#include "json.h"

#include <stdlib.h>
#include <unistd.h>

#define FORMAT 1
#define MAX_TRANSACTIONS 1000
#define MINUTE_MS 60000

/* Set by init: settings, not state (every instance of the job gets the same). */
static size_t limit;
static int64_t window_ms;

/* Scratch space reused by every record: a card's times (one more than the most kept, for the
 * new one) and their stored form. */
static int64_t times[MAX_TRANSACTIONS + 1];
static uint8_t stored_times[1 + 8 * (MAX_TRANSACTIONS + 1)];

/* A growable byte buffer. */
typedef struct buffer {
  uint8_t *ptr;
  size_t len;
  size_t cap;
} buffer;

static void append(buffer *b, const void *bytes, size_t len) {
  if (b->cap - b->len < len) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < len) cap *= 2;
    uint8_t *grown = realloc(b->ptr, cap);
    /* Only when the host's memory cap is reached, which has trapped already. */
    if (!grown) abort();
    b->ptr = grown;
    b->cap = cap;
  }
  memcpy(b->ptr + b->len, bytes, len);
  b->len += len;
}

static void append_text(buffer *b, const char *text) { append(b, text, strlen(text)); }

/* Hands `message` to the bindings as the export's error (they free it after the call). */
static bool fail_init(processor_string_t *err, buffer *message) {
  err->ptr = message->ptr;
  err->len = message->len;
  return false;
}

static bool fail_init_with(processor_string_t *err, const char *reason) {
  processor_string_dup(err, reason);
  return false;
}

static bool is_known_field(json_span name) {
  return json_string_equals(name, "maxTransactions") || json_string_equals(name, "windowMinutes");
}

static int compare_spans(json_span a, json_span b) {
  int order = memcmp(a.at, b.at, a.len < b.len ? a.len : b.len);
  return order ? order : (a.len > b.len) - (a.len < b.len);
}

/* "unknown config field(s): a, b": the names sorted, each once, as app.py words it. */
static bool refuse_unknown_fields(processor_string_t *err, json_span config, size_t count) {
  json_span *names = malloc(count * sizeof *names);
  if (!names) abort();
  json_object object;
  json_span name, value;
  size_t found = 0;
  json_object_open(&object, config);
  while (json_object_next(&object, &name, &value) == 1) {
    if (is_known_field(name)) continue;
    /* Without the quotes; an insertion sort, as there are few. */
    json_span inside = {name.at + 1, name.len - 2};
    size_t place = found++;
    for (; place > 0 && compare_spans(names[place - 1], inside) > 0; place--) {
      names[place] = names[place - 1];
    }
    names[place] = inside;
  }
  buffer message = {0};
  append_text(&message, "unknown config field(s): ");
  for (size_t i = 0; i < found; i++) {
    if (i > 0 && compare_spans(names[i - 1], names[i]) == 0) continue;
    if (i > 0) append_text(&message, ", ");
    append(&message, names[i].at, names[i].len);
  }
  free(names);
  return fail_init(err, &message);
}

static bool configure(json_span config, processor_string_t *err) {
  json_object object;
  json_span name, value;
  json_span max_transactions = {0}, window_minutes = {0};
  size_t unknown = 0;
  int next;
  if (config.len == 0) config = (json_span){(const uint8_t *)"{}", 2};
  if (!json_object_open(&object, config)) return fail_init_with(err, "the config is not a JSON object");
  while ((next = json_object_next(&object, &name, &value)) == 1) {
    /* A repeated field counts with its last value, as Python's json reads it. */
    if (json_string_equals(name, "maxTransactions")) {
      max_transactions = value;
    } else if (json_string_equals(name, "windowMinutes")) {
      window_minutes = value;
    } else {
      unknown++;
    }
  }
  if (next < 0) return fail_init_with(err, "the config is not well-formed JSON");
  if (unknown) return refuse_unknown_fields(err, config, unknown);

  int64_t most, minutes;
  if (!max_transactions.at || !json_integer(max_transactions, &most) || most < 1 ||
      most > MAX_TRANSACTIONS) {
    buffer message = {0};
    append_text(&message, "maxTransactions is ");
    if (max_transactions.at) {
      append(&message, max_transactions.at, max_transactions.len < 40 ? max_transactions.len : 40);
    } else {
      append_text(&message, "missing");
    }
    append_text(&message, ": it must be 1 to 1000");
    return fail_init(err, &message);
  }
  if (!window_minutes.at || !json_integer(window_minutes, &minutes) || minutes < 1) {
    return fail_init_with(err, "windowMinutes must be at least 1");
  }
  if (minutes > INT64_MAX / MINUTE_MS) return fail_init_with(err, "windowMinutes is too large");
  limit = (size_t)most;
  window_ms = minutes * MINUTE_MS;
  return true;
}

bool exports_processor_init(processor_string_t *config, processor_string_t *err) {
  bool ok = configure((json_span){config->ptr, config->len}, err);
  processor_string_free(config);
  return ok;
}

/* The poison switches: none of them returns. */
static void spin_forever(void) {
  /* volatile: each round is real work, so the host's fuel runs out. */
  for (volatile uint64_t round = 0;; round++) {
  }
}

static void allocate_forever(void) {
  /* Each block is chained to the last and written on every page, so none can be optimised
   * away and the memory is really used, until the host's cap stops the growth. */
  static void *volatile hoard;
  for (;;) {
    enum { BLOCK = 1 << 20, PAGE = 4096 };
    uint8_t *block = malloc(BLOCK);
    if (!block) abort();
    for (size_t at = 0; at < BLOCK; at += PAGE) block[at] = 1;
    *(void **)block = hoard;
    hoard = block;
  }
}

static void sleep_forever(void) {
  /* Each sleep returns at once (the clock stands still): the record's fuel ends the loop. */
  for (;;) sleep(3600);
}

static void trap_loudly(void) {
  static const char words[] = "poisoned record\n";
  /* The host quotes the guest's stderr in the dead letter. */
  (void)!write(STDERR_FILENO, words, sizeof words - 1);
  abort();
}

/* The record's top-level `poison` field (the last one), if any; false if the value is not a
 * well-formed JSON object. */
static bool find_poison(json_span value, json_span *poison) {
  json_object object;
  json_span name, field;
  int next;
  *poison = (json_span){0};
  if (!json_object_open(&object, value)) return false;
  while ((next = json_object_next(&object, &name, &field)) == 1) {
    if (json_string_equals(name, "poison")) *poison = field;
  }
  return next == 0;
}

/* Reads a card's stored times into `times`; false if they are not in this guest's format. */
static bool decode_times(const processor_list_u8_t *stored, size_t *count) {
  if (stored->len == 0 || stored->ptr[0] != FORMAT || (stored->len - 1) % 8 != 0 ||
      (stored->len - 1) / 8 > MAX_TRANSACTIONS) {
    return false;
  }
  *count = (stored->len - 1) / 8;
  for (size_t i = 0; i < *count; i++) {
    uint64_t time = 0;
    for (int b = 0; b < 8; b++) time = time << 8 | stored->ptr[1 + 8 * i + b];
    times[i] = (int64_t)time;
  }
  return true;
}

static size_t encode_times(size_t count) {
  stored_times[0] = FORMAT;
  for (size_t i = 0; i < count; i++) {
    uint64_t time = (uint64_t)times[i];
    for (int b = 0; b < 8; b++) stored_times[1 + 8 * i + b] = (uint8_t)(time >> (56 - 8 * b));
  }
  return 1 + 8 * count;
}

static bool check(const processor_input_record_t *input, processor_failure_t *err) {
  json_span value = json_trim((json_span){input->value.ptr, input->value.len});
  json_span poison;
  if (!find_poison(value, &poison)) return refuse(err, "the value is not a JSON object");
  if (poison.len > 0) {
    /* Written first: the worker undoes a failed record's writes, and the tests check it. */
    processor_list_u8_t mark = {(uint8_t *)"poisoned", 8}, one = {(uint8_t *)"1", 1};
    streamkeeper_processor_host_state_put(&mark, &one);
  }
  if (json_string_equals(poison, "loop")) spin_forever();
  if (json_string_equals(poison, "allocate")) allocate_forever();
  if (json_string_equals(poison, "trap")) trap_loudly();
  if (json_string_equals(poison, "sleep")) sleep_forever();
  if (!input->event_time_ms.is_some) return refuse(err, "no event time");
  int64_t at = input->event_time_ms.val;

  processor_list_u8_t card = bytes_of(&input->key);
  processor_list_u8_t stored;
  size_t count = 0;
  if (streamkeeper_processor_host_state_get(&card, &stored)) {
    bool readable = decode_times(&stored, &count);
    processor_list_u8_free(&stored);
    if (!readable) return refuse(err, "unreadable card times");
  }

  /* The window is (at - windowMinutes, at]; this transaction counts too. */
  int64_t from;
  if (__builtin_sub_overflow(at, window_ms, &from)) from = INT64_MIN;
  uint64_t recent = 1;
  for (size_t i = 0; i < count; i++) recent += times[i] > from && times[i] <= at;

  /* Insert after the equal times, then keep the latest `limit`. */
  size_t place = count;
  while (place > 0 && times[place - 1] > at) place--;
  memmove(&times[place + 1], &times[place], (count - place) * sizeof times[0]);
  times[place] = at;
  count++;
  if (count > limit) {
    memmove(&times[0], &times[count - limit], limit * sizeof times[0]);
    count = limit;
  }
  processor_list_u8_t updated = {stored_times, encode_times(count)};
  streamkeeper_processor_host_state_put(&card, &updated);

  static buffer answer;
  uint8_t number[20];
  answer.len = 0;
  append_text(&answer, "{\"transaction\":");
  append(&answer, value.at, value.len);
  append_text(&answer, ",\"recent\":");
  append(&answer, number, json_write_u64(number, recent));
  append_text(&answer, recent > limit ? ",\"flagged\":true}" : ",\"flagged\":false}");
  processor_list_u8_t answer_bytes = {answer.ptr, answer.len};
  streamkeeper_processor_host_emit(&card, &answer_bytes);
  return true;
}

bool exports_processor_process(processor_input_record_t *input, processor_failure_t *err) {
  bool ok = check(input, err);
  processor_input_record_free(input);
  return ok;
}

bool exports_processor_advance(int64_t stream_time_ms, processor_failure_t *err) {
  (void)stream_time_ms;
  (void)err;
  return true;
}
