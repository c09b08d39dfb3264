// ebpf_ctor: allocates in a constructor, before main, to show that a
// program launched under tracing has its very first allocations seen.
//
//   ebpf_ctor
//
// The constructor makes CTOR_CALLS malloc calls of CTOR_SIZE bytes from
// ctor_site, keeping the blocks; main prints "ctor_site ADDR calls N size S"
// and exits with status 7.
#include <stdio.h>
#include <stdlib.h>

#define CTOR_CALLS 7
#define CTOR_SIZE 4321

void *volatile sink;
static void *kept[CTOR_CALLS];

__attribute__((noinline)) void *ctor_site(size_t n) {
	void *p = malloc(n);
	sink = p;
	return p;
}

__attribute__((constructor)) static void early(void) {
	for (int i = 0; i < CTOR_CALLS; i++)
		kept[i] = ctor_site(CTOR_SIZE);
}

int main(void) {
	printf("ctor_site %p calls %d size %d\n", (void *)ctor_site, CTOR_CALLS, CTOR_SIZE);
	return kept[0] == NULL ? 1 : 7; // 7: a status the tracer must carry
}
