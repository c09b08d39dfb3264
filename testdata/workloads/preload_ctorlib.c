// preload_ctorlib: a shared library whose constructor allocates, linked
// into preload_ctor (before main) and dlopen'd by preload_dlopen (later).
#include <stdlib.h>

void *volatile lib_sink;
volatile long lib_calls; // code after each call: no tail calls

__attribute__((noinline)) void lib_site(long n)
{
	lib_sink = malloc(n);
	lib_calls++;
}

__attribute__((constructor)) static void lib_ctor(void)
{
	lib_site(2222);
	lib_calls++;
}

// lib_work allocates n bytes from inside the library.
void lib_work(long n)
{
	lib_site(n);
	lib_calls++;
}
