// preload_wait: allocations in phases, driven by stdin, for tests that act
// on a running process (kill it, flush, change stacks, close the session).
//
//   preload_wait N [spawn]
//
// Each phase mallocs N blocks of 48 bytes (site_phase), keeps them, prints
// "phase DONE" and reads a line; at EOF it exits. With "spawn", after stdin
// closes it mallocs once more and runs /usr/bin/env, whose output shows what
// its children inherit.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *volatile sink;

__attribute__((noinline)) void site_phase(long n)
{
	for (long i = 0; i < n; i++)
		sink = malloc(48);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	long n = atol(argv[1]);
	char line[64];
	for (int phase = 1;; phase++) {
		site_phase(n);
		printf("phase %d\n", phase);
		fflush(stdout);
		if (!fgets(line, sizeof line, stdin))
			break;
	}
	if (argc > 2 && strcmp(argv[2], "spawn") == 0) {
		sink = malloc(64);
		fflush(stdout);
		execl("/usr/bin/env", "env", (char *)NULL);
		return 127;
	}
	return 0;
}
