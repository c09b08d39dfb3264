// private_alloc: a program with an allocator linked in under names of its
// own, as Rust's jemallocator (_rjem_malloc) or Redis (je_malloc) have: the
// preload provider's launch warns of it. Built with -DNAME=the function to
// define (e.g. _rjem_malloc, je_malloc), or without it as the plain program
// that draws no warning.
//
//   private_alloc N: allocates and frees N blocks through it
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

void *volatile sink; // keeps GCC from deleting the pairs

#ifdef NAME
// a bump allocator: enough for a program that frees nothing it needs back
static char arena[1 << 20];
static size_t used;

__attribute__((noinline, used)) void *NAME(size_t n)
{
	n = (n + 15) & ~(size_t)15;
	if (n > sizeof arena - used)
		return NULL;
	used += n;
	return arena + used - n;
}
#define ALLOC NAME
#define FREE(p) ((void)(p))
#else
#define ALLOC malloc
#define FREE free
#endif

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 10;
	for (long i = 0; i < n; i++) {
		void *p = ALLOC(32);
		sink = p;
		FREE(p);
	}
	printf("done %ld\n", n);
	return 0;
}
