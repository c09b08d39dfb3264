// preload_phdr: one thread allocates inside dl_iterate_phdr's callback (the
// loader's lock held), as Rust's backtrace does when it lists the loaded
// objects, while another loads and unloads a library and allocates, so
// that the interposer refreshes its module list (which walks the loaded
// objects too) again and again.
//
//   preload_phdr ROUNDS
//
// It prints "callbacks N" at the end.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

void *volatile sink;
static long rounds;
static volatile long callbacks;

__attribute__((noinline)) static void site_phdr(int depth)
{
	if (depth > 0) {
		site_phdr(depth - 1); // stacks of several depths: not all cached
		sink = sink;
		return;
	}
	void *p = malloc(48);
	sink = p;
	free(p);
}

static int cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)info;
	(void)size;
	site_phdr((int)(callbacks++ % 8));
	return 0;
}

static void *lister(void *arg)
{
	(void)arg;
	for (long i = 0; i < rounds; i++)
		dl_iterate_phdr(cb, NULL);
	return NULL;
}

__attribute__((noinline)) static void site_loader(void)
{
	void *p = malloc(56);
	sink = p;
	free(p);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	rounds = atol(argv[1]);
	pthread_t t;
	if (pthread_create(&t, NULL, lister, NULL) != 0)
		return 1;
	for (long i = 0; i < rounds; i++) {
		void *h = dlopen("libpthread.so.0", RTLD_NOW | RTLD_LOCAL);
		if (h)
			dlclose(h);
		site_loader();
	}
	pthread_join(t, NULL);
	printf("callbacks %ld\n", callbacks);
	return 0;
}
