/* shardfs-verify: run the full integrity check of containers (the view's
 * .shardfs/verify) without mounting anything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool_common.h"

static void usage(FILE *to)
{
	fputs("usage: shardfs-verify [--quiet] FILE...\n"
	      "\n"
	      "Checks every CRC, fingerprint and bound of each FILE, as reading\n"
	      ".shardfs/verify in the mount does, and prints the report with each line\n"
	      "prefixed by the file's name: first `status: ok` or `status: failed`, then\n"
	      "one finding per line. --quiet prints only the reports of files that fail.\n"
	      "Exits 0 when every file verifies, 1 when any fails or cannot be opened,\n"
	      "2 on a bad command line.\n",
	      to);
}

/* Verifies one file; returns 0 when its report starts with "status: ok". */
static int verify(const char *path, bool quiet)
{
	struct shardfs *h;
	if (shardfs_open(path, &h) < 0) {
		printf("%s: status: failed\n%s: %s\n", path, path, shardfs_last_error());
		return 1;
	}
	char *report = NULL;
	size_t len = 0;
	int rc = tool_slurp("shardfs-verify", h, ".shardfs/verify", &report, &len);
	shardfs_close(h);
	if (rc) {
		printf("%s: status: failed\n%s: the check itself failed to run\n", path, path);
		return 1;
	}
	bool ok = strncmp(report, "status: ok\n", 11) == 0;
	if (!ok || !quiet)
		for (char *line = report; *line;) {
			size_t n = strcspn(line, "\n");
			printf("%s: %.*s\n", path, (int)n, line);
			line += n + (line[n] == '\n');
		}
	free(report);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	bool quiet = false;
	int first = 1;
	for (; first < argc && argv[first][0] == '-'; first++) {
		if (strcmp(argv[first], "--help") == 0 || strcmp(argv[first], "-h") == 0) {
			usage(stdout);
			return 0;
		} else if (strcmp(argv[first], "--quiet") == 0 || strcmp(argv[first], "-q") == 0) {
			quiet = true;
		} else if (strcmp(argv[first], "--") == 0) {
			first++;
			break;
		} else {
			fprintf(stderr, "shardfs-verify: unknown option %s\n", argv[first]);
			usage(stderr);
			return 2;
		}
	}
	if (first >= argc) {
		usage(stderr);
		return 2;
	}
	int status = 0;
	for (int i = first; i < argc; i++)
		status |= verify(argv[i], quiet);
	fflush(stdout);
	return status;
}
