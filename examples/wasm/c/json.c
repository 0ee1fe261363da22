/* See json.h. A recursive-descent checker over RFC 8259: strict enough that a member found at
 * the top level really is one (a "poison" inside a nested object or a string is not), small
 * enough to read at once. It does not check that strings are valid UTF-8: the host hands the
 * guest text it has already decoded as JSON. */
#include "json.h"

#include <string.h>

/* Nesting deeper than this is refused rather than risking the guest's small stack. */
#define MAX_DEPTH 128

static const uint8_t *skip_value(const uint8_t *at, const uint8_t *end, int depth);

static const uint8_t *skip_whitespace(const uint8_t *at, const uint8_t *end) {
  while (at < end && (*at == ' ' || *at == '\t' || *at == '\n' || *at == '\r')) at++;
  return at;
}

static int hex_digit(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* The four hex digits of a \u escape at `at`, or -1. */
static int32_t read_hex4(const uint8_t *at, const uint8_t *end) {
  if (end - at < 4) return -1;
  int32_t unit = 0;
  for (int i = 0; i < 4; i++) {
    int digit = hex_digit(at[i]);
    if (digit < 0) return -1;
    unit = unit * 16 + digit;
  }
  return unit;
}

/* `at` is on the opening quote; returns the position after the closing one, or NULL. */
static const uint8_t *skip_string(const uint8_t *at, const uint8_t *end) {
  for (at++; at < end; at++) {
    if (*at == '"') return at + 1;
    if (*at < 0x20) return NULL;
    if (*at != '\\') continue;
    if (++at == end) return NULL;
    switch (*at) {
      case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        break;
      case 'u':
        if (read_hex4(at + 1, end) < 0) return NULL;
        at += 4;
        break;
      default:
        return NULL;
    }
  }
  return NULL;
}

static const uint8_t *skip_digits(const uint8_t *at, const uint8_t *end) {
  const uint8_t *start = at;
  while (at < end && *at >= '0' && *at <= '9') at++;
  return at == start ? NULL : at;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static const uint8_t *skip_number(const uint8_t *at, const uint8_t *end) {
  if (at < end && *at == '-') at++;
  if (at < end && *at == '0') {
    at++;
  } else if (!(at = skip_digits(at, end))) {
    return NULL;
  }
  if (at < end && *at == '.' && !(at = skip_digits(at + 1, end))) return NULL;
  if (at < end && (*at == 'e' || *at == 'E')) {
    at++;
    if (at < end && (*at == '+' || *at == '-')) at++;
    if (!(at = skip_digits(at, end))) return NULL;
  }
  return at;
}

static const uint8_t *skip_literal(const uint8_t *at, const uint8_t *end, const char *word) {
  size_t len = strlen(word);
  if ((size_t)(end - at) < len || memcmp(at, word, len) != 0) return NULL;
  return at + len;
}

/* `at` is after the opening bracket of an array (`close` = ']') or an object ('}'). */
static const uint8_t *skip_container(const uint8_t *at, const uint8_t *end, uint8_t close,
                                     int depth) {
  at = skip_whitespace(at, end);
  if (at < end && *at == close) return at + 1;
  for (;;) {
    if (close == '}') {
      if (at == end || *at != '"' || !(at = skip_string(at, end))) return NULL;
      at = skip_whitespace(at, end);
      if (at == end || *at != ':') return NULL;
      at = skip_whitespace(at + 1, end);
    }
    if (!(at = skip_value(at, end, depth + 1))) return NULL;
    at = skip_whitespace(at, end);
    if (at == end) return NULL;
    if (*at == close) return at + 1;
    if (*at != ',') return NULL;
    at = skip_whitespace(at + 1, end);
  }
}

/* `at` is on the first byte of a value; returns the position after it, or NULL. */
static const uint8_t *skip_value(const uint8_t *at, const uint8_t *end, int depth) {
  if (at == end || depth > MAX_DEPTH) return NULL;
  switch (*at) {
    case '{': return skip_container(at + 1, end, '}', depth);
    case '[': return skip_container(at + 1, end, ']', depth);
    case '"': return skip_string(at, end);
    case 't': return skip_literal(at, end, "true");
    case 'f': return skip_literal(at, end, "false");
    case 'n': return skip_literal(at, end, "null");
    default: return skip_number(at, end);
  }
}

json_span json_trim(json_span text) {
  const uint8_t *at = skip_whitespace(text.at, text.at + text.len);
  const uint8_t *end = text.at + text.len;
  while (end > at && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r')) {
    end--;
  }
  return (json_span){at, (size_t)(end - at)};
}

bool json_object_open(json_object *object, json_span text) {
  const uint8_t *end = text.at + text.len;
  const uint8_t *at = skip_whitespace(text.at, end);
  if (at == end || *at != '{') return false;
  *object = (json_object){at + 1, end, true};
  return true;
}

int json_object_next(json_object *object, json_span *name, json_span *value) {
  const uint8_t *at = skip_whitespace(object->at, object->end);
  const uint8_t *end = object->end;
  if (at == end) return -1;
  if (*at == '}') {
    object->at = at + 1;
    return skip_whitespace(at + 1, end) == end ? 0 : -1;
  }
  if (!object->first) {
    if (*at != ',') return -1;
    at = skip_whitespace(at + 1, end);
  }
  const uint8_t *name_end = at < end && *at == '"' ? skip_string(at, end) : NULL;
  if (!name_end) return -1;
  *name = (json_span){at, (size_t)(name_end - at)};
  at = skip_whitespace(name_end, end);
  if (at == end || *at != ':') return -1;
  at = skip_whitespace(at + 1, end);
  const uint8_t *value_end = skip_value(at, end, 1);
  if (!value_end) return -1;
  *value = (json_span){at, (size_t)(value_end - at)};
  object->at = value_end;
  object->first = false;
  return 1;
}

/* Encodes `point` as UTF-8 into `out` (4 bytes of room); returns the length. A lone surrogate
 * comes out as its 3-byte form: it then equals no literal, which is all the caller asks. */
static size_t encode_utf8(uint32_t point, uint8_t *out) {
  if (point < 0x80) {
    out[0] = (uint8_t)point;
    return 1;
  }
  if (point < 0x800) {
    out[0] = (uint8_t)(0xc0 | point >> 6);
    out[1] = (uint8_t)(0x80 | (point & 0x3f));
    return 2;
  }
  if (point < 0x10000) {
    out[0] = (uint8_t)(0xe0 | point >> 12);
    out[1] = (uint8_t)(0x80 | (point >> 6 & 0x3f));
    out[2] = (uint8_t)(0x80 | (point & 0x3f));
    return 3;
  }
  out[0] = (uint8_t)(0xf0 | point >> 18);
  out[1] = (uint8_t)(0x80 | (point >> 12 & 0x3f));
  out[2] = (uint8_t)(0x80 | (point >> 6 & 0x3f));
  out[3] = (uint8_t)(0x80 | (point & 0x3f));
  return 4;
}

bool json_string_equals(json_span token, const char *literal) {
  if (token.len < 2 || token.at[0] != '"') return false;
  const uint8_t *at = token.at + 1;
  const uint8_t *end = token.at + token.len - 1; /* the closing quote */
  const uint8_t *want = (const uint8_t *)literal;
  size_t left = strlen(literal);
  while (at < end) {
    uint8_t decoded[4];
    size_t len = 1;
    if (*at != '\\') {
      decoded[0] = *at++;
    } else {
      /* The token was checked by skip_string: every escape is complete. */
      uint8_t kind = at[1];
      at += 2;
      switch (kind) {
        case 'b': decoded[0] = '\b'; break;
        case 'f': decoded[0] = '\f'; break;
        case 'n': decoded[0] = '\n'; break;
        case 'r': decoded[0] = '\r'; break;
        case 't': decoded[0] = '\t'; break;
        case 'u': {
          uint32_t point = (uint32_t)read_hex4(at, end);
          at += 4;
          if (point >= 0xd800 && point < 0xdc00 && end - at >= 6 && at[0] == '\\' &&
              at[1] == 'u') {
            int32_t low = read_hex4(at + 2, end);
            if (low >= 0xdc00 && low < 0xe000) {
              point = 0x10000 + ((point - 0xd800) << 10) + (uint32_t)(low - 0xdc00);
              at += 6;
            }
          }
          len = encode_utf8(point, decoded);
          break;
        }
        default: decoded[0] = kind; break; /* " \ / */
      }
    }
    if (len > left || memcmp(decoded, want, len) != 0) return false;
    want += len;
    left -= len;
  }
  return left == 0;
}

bool json_integer(json_span token, int64_t *value) {
  const uint8_t *at = token.at;
  const uint8_t *end = token.at + token.len;
  bool negative = at < end && *at == '-';
  if (negative) at++;
  if (at == end || (*at == '0' && end - at > 1)) return false;
  /* Accumulated negatively: the negative range is the larger one. */
  int64_t result = 0;
  for (; at < end; at++) {
    if (*at < '0' || *at > '9') return false;
    if (__builtin_mul_overflow(result, 10, &result) ||
        __builtin_sub_overflow(result, *at - '0', &result)) {
      return false;
    }
  }
  if (!negative && result == INT64_MIN) return false;
  *value = negative ? result : -result;
  return true;
}

size_t json_escape(uint8_t *out, const uint8_t *text, size_t len) {
  static const char hex[] = "0123456789abcdef";
  uint8_t *start = out;
  for (size_t i = 0; i < len; i++) {
    uint8_t c = text[i];
    if (c >= 0x20 && c != '"' && c != '\\') {
      *out++ = c;
      continue;
    }
    *out++ = '\\';
    switch (c) {
      case '"': *out++ = '"'; break;
      case '\\': *out++ = '\\'; break;
      case '\b': *out++ = 'b'; break;
      case '\f': *out++ = 'f'; break;
      case '\n': *out++ = 'n'; break;
      case '\r': *out++ = 'r'; break;
      case '\t': *out++ = 't'; break;
      default:
        memcpy(out, "u00", 3);
        out[3] = (uint8_t)hex[c >> 4];
        out[4] = (uint8_t)hex[c & 0xf];
        out += 5;
    }
  }
  return (size_t)(out - start);
}

size_t json_write_u64(uint8_t *out, uint64_t value) {
  uint8_t digits[20];
  size_t len = 0;
  do {
    digits[len++] = (uint8_t)('0' + value % 10);
    value /= 10;
  } while (value);
  for (size_t i = 0; i < len; i++) out[i] = digits[len - 1 - i];
  return len;
}
