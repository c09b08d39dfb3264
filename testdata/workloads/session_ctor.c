// session_ctor: allocates in a constructor, before main, then in main; with
// "sleep" it then waits for a signal.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *volatile sink;

__attribute__((constructor)) static void early(void) {
	sink = malloc(7777); // leaked on purpose: seen only if tracing starts before main
}

int main(int argc, char **argv) {
	for (int i = 0; i < 10; i++) {
		sink = malloc(4321);
		free(sink);
	}
	if (argc > 1 && strcmp(argv[1], "sleep") == 0) {
		printf("sleeping\n");
		fflush(stdout);
		pause();
	}
	if (argc > 1 && strcmp(argv[1], "exit") == 0)
		return atoi(argv[2]);
	return 0;
}
