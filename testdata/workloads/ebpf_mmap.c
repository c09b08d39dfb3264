// ebpf_mmap: an exact, logged set of anonymous mmap, mremap and munmap
// calls, and one file mapping (not an anonymous one: not an event).
//
//   ebpf_mmap N
//
// Same protocol as ebpf_calls.c: "ready", a line, the calls, then
// "call SITE FUNC ADDR SIZE OLDADDR OLDSIZE" lines, "done", a line.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct rec {
	const char *func;
	void *addr, *old;
	size_t size, old_size;
};
static struct rec calls[4096];
static int ncalls;

static void note(const char *func, void *addr, size_t size, void *old, size_t old_size) {
	if (ncalls < 4096)
		calls[ncalls++] = (struct rec){func, addr, old, size, old_size};
}

#define RAWOUT_SIZE (1 << 20)
#include "rawout.h"

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 4;
	long page = sysconf(_SC_PAGESIZE);
	int fd = open("/proc/self/exe", O_RDONLY);
	ready();
	for (int i = 0; i < n; i++) {
		size_t len = (i + 1) * page;
		void *p = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		note("mmap", p == MAP_FAILED ? 0 : p, len, 0, 0);
		void *q = mremap(p, len, 2 * len, MREMAP_MAYMOVE);
		note("mremap", q == MAP_FAILED ? 0 : q, 2 * len, p, len);
		if (munmap(q, 2 * len) == 0)
			note("munmap", q, 2 * len, 0, 0);
		void *f = mmap(0, page, PROT_READ, MAP_PRIVATE, fd, 0); // a file: not an event
		if (f != MAP_FAILED && munmap(f, page) == 0)
			note("munmap", f, page, 0, 0);
	}
	for (int i = 0; i < ncalls; i++) {
		puts_("call mmap_site ");
		puts_(calls[i].func);
		hex((uintptr_t)calls[i].addr);
		hex(calls[i].size);
		hex((uintptr_t)calls[i].old);
		hex(calls[i].old_size);
		puts_("\n");
	}
	done();
	return 0;
}
