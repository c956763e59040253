/* The machine's cost of waking a sleeping thread, which bounds every FUSE
 * round trip: a parent and a child pass one byte back and forth through two
 * pipes and the mean round trip is printed in microseconds.
 *
 *     wakeup [--poll] [ROUNDS]
 *
 * --poll makes the answering side poll its pipe instead of sleeping in
 * read(), as the daemon's request loop does. Run it under `taskset -c 0`
 * to see the round trip when both stay on one CPU. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void answer(int in, int out, long rounds, int poll_in)
{
	char c;
	if (poll_in && fcntl(in, F_SETFL, O_NONBLOCK) < 0)
		_exit(1);
	for (long i = 0; i < rounds; i++) {
		while (read(in, &c, 1) != 1)
			if (!poll_in || errno != EAGAIN)
				_exit(1);
		if (write(out, &c, 1) != 1)
			_exit(1);
	}
	_exit(0);
}

int main(int argc, char **argv)
{
	int poll_in = argc > 1 && strcmp(argv[1], "--poll") == 0;
	long rounds = argc > 1 + poll_in ? atol(argv[1 + poll_in]) : 20000;
	int there[2], back[2];
	if (rounds <= 0 || pipe(there) || pipe(back)) {
		fprintf(stderr, "usage: wakeup [--poll] [ROUNDS]\n");
		return 2;
	}
	pid_t child = fork();
	if (child < 0)
		return 1;
	if (child == 0)
		answer(there[0], back[1], rounds, poll_in);
	char c = 0;
	double t = now();
	for (long i = 0; i < rounds; i++)
		if (write(there[1], &c, 1) != 1 || read(back[0], &c, 1) != 1)
			return 1;
	t = now() - t;
	int status = 0;
	waitpid(child, &status, 0);
	printf("%.1f\n", t / (double)rounds * 1e6);
	return status == 0 ? 0 : 1;
}
