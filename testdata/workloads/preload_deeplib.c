// preload_deeplib: a shared library that preload_deepbind opens with
// RTLD_DEEPBIND, which binds its malloc and free to the C library's first.
#include <stdlib.h>
#include <string.h>

void *volatile deep_sink;

// deep_work returns a block the C library allocated for it (strdup), and
// mallocs and frees a block of 7777 bytes itself.
__attribute__((noinline)) char *deep_work(void)
{
	deep_sink = malloc(7777);
	free(deep_sink);
	return strdup("allocated by the C library for a deep-bound library");
}

__attribute__((noinline)) void deep_free(char *s) { free(s); }
