// preload_dlopen: allocations from a library loaded with dlopen after main
// started: its constructor (2222 bytes) and lib_work (5555 bytes).
//
//   preload_dlopen LIBRARY
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	void (*work)(long) = (void (*)(long))dlsym(h, "lib_work");
	if (!work)
		return 1;
	work(5555);
	return 0;
}
