// preload_realloc: a realloc that moves the block. It prints "old ADDR" and
// "new ADDR".
#include <stdio.h>
#include <stdlib.h>

void *volatile sink;

int main(void)
{
	void *p = malloc(16);
	sink = malloc(16); // sits after p, so p cannot grow in place
	void *q = realloc(p, 1 << 20);
	sink = q;
	printf("old %#lx\nnew %#lx\n", (unsigned long)p, (unsigned long)q);
	free(q);
	return 0;
}
