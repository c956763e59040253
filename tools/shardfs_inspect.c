/* shardfs-inspect: print a container's summary, the view's .shardfs/info.txt
 * (or info.json), without mounting anything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool_common.h"

static void usage(FILE *to)
{
	fputs("usage: shardfs-inspect [--json] FILE...\n"
	      "\n"
	      "Prints what the mount shows in FILE's view as .shardfs/info.txt: header\n"
	      "fields, flags and parts. With --json, prints .shardfs/info.json instead\n"
	      "(for several files, a JSON array of them in the order given).\n"
	      "Exits 1 if a file cannot be opened or summarised, 2 on a bad command line.\n",
	      to);
}

int main(int argc, char **argv)
{
	bool json = false;
	int first = 1;
	for (; first < argc && argv[first][0] == '-'; first++) {
		if (strcmp(argv[first], "--help") == 0 || strcmp(argv[first], "-h") == 0) {
			usage(stdout);
			return 0;
		} else if (strcmp(argv[first], "--json") == 0) {
			json = true;
		} else if (strcmp(argv[first], "--") == 0) {
			first++;
			break;
		} else {
			fprintf(stderr, "shardfs-inspect: unknown option %s\n", argv[first]);
			usage(stderr);
			return 2;
		}
	}
	int nfiles = argc - first;
	if (nfiles < 1) {
		usage(stderr);
		return 2;
	}
	bool array = json && nfiles > 1;
	int status = 0, printed = 0;
	if (array)
		fputs("[\n", stdout);
	for (int i = first; i < argc; i++) {
		struct shardfs *h;
		char *text = NULL;
		size_t len = 0;
		if (shardfs_open(argv[i], &h) < 0) {
			fprintf(stderr, "shardfs-inspect: %s\n", shardfs_last_error());
			status = 1;
			continue;
		}
		int rc = tool_slurp("shardfs-inspect", h, json ? ".shardfs/info.json" : ".shardfs/info.txt",
				    &text, &len);
		shardfs_close(h);
		if (rc) {
			status = 1;
			continue;
		}
		if (array && printed)
			fputs(",\n", stdout);
		else if (!json && nfiles > 1)
			printf("%s==> %s <==\n", printed ? "\n" : "", argv[i]);
		fwrite(text, 1, len, stdout);
		printed++;
		free(text);
	}
	if (array)
		fputs("]\n", stdout);
	return status;
}
