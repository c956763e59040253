/* Names taken from inside files, escaped for a directory (docs/design.md
 * §3.3): `%`, `/`, `\`, 0x00-0x1F, 0x7F become %XX; a result over
 * SF_NAME_MAX bytes is cut. */
#ifndef SF_NAME_H
#define SF_NAME_H

#include <stddef.h>
#include <stdint.h>

#define SF_NAME_MAX 255

/* Escapes `raw` into `out` (at least SF_NAME_MAX+1 bytes), cutting the
 * result at `max` bytes (255, or less where a sibling name adds a suffix):
 * the first 200 bytes (never splitting %XX), "~" and 16 hex digits of
 * XXH64(raw). Does not add "#<n>". */
void sf_name_escape(const void *raw, size_t len, size_t max, char *out);
/* Reverses the escaping of %XX (for names a lookup receives). Returns the
 * raw length written to out (at most strlen(name) bytes). */
size_t sf_name_unescape(const char *name, uint8_t *out);

#endif
