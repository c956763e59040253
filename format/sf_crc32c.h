/* CRC32C (Castagnoli), as used by the tsumugi and tatami containers. */
#ifndef SF_CRC32C_H
#define SF_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continues a CRC: pass 0 to start. Pre/post inversion is handled inside, so
 * sf_crc32c(sf_crc32c(0, a, n), b, m) == sf_crc32c(0, ab, n+m). */
uint32_t sf_crc32c(uint32_t crc, const void *data, size_t len);

#endif
