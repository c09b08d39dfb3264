// ebpf_lname: a traced process that names a FIFO to its dynamic loader's
// debugger interface, for the tests of what heapscope opens.
//
//   ebpf_lname LIBRARY FIFO
//
// It loads LIBRARY (dlopen), prints "ready" and waits for a line on stdin
// (the tracer attaches meanwhile). It then makes FIFO (mkfifo), points the
// library's link_map l_name at it, and loads libm.so.6: the loader
// announces its list again, naming the FIFO where the library was. Then it
// allocates, prints "done" and waits for a line before it exits.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

void *volatile sink;

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
	setvbuf(stdout, NULL, _IONBF, 0);
	void *h = dlopen(argv[1], RTLD_NOW);
	struct link_map *lm = NULL;
	if (!h || dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || !lm) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	printf("ready\n");
	wait_line();
	if (mkfifo(argv[2], 0600) != 0) {
		perror("mkfifo");
		return 1;
	}
	lm->l_name = argv[2];
	if (!dlopen("libm.so.6", RTLD_NOW)) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	for (int i = 0; i < 100; i++)
		sink = malloc(100 + i);
	printf("done\n");
	wait_line();
	return 0;
}
