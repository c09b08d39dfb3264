// ebpf_stacks: allocations from many distinct stacks, in rounds, for the
// eBPF provider's tests of the stack map.
//
//   ebpf_stacks ROUNDS PER_ROUND
//
// It prints "ready" and waits for a line on stdin (the tracer attaches
// meanwhile). Each round then makes PER_ROUND allocations of 24 bytes, the
// k-th of all from a stack of its own: a chain of 16 calls, each to one of
// two functions as bit i of k says, under main. It prints "round R" after
// each round and waits for a line, and "done" after the last (then waits
// for a line before it exits). The blocks stay allocated.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEPTH 16
#define NOINLINE __attribute__((noinline))

void *volatile sink;
static void *keep[1 << 20];
static int kept;

NOINLINE static void step0(unsigned k, int d);
NOINLINE static void step1(unsigned k, int d);

NOINLINE static void leaf(void)
{
	void *p = malloc(24);
	sink = p;
	if (kept < (int)(sizeof keep / sizeof keep[0]))
		keep[kept++] = p;
}

// Each calls the next by bit d of k, and leaf at the end: a call in the
// middle of the function, so that neither is a tail call.
NOINLINE static void step0(unsigned k, int d)
{
	if (d == DEPTH)
		leaf();
	else if (k >> d & 1)
		step1(k, d + 1);
	else
		step0(k, d + 1);
	__asm__ volatile("" ::: "memory");
}

NOINLINE static void step1(unsigned k, int d)
{
	if (d == DEPTH)
		leaf();
	else if (k >> d & 1)
		step1(k, d + 1);
	else
		step0(k, d + 1);
	__asm__ volatile("" ::: "memory");
}

static void wait_line(void)
{
	char line[64];
	if (!fgets(line, sizeof line, stdin))
		exit(1);
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	int rounds = atoi(argv[1]), per = atoi(argv[2]);
	setvbuf(stdout, NULL, _IONBF, 0);
	printf("ready\n");
	wait_line();
	unsigned k = 0;
	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < per; i++)
			step0(k++, 0);
		if (r + 1 < rounds) {
			printf("round %d\n", r);
			wait_line();
		}
	}
	printf("done\n");
	wait_line();
	return 0;
}
