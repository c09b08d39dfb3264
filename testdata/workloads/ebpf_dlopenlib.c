// ebpf_dlopenlib: the library ebpf_dlopen loads, built without frame
// pointers: a frame-pointer walk from lib_site skips lib_mid and lib_work
// (and the constructor's callers); only its unwind table finds them.
#include <stdlib.h>

void *volatile lib_sink;

__attribute__((noinline)) void lib_site(size_t n) { lib_sink = malloc(n); }

__attribute__((noinline)) void lib_mid(size_t n)
{
	lib_site(n);
	__asm__ volatile("" ::: "memory"); // not a tail call
}

void lib_work(size_t n)
{
	lib_mid(n);
	__asm__ volatile("" ::: "memory");
}

__attribute__((constructor)) static void lib_ctor(void)
{
	lib_mid(2222);
	__asm__ volatile("" ::: "memory");
}
