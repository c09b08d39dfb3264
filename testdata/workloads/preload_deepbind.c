// preload_deepbind: opens LIB with RTLD_DEEPBIND and calls it N times.
//
//   preload_deepbind LIB N
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	char *(*work)(void) = (char *(*)(void))dlsym(h, "deep_work");
	void (*release)(char *) = (void (*)(char *))dlsym(h, "deep_free");
	if (!work || !release)
		return 1;
	long n = atol(argv[2]);
	for (long i = 0; i < n; i++)
		release(work());
	return 0;
}
