// session_steps: a process that allocates on command, for session tests.
//
// It prints "ready" and then, for each line read from stdin:
//   "a N S"  makes N allocations of S bytes (kept), prints "ok"
//   "f"      frees everything kept, prints "ok"
//   EOF      exits 0
// Every pointer goes through a volatile sink so GCC keeps each call.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *volatile sink;
static void *kept[1 << 16];
static int nkept;

__attribute__((noinline)) static void *step_alloc(size_t size) {
	void *p = malloc(size);
	sink = p;
	return p;
}

int main(void) {
	char line[128];
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		int n;
		size_t size;
		if (sscanf(line, "a %d %zu", &n, &size) == 2) {
			for (int i = 0; i < n && nkept < (int)(sizeof kept / sizeof kept[0]); i++)
				kept[nkept++] = step_alloc(size);
		} else if (line[0] == 'f') {
			while (nkept > 0)
				free(kept[--nkept]);
		}
		printf("ok\n");
	}
	return 0;
}
