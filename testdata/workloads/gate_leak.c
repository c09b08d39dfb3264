// gate_leak: a program for the CI gate's tests.
//
//   gate_leak [fixed] [status N] [grow]
//
// It builds a list of 64 nodes of 256 bytes and drops it (a leak of 16 KiB,
// definitely and indirectly lost), keeps a table in a global (still
// reachable), and exits with status N (default 0). "fixed" frees the list
// first. "grow" then allocates 4 KiB every millisecond for half a second and
// keeps each (a heap that keeps growing), before the exit.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct node {
	struct node *next;
	char pad[248];
};

void *volatile keep;
void *volatile grown[1000];

__attribute__((noinline)) static struct node *build(int n)
{
	struct node *head = NULL;
	for (int i = 0; i < n; i++) {
		struct node *x = calloc(1, sizeof *x);
		x->next = head;
		head = x;
	}
	return head;
}

int main(int argc, char **argv)
{
	int fixed = 0, status = 0, grow = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "fixed") == 0)
			fixed = 1;
		else if (strcmp(argv[i], "grow") == 0)
			grow = 1;
		else if (strcmp(argv[i], "status") == 0 && i + 1 < argc)
			status = atoi(argv[++i]);
	}
	keep = malloc(1000);
	struct node *volatile list = build(64);
	if (fixed) {
		while (list) {
			struct node *n = list->next;
			free(list);
			list = n;
		}
	}
	list = NULL;
	if (grow)
		for (int i = 0; i < 500; i++) {
			grown[i] = malloc(4096);
			memset(grown[i], 1, 4096);
			usleep(1000);
		}
	return status;
}
