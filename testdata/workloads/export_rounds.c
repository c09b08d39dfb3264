// export_rounds: allocations in rounds that a test paces, whose totals and
// leaks per function are known exactly, for the tests of a session's
// interval exports (heapscope run/attach --export).
//
//   export_rounds ROUNDS
//
// It prints "ready" and, for each round, reads a line from standard input,
// makes the round's allocations and prints "round N done"; then it reads one
// more line and exits (so that its live heap can be looked at). Each round:
//
//   leak_site:   2 blocks of 1000 bytes, never freed        (2 objects, 2000 bytes)
//   churn_site:  100 malloc(64)+free pairs, 50 by main and 50 by a thread of
//                its own (the same function, two stacks)   (100 objects, 6400 bytes)
//   grow_site:   malloc(100), realloc'd to 5000, then freed (2 calls, 5100 bytes)
//
// Nothing uses stdio but the lines above (written with write(2), read with
// read(2)): the C library allocates no buffers of its own.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *volatile sink; // keeps GCC from deleting the malloc/free pairs

__attribute__((noinline)) void leak_site(void) {
	sink = malloc(1000);
}

__attribute__((noinline)) void churn_site(void) {
	void *p = malloc(64);
	sink = p;
	free(p);
}

__attribute__((noinline)) void grow_site(void) {
	void *p = malloc(100);
	sink = p;
	p = realloc(p, 5000);
	sink = p;
	free(p);
}

static void *churner(void *arg) {
	(void)arg;
	for (int i = 0; i < 50; i++)
		churn_site();
	return NULL;
}

static void say(const char *s) {
	if (write(1, s, strlen(s)) < 0)
		_exit(2);
}

// wait_line reads up to a newline (or the end of the input).
static void wait_line(void) {
	char c;
	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

int main(int argc, char **argv) {
	int rounds = argc > 1 ? atoi(argv[1]) : 3;
	say("ready\n");
	for (int r = 1; r <= rounds; r++) {
		wait_line();
		pthread_t t;
		if (pthread_create(&t, NULL, churner, NULL) != 0)
			_exit(3);
		for (int i = 0; i < 2; i++)
			leak_site();
		for (int i = 0; i < 50; i++)
			churn_site();
		grow_site();
		pthread_join(t, NULL);
		char line[32];
		snprintf(line, sizeof line, "round %d done\n", r);
		say(line);
	}
	wait_line();
	return 0;
}
