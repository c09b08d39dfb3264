// ebpf_dlopen: leaks from main's own functions (1111 bytes), then from a
// library loaded with dlopen (ebpf_dlopenlib: 2222 bytes from its
// constructor, 3333 from lib_work), each once, so that each site's stack is
// its first allocation's. Built with frame pointers; the library without.
//
//   ebpf_dlopen LIBRARY
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

void *volatile sink;

__attribute__((noinline)) void main_site(size_t n) { sink = malloc(n); }

__attribute__((noinline)) void main_mid(size_t n)
{
	main_site(n);
	__asm__ volatile("" ::: "memory"); // not a tail call
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	main_mid(1111);
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	void (*work)(size_t) = (void (*)(size_t))dlsym(h, "lib_work");
	if (!work)
		return 1;
	work(3333);
	return 0;
}
