/* How much of a file's page cache is made of large folios: maps the first
 * 64 MiB of FILE, touches every page, and looks each one up in
 * /proc/self/pagemap and /proc/kpageflags (root only).
 *
 *     folios FILE
 *
 * Prints pages mapped, present, and part of a large folio. The kernel's
 * page-cache read path does per-folio work, so a file cached in 4 KiB pages
 * reads slower than one cached in large folios (docs/performance.md). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define KPF_COMPOUND_HEAD 15
#define KPF_COMPOUND_TAIL 16

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: folios FILE\n");
		return 2;
	}
	int fd = open(argv[1], O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
		perror(argv[1]);
		return 1;
	}
	size_t len = st.st_size < (64 << 20) ? (size_t)st.st_size : (64 << 20);
	const volatile uint8_t *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	int pm = open("/proc/self/pagemap", O_RDONLY);
	int kf = open("/proc/kpageflags", O_RDONLY);
	if (p == MAP_FAILED || pm < 0 || kf < 0) {
		perror("mmap, pagemap or kpageflags (root only)");
		return 1;
	}
	unsigned sum = 0;
	for (size_t i = 0; i < len; i += 4096)
		sum += p[i];
	size_t pages = (len + 4095) / 4096, present = 0, large = 0;
	for (size_t i = 0; i < pages; i++) {
		uint64_t e = 0, flags = 0;
		if (pread(pm, &e, 8, (off_t)(((uintptr_t)p / 4096 + i) * 8)) != 8 || !(e >> 63))
			continue;
		present++;
		uint64_t pfn = e & ((1ull << 55) - 1);
		if (pread(kf, &flags, 8, (off_t)(pfn * 8)) == 8 &&
		    (flags & ((1ull << KPF_COMPOUND_HEAD) | (1ull << KPF_COMPOUND_TAIL))))
			large++;
	}
	printf("%zu pages mapped, %zu present, %zu in large folios (checksum %u)\n", pages, present,
	       large, sum);
	return 0;
}
