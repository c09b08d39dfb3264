// preload_ctor: allocations before main: in the constructor of a library it
// links (preload_ctorlib: 2222 bytes) and in its own constructor (1111
// bytes); then main allocates 3333 bytes, and 4444 through the library.
//
// Built with the library given before this file on the command line (and
// --no-as-needed), so lib_work is a weak reference the dynamic linker binds.
#include <stdio.h>
#include <stdlib.h>

void *volatile sink;

volatile long calls; // code after each call: no tail calls

__attribute__((noinline)) void exe_site(long n)
{
	sink = malloc(n);
	calls++;
}

__attribute__((constructor)) static void exe_ctor(void)
{
	exe_site(1111);
	calls++;
}

extern void lib_work(long n) __attribute__((weak));

int main(void)
{
	exe_site(3333);
	if (!lib_work)
		return 1;
	lib_work(4444);
	return 0;
}
