/* The little JSON the C guests need, without allocating: walk the members of one top-level
 * object, compare a string value with a literal, read an integer, and write an escaped string
 * or a number. Values the guest does not look at are checked and skipped, never copied: the
 * velocity check embeds the record's value verbatim in its answer. */
#ifndef STREAMKEEPER_GUEST_JSON_H
#define STREAMKEEPER_GUEST_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A piece of the input text: a whole token (a string keeps its quotes). */
typedef struct json_span {
  const uint8_t *at;
  size_t len;
} json_span;

/* A walk over the members of a top-level object. */
typedef struct json_object {
  const uint8_t *at;
  const uint8_t *end;
  bool first;
} json_object;

/* `text` without the whitespace around it. */
json_span json_trim(json_span text);

/* Starts a walk over `text`, which must be one object (whitespace around it allowed). */
bool json_object_open(json_object *object, json_span text);

/* The next member: 1 and its name (a string token) and value, 0 at the end of the object
 * (nothing but whitespace may follow it), -1 when the text is not well-formed JSON. */
int json_object_next(json_object *object, json_span *name, json_span *value);

/* Whether `token` is a string whose decoded text is `literal`. */
bool json_string_equals(json_span token, const char *literal);

/* Reads `token` when it is an integer (no fraction, no exponent) that fits 64 bits. */
bool json_integer(json_span token, int64_t *value);

/* The most bytes json_escape writes for `len` input bytes. */
#define JSON_ESCAPED_MAX(len) (6 * (len))

/* Writes `text` escaped as the inside of a JSON string (without the quotes) the way serde_json
 * and Python's json (ensure_ascii=False) do: `"` and `\` and the control characters are
 * escaped, with \b \f \n \r \t where they exist and \u00xx otherwise; everything else,
 * UTF-8 included, is copied. Returns the bytes written, at most JSON_ESCAPED_MAX(len). */
size_t json_escape(uint8_t *out, const uint8_t *text, size_t len);

/* Writes `value` in decimal; returns the bytes written, at most 20. */
size_t json_write_u64(uint8_t *out, uint64_t value);

#endif
