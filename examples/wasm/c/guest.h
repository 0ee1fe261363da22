/* What both C guests share on top of the generated bindings (processor.h, made by
 * `wit-bindgen c` at build time).
 *
 * Ownership, by the wit-bindgen C rules: the arguments of an export (the record, the config)
 * belong to the guest, which frees them; a list an import returns (state-get) belongs to the
 * guest too; the arguments the guest passes to an import stay its own; an error an export
 * returns is freed by the bindings after the call (with free), so it must be malloc'd. */
#ifndef STREAMKEEPER_GUEST_H
#define STREAMKEEPER_GUEST_H

#include "processor.h"

#include <string.h>

/* Fails the record with `reason`: it goes to the dead-letter topic and the call leaves no trace. */
static inline bool refuse(processor_failure_t *err, const char *reason) {
  err->tag = STREAMKEEPER_PROCESSOR_TYPES_FAILURE_BAD_RECORD;
  processor_string_dup(&err->val.bad_record, reason);
  return false;
}

/* The bytes of a string, as the host's functions take them (no copy). */
static inline processor_list_u8_t bytes_of(const processor_string_t *text) {
  return (processor_list_u8_t){text->ptr, text->len};
}

#endif
