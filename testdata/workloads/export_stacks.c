// export_stacks: N distinct live stacks, for the benchmark of an interval
// export (bench/exportbench): block i is allocated at the end of a path of
// DEPTH calls that spells i's bits (left() for a 0, right() for a 1), so
// that each of the N blocks has a stack of its own, 2*DEPTH+2 frames deep,
// and stays live (leaked) until the program exits.
//
//   export_stacks [N [DEPTH]]     (defaults 10000 and 14)
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *volatile sink;
volatile int calls;
static void **blocks;

void step(int level, unsigned path, size_t size, int i);

__attribute__((noinline)) void left(int level, unsigned path, size_t size, int i) {
	step(level, path, size, i);
	calls++; // not a tail call: the frame stays on the stack
}

__attribute__((noinline)) void right(int level, unsigned path, size_t size, int i) {
	step(level, path, size, i);
	calls++;
}

__attribute__((noinline)) void step(int level, unsigned path, size_t size, int i) {
	if (level == 0) {
		blocks[i] = malloc(size);
		sink = blocks[i];
		return;
	}
	if (path & 1)
		right(level - 1, path >> 1, size, i);
	else
		left(level - 1, path >> 1, size, i);
	calls++;
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 10000;
	int depth = argc > 2 ? atoi(argv[2]) : 14;
	if (n <= 0 || depth <= 0 || depth > 30 || (depth < 30 && n > (1 << depth)))
		_exit(2);
	blocks = calloc((size_t)n, sizeof *blocks);
	for (int i = 0; i < n; i++)
		step(depth, (unsigned)i, 16 + (size_t)(i % 64) * 16, i);
	write(1, "done\n", 5);
	return 0;
}
