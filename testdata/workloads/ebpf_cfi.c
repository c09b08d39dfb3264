// ebpf_cfi: known leaks per function through call chains, for unwinding
// code built without frame pointers (the tests build it -O2
// -fomit-frame-pointer -fno-optimize-sibling-calls).
//
//   ebpf_cfi K
//
// It prints "ready" and waits for a line (the tracer attaches meanwhile),
// then: K times main -> top_a -> mid_a -> leak_a, which leaks 101 bytes;
// K times main -> top_b -> mid_b -> leak_b, which leaks 202 bytes (and,
// every other time, through mid_b2 instead of mid_b); K times main ->
// churn, which allocates 404 bytes and frees them. It then prints the
// address of each of these functions ("site NAME ADDR") and "done", and
// waits for a line before it exits.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

void *volatile sink;
void *kept[100000]; // not static: GCC would delete the mallocs of blocks no one reads
int nkept;

// Each function keeps a frame of its own (a volatile array) and uses it
// after its call, so that the compiler neither merges nor tail-calls.
NOINLINE void leak_a(int i) { volatile char pad[40]; pad[0] = i; kept[nkept++ % 100000] = malloc(101); pad[1] = 0; }
NOINLINE void leak_b(int i) { volatile long pad[7]; pad[0] = i; kept[nkept++ % 100000] = malloc(202); pad[1] = 0; }
NOINLINE void mid_a(int i) { volatile char pad[200]; pad[0] = i; leak_a(i); pad[1] = 0; }
NOINLINE void mid_b(int i) { volatile int pad[3]; pad[0] = i; leak_b(i); pad[1] = 0; }
NOINLINE void mid_b2(int i) { volatile char pad[1000]; pad[0] = i; leak_b(i); pad[1] = 0; }
NOINLINE void top_a(int i) { volatile long pad[20]; pad[0] = i; mid_a(i); pad[1] = 0; }
NOINLINE void top_b(int i)
{
	volatile long pad[2];
	pad[0] = i;
	if (i & 1)
		mid_b2(i);
	else
		mid_b(i);
	pad[1] = 0;
}
NOINLINE void churn(int i) { volatile char pad[16]; pad[0] = i; sink = malloc(404); free(sink); pad[1] = 0; }

static void wait_line(void)
{
	char c;
	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

int main(int argc, char **argv)
{
	int k = argc > 1 ? atoi(argv[1]) : 100;
	printf("ready\n");
	fflush(stdout);
	wait_line();
	for (int i = 0; i < k; i++) {
		top_a(i);
		top_b(i);
		churn(i);
	}
	printf("site leak_a %lx\nsite leak_b %lx\nsite mid_a %lx\nsite mid_b %lx\nsite mid_b2 %lx\n"
	       "site top_a %lx\nsite top_b %lx\nsite churn %lx\ndone\n",
	       (unsigned long)leak_a, (unsigned long)leak_b, (unsigned long)mid_a, (unsigned long)mid_b,
	       (unsigned long)mid_b2, (unsigned long)top_a, (unsigned long)top_b, (unsigned long)churn);
	fflush(stdout);
	wait_line();
	return 0;
}
