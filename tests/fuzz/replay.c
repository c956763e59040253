/* Feeds every regular file under the directories named on the command line
 * to a fuzz target's LLVMFuzzerTestOneInput, the way libFuzzer would replay
 * them, so crash inputs kept in tests/fuzz/regressions/ stay fixed in builds
 * without libFuzzer. Directories that do not exist are skipped; finding no
 * input at all is a failure, so the test cannot pass by replaying nothing. */
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t replayed;

static int replay_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	if (type != FTW_F)
		return 0;
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return 1;
	}
	size_t cap = (size_t)st->st_size + 1, n = 0;
	uint8_t *buf = malloc(cap);
	if (!buf) {
		fclose(f);
		return 1;
	}
	n = fread(buf, 1, cap, f);
	fclose(f);
	fprintf(stderr, "replay %s (%zu bytes)\n", path, n);
	LLVMFuzzerTestOneInput(buf, n);
	free(buf);
	replayed++;
	return 0;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0)
			continue;
		if (nftw(argv[i], replay_one, 16, FTW_PHYS))
			return 1;
	}
	printf("%zu inputs replayed\n", replayed);
	return replayed ? 0 : 1;
}
