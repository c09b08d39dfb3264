// preload_prefree: frees a block the tracer never saw allocated: one that
// __libc_malloc handed out directly, past the interposer.
#include <stdio.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t);

int main(void)
{
	void *p = __libc_malloc(100);
	printf("block %#lx\n", (unsigned long)p);
	fflush(stdout);
	free(p);
	return 0;
}
