/* JSON and text rendering rules shared by every view (docs/design.md §3.4). */
#ifndef SF_JSON_H
#define SF_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "sf_buf.h"

/* A JSON string from arbitrary bytes: invalid UTF-8 becomes U+FFFD. */
json_t *sf_json_bytes_as_text(const void *p, size_t len);
/* An unsigned 64-bit number: a JSON integer, or decimal text above
 * INT64_MAX (jansson's integers are signed). */
json_t *sf_json_u64(uint64_t v);
/* A JSON number, or the strings "NaN", "Infinity", "-Infinity". */
json_t *sf_json_real(double d);
/* Standard padded base64 of bytes, as a JSON string. */
json_t *sf_json_base64(const void *p, size_t len);
/* Appends base64 of p to s. */
void sf_base64_add(struct sf_str *s, const void *p, size_t len);
/* Length of the valid UTF-8 sequence at p (1-4; n > 0 bytes available), or
 * 0 if it is not valid (overlong, surrogate, beyond U+10FFFF, truncated). */
size_t sf_utf8_seq(const uint8_t *p, size_t n);
/* Appends bytes to s with invalid UTF-8 replaced by U+FFFD. */
void sf_utf8_sanitize_add(struct sf_str *s, const void *p, size_t len);
/* At most the heap jansson takes to parse these bytes (json_loadb), found
 * by one pass that allocates nothing: a few hundred bytes per object or
 * array, about a hundred per member or string, and the strings' bytes. A
 * JSON file may take some 80 times its size once parsed, so a parse a
 * file can make long is charged this much first (sf_cache_charge). */
uint64_t sf_json_parse_cost(const void *p, size_t len);
/* Serialises j (compact, keys in insertion order, UTF-8 kept as is) and
 * appends it to s; `newline` adds '\n'. Returns 0 or -ENOMEM. */
int sf_json_add(struct sf_str *s, const json_t *j, int newline);
/* Serialises j pretty-printed (2-space indent) with a final newline into a
 * new buffer. */
struct sf_buf *sf_json_pretty(const json_t *j);
/* The same with every non-ASCII character as \uXXXX (zarr v2 reads its
 * metadata documents as ASCII). */
struct sf_buf *sf_json_pretty_ascii(const json_t *j);
/* Appends a numpy .npy (format 1.0) header for a C-order array of `descr`
 * ("<f4", "|u1", or a structured dtype's list literal such as
 * "[('id', '<u8'), ('v', '<f4', (3,))]") and `shape` (ndim 0 = scalar), padded so that the data
 * starts at a multiple of 64 bytes. Returns 0 or -ENOMEM. */
int sf_npy_header(struct sf_str *s, const char *descr, const uint64_t *shape, size_t ndim);
/* Shortest decimal text that reads back as the same float32. */
void sf_fmt_f32(char out[32], float f);

#endif
