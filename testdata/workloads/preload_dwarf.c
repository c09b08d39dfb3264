// preload_dwarf: main -> site_a -> site_b -> malloc, meant to be built with
// -O2 -fomit-frame-pointer: only DWARF unwinding recovers the whole chain.
#include <stdio.h>
#include <stdlib.h>

void *volatile sink;
volatile long depth;

__attribute__((noinline)) long site_b(long n)
{
	void *p = malloc(n);
	sink = p;
	return depth + 1; // work after the call: no tail call
}

__attribute__((noinline)) long site_a(long n)
{
	long r = site_b(n + 1);
	depth = r;
	return r + 1;
}

int main(int argc, char **argv)
{
	long r = 0;
	for (int i = 0; i < 3; i++)
		r += site_a(4096 + argc);
	return r == 0;
}
