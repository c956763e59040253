/* Facts taken from tar headers exactly as upstream derives them, since the
 * index's key hashes are computed from them (spec §4.1, §7). */
#include <locale.h>
#include <pthread.h>
#include <string.h>
#include <wctype.h>
#include <xxhash.h>

#include "tx.h"

size_t tx_field_len(const uint8_t *p, size_t max)
{
	const uint8_t *z = memchr(p, 0, max);
	return z ? (size_t)(z - p) : max;
}

bool tx_block_is_zero(const uint8_t *p)
{
	for (size_t i = 0; i < TX_BLOCK; i++)
		if (p[i])
			return false;
	return true;
}

/* Length of the well-formed UTF-8 sequence at p, or the length of its
 * longest valid prefix negated (at least -1): Python's decoder replaces
 * each maximal ill-formed prefix by one U+FFFD. */
static long utf8_step(const uint8_t *p, size_t n)
{
	uint8_t c = p[0];
	if (c < 0x80)
		return 1;
	size_t need;
	uint8_t lo = 0x80, hi = 0xBF;
	if (c >= 0xC2 && c <= 0xDF) {
		need = 1;
	} else if (c >= 0xE0 && c <= 0xEF) {
		need = 2;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		need = 3;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else {
		return -1;
	}
	size_t j = 1;
	for (; j <= need; j++) {
		if (j >= n || p[j] < lo || p[j] > hi)
			return -(long)j;
		lo = 0x80;
		hi = 0xBF;
	}
	return (long)j;
}

bool tx_utf8_valid(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len;) {
		long k = utf8_step(p + i, len - i);
		if (k < 0)
			return false;
		i += (size_t)k;
	}
	return true;
}

/* Decodes with replacement into out (room for 3*len bytes). */
static size_t utf8_replace(const uint8_t *p, size_t len, uint8_t *out)
{
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		long k = utf8_step(p + i, len - i);
		if (k > 0) {
			memcpy(out + o, p + i, (size_t)k);
			o += (size_t)k;
			i += (size_t)k;
		} else {
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i += (size_t)-k;
		}
	}
	return o;
}

static locale_t utf8_locale;
static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;

static void utf8_locale_init(void)
{
	utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

static size_t put_utf8(uint32_t cp, uint8_t *o)
{
	if (cp < 0x80) {
		o[0] = (uint8_t)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (uint8_t)(0xC0 | cp >> 6);
		o[1] = (uint8_t)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (uint8_t)(0xE0 | cp >> 12);
		o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (uint8_t)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (uint8_t)(0xF0 | cp >> 18);
	o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (uint8_t)(0x80 | (cp & 0x3F));
	return 4;
}

/* Python's str.lower() over valid UTF-8, as far as the C library's Unicode
 * tables go; U+0130 is Python's one multi-character lowercase mapping. */
static size_t utf8_lower(const uint8_t *p, size_t len, uint8_t *out)
{
	pthread_once(&utf8_once, utf8_locale_init);
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		uint8_t c = p[i];
		if (c < 0x80) {
			out[o++] = (uint8_t)(c >= 'A' && c <= 'Z' ? c + 32 : c);
			i++;
			continue;
		}
		size_t k = (size_t)utf8_step(p + i, len - i);
		uint32_t cp = k == 2 ? (uint32_t)(c & 0x1F) : k == 3 ? (uint32_t)(c & 0x0F) : (uint32_t)(c & 0x07);
		for (size_t j = 1; j < k; j++)
			cp = cp << 6 | (p[i + j] & 0x3F);
		i += k;
		if (cp == 0x130) {
			memcpy(out + o, "i\xCC\x87", 3);
			o += 3;
			continue;
		}
		if (utf8_locale)
			cp = (uint32_t)towlower_l((wint_t)cp, utf8_locale);
		o += put_utf8(cp, out + o);
	}
	return o;
}

void tx_key_from(const uint8_t *name, size_t len, struct tx_key *k)
{
	/* decoding at most triples the bytes and lowercasing grows them by at
	 * most half, so the buffers fit the key of this many bytes */
	const size_t room = sizeof k->stem / 5;
	k->cut = len > room;
	if (k->cut)
		len = room;
	uint8_t text[3 * sizeof k->stem / 5];
	size_t n = utf8_replace(name, len, text);
	size_t base = n;
	while (base > 0 && text[base - 1] != '/')
		base--;
	const uint8_t *dot = memchr(text + base, '.', n - base);
	size_t stem_end = dot ? (size_t)(dot - text) : n;
	k->stem_len = stem_end - base;
	memcpy(k->stem, text + base, k->stem_len);
	k->ext_len = dot ? utf8_lower(dot + 1, n - stem_end - 1, k->ext) : 0;
	k->hash = XXH64(k->stem, k->stem_len, 0);
}

int tx_hdr_size(const uint8_t *hdr, uint64_t *size)
{
	return tx_num(hdr + 124, 12, size);
}

bool tx_hdr_checksum_ok(const uint8_t *hdr)
{
	uint64_t want = 0;
	size_t n = tx_field_len(hdr + 148, 8), i = 0;
	while (i < n && hdr[148 + i] == ' ')
		i++;
	bool any = false;
	for (; i < n && hdr[148 + i] >= '0' && hdr[148 + i] <= '7'; i++, any = true)
		want = want << 3 | (uint64_t)(hdr[148 + i] - '0');
	if (!any)
		return false;
	/* the field counts as spaces; a plain loop the compiler vectorizes,
	 * since every member check sums its header */
	uint32_t u = 8 * ' ', high = 0;
	for (size_t k = 0; k < TX_BLOCK; k++)
		u += hdr[k];
	for (size_t k = 148; k < 156; k++)
		u -= hdr[k];
	if (want == u)
		return true;
	/* some old writers summed signed chars */
	for (size_t k = 0; k < TX_BLOCK; k++)
		high += hdr[k] >> 7;
	for (size_t k = 148; k < 156; k++)
		high -= hdr[k] >> 7;
	return (int64_t)want == (int64_t)u - 256 * (int64_t)high;
}
