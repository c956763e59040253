/* The daemon's command line: sizes, options, and refusals. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "options.h"

static int parse(struct options *o, int argc, const char **argv)
{
	int rc = options_parse(argc, (char **)argv, o);
	return rc;
}

int main(void)
{
	uint64_t v = 0;
	CHECK(parse_size("0", &v) == 0 && v == 0);
	CHECK(parse_size("4096", &v) == 0 && v == 4096);
	CHECK(parse_size("64K", &v) == 0 && v == 65536);
	CHECK(parse_size("512M", &v) == 0 && v == 512ull << 20);
	CHECK(parse_size("2G", &v) == 0 && v == 2ull << 30);
	CHECK(parse_size("2GiB", &v) == 0 && v == 2ull << 30);
	CHECK(parse_size("3MB", &v) == 0 && v == 3ull << 20);
	CHECK(parse_size("", &v) < 0);
	CHECK(parse_size("-1", &v) < 0);
	CHECK(parse_size("12X", &v) < 0);
	CHECK(parse_size("99999999999999999999", &v) < 0);
	CHECK(parse_size("17179869184G", &v) < 0);

	struct options o;
	const char *a1[] = { "shardfs", "src", "mnt", "-f", "--cache-size", "1M", "--threads=3",
			     "-o", "allow_other", "-oro" };
	CHECK(parse(&o, 10, a1) == 0);
	CHECK_STR(o.src, "src");
	CHECK_STR(o.mnt, "mnt");
	CHECK(o.foreground && !o.debug);
	CHECK_EQ_U(o.cache_size, 1 << 20);
	CHECK_EQ_U(o.threads, 3);
	CHECK_STR(o.fuse_opts, "allow_other,ro");
	free(o.fuse_opts);
	CHECK_EQ_U(o.push_ahead, 0); /* off unless asked */

	const char *p1[] = { "shardfs", "src", "mnt", "--push-ahead", "64M" };
	CHECK(parse(&o, 5, p1) == 0);
	CHECK_EQ_U(o.push_ahead, 64ull << 20);
	const char *p2[] = { "shardfs", "src", "mnt", "--push-ahead=lots" };
	CHECK(parse(&o, 4, p2) != 0);

	const char *a2[] = { "shardfs", "-d", "s", "m" };
	CHECK(parse(&o, 4, a2) == 0 && o.debug && o.foreground);
	const char *a3[] = { "shardfs", "s" };
	CHECK(parse(&o, 2, a3) != 0);
	const char *a4[] = { "shardfs", "s", "m", "x" };
	CHECK(parse(&o, 4, a4) != 0);
	const char *a5[] = { "shardfs", "s", "m", "--threads", "0" };
	CHECK(parse(&o, 5, a5) != 0);
	const char *a6[] = { "shardfs", "--help" };
	CHECK(parse(&o, 2, a6) == 0 && o.help);
	const char *a7[] = { "shardfs", "s", "m", "-o" };
	CHECK(parse(&o, 4, a7) != 0);
	free(o.fuse_opts);

	/* --spin-us: default, both spellings, range, a missing value */
	const char *a8[] = { "shardfs", "s", "m" };
	CHECK(parse(&o, 3, a8) == 0 && o.spin_us == 200);
	const char *a9[] = { "shardfs", "s", "m", "--spin-us", "0" };
	CHECK(parse(&o, 5, a9) == 0 && o.spin_us == 0);
	const char *a10[] = { "shardfs", "s", "m", "--spin-us=50" };
	CHECK(parse(&o, 4, a10) == 0 && o.spin_us == 50);
	const char *a11[] = { "shardfs", "s", "m", "--spin-us=100001" };
	CHECK(parse(&o, 4, a11) != 0);
	const char *a12[] = { "shardfs", "s", "m", "--spin-us" };
	CHECK(parse(&o, 4, a12) != 0);
	const char *a13[] = { "shardfs", "s", "m", "--spin-us=" };
	CHECK(parse(&o, 4, a13) != 0);
	const char *a14[] = { "shardfs", "s", "m", "--spin-usx" };
	CHECK(parse(&o, 4, a14) != 0);
	const char *a15[] = { "shardfs", "s", "m", "--threads=2x" };
	CHECK(parse(&o, 4, a15) != 0);
	/* --index-dir: none by default, a directory name, never empty */
	CHECK(parse(&o, 3, a8) == 0 && !o.index_dir);
	const char *a16[] = { "shardfs", "s", "m", "--index-dir", "/idx" };
	CHECK(parse(&o, 5, a16) == 0 && o.index_dir && strcmp(o.index_dir, "/idx") == 0);
	const char *a17[] = { "shardfs", "s", "m", "--index-dir=" };
	CHECK(parse(&o, 4, a17) != 0);
	/* --io-uring: /dev/fuse by default, each mode, nothing else */
	CHECK(parse(&o, 3, a8) == 0 && o.io_uring == IO_URING_OFF);
	const char *a18[] = { "shardfs", "s", "m", "--io-uring", "auto" };
	CHECK(parse(&o, 5, a18) == 0 && o.io_uring == IO_URING_AUTO);
	const char *a19[] = { "shardfs", "s", "m", "--io-uring=on" };
	CHECK(parse(&o, 4, a19) == 0 && o.io_uring == IO_URING_ON);
	const char *a20[] = { "shardfs", "s", "m", "--io-uring", "yes" };
	CHECK(parse(&o, 5, a20) != 0);
	/* --readdirplus: small by default, each mode, nothing else */
	CHECK(parse(&o, 3, a8) == 0 && o.readdirplus == RDP_SMALL);
	const char *r1[] = { "shardfs", "s", "m", "--readdirplus", "auto" };
	CHECK(parse(&o, 5, r1) == 0 && o.readdirplus == RDP_AUTO);
	const char *r2[] = { "shardfs", "s", "m", "--readdirplus=always" };
	CHECK(parse(&o, 4, r2) == 0 && o.readdirplus == RDP_ALWAYS);
	const char *r3[] = { "shardfs", "s", "m", "--readdirplus", "small" };
	CHECK(parse(&o, 5, r3) == 0 && o.readdirplus == RDP_SMALL);
	const char *r4[] = { "shardfs", "s", "m", "--readdirplus", "never" };
	CHECK(parse(&o, 5, r4) != 0);
	/* --max-nodes: default, a value, the range */
	CHECK(parse(&o, 3, a8) == 0 && o.max_nodes == 131072);
	const char *a21[] = { "shardfs", "s", "m", "--max-nodes", "2000" };
	CHECK(parse(&o, 5, a21) == 0 && o.max_nodes == 2000);
	const char *a22[] = { "shardfs", "s", "m", "--max-nodes=15" };
	CHECK(parse(&o, 4, a22) != 0);
	/* no-open by default; --open turns it off, --no-open still says it,
	 * the last one given wins */
	CHECK(parse(&o, 3, a8) == 0 && o.no_open);
	const char *a23[] = { "shardfs", "s", "m", "--open" };
	CHECK(parse(&o, 4, a23) == 0 && !o.no_open);
	const char *a24[] = { "shardfs", "s", "m", "--open", "--no-open" };
	CHECK(parse(&o, 5, a24) == 0 && o.no_open);
	CHECK_DONE();
}
