// ebpf_cxx: an exact, logged set of C++ operator new and delete calls, each
// variant from its own call site, for the eBPF provider's tests. The
// protocol is ebpf_calls.c's:
//
//   ebpf_cxx N
//
// prints "ready", waits for a line, makes the calls, prints "site NAME
// ADDR", "call SITE FUNC ADDR SIZE 0" lines and "done", waits for a line.
// FUNC is "operator new", "operator new[]", "operator delete" or
// "operator delete[]" (spaces written as '_').
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

void *volatile sink;

struct rec {
	const char *site, *func;
	void *addr;
	size_t size;
};
static rec calls[1 << 15];
static int ncalls;

static void note(const char *site, const char *func, void *addr, size_t size) {
	if (ncalls < (int)(sizeof calls / sizeof calls[0]))
		calls[ncalls++] = rec{site, func, addr, size};
}

// The call sites have C names, for the test to find their symbols.
extern "C" {

// new char[n] asks operator new[] for n bytes (char needs no array cookie).
NOINLINE void *site_new(size_t n) {
	void *p = ::operator new(n);
	note("site_new", "operator_new", p, n);
	sink = p;
	return p;
}

NOINLINE void *site_new_array(size_t n) {
	char *p = new char[n];
	note("site_new_array", "operator_new[]", p, n);
	sink = p;
	return p;
}

NOINLINE void *site_new_nothrow(size_t n) {
	void *p = ::operator new(n, std::nothrow);
	note("site_new_nothrow", "operator_new", p, n);
	sink = p;
	return p;
}

NOINLINE void *site_new_aligned(size_t n) {
	void *p = ::operator new(n, std::align_val_t(64));
	note("site_new_aligned", "operator_new", p, n);
	sink = p;
	return p;
}

NOINLINE void site_delete(void *p) {
	::operator delete(p);
	note("site_delete", "operator_delete", p, 0);
	sink = 0;
}

NOINLINE void site_delete_sized(void *p, size_t n) {
	::operator delete(p, n);
	note("site_delete_sized", "operator_delete", p, 0);
	sink = 0;
}

NOINLINE void site_delete_array(char *p) {
	delete[] p;
	note("site_delete_array", "operator_delete[]", p, 0);
	sink = 0;
}

NOINLINE void site_delete_aligned(void *p) {
	::operator delete(p, std::align_val_t(64));
	note("site_delete_aligned", "operator_delete", p, 0);
	sink = 0;
}

NOINLINE void site_delete_null() {
	::operator delete(static_cast<void *>(nullptr)); // not an event
	sink = 0;
}

NOINLINE void *site_malloc(size_t n) {
	void *p = malloc(n);
	note("site_malloc", "malloc", p, n);
	sink = p;
	return p;
}

NOINLINE void site_free(void *p) {
	free(p);
	note("site_free", "free", p, 0);
	sink = 0;
}

} // extern "C"

#define RAWOUT_SIZE (1 << 21)
#include "rawout.h"

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 10;
	ready();
	for (int i = 0; i < n; i++) {
		void *a = site_new(40 + i);
		void *b = site_new_array(100 + i);
		void *c = site_new_nothrow(24);
		void *d = site_new_aligned(256);
		void *e = site_malloc(33);
		site_delete(a);
		site_delete_array(static_cast<char *>(b));
		site_delete_sized(c, 24);
		site_delete_aligned(d);
		site_delete_null();
		site_free(e);
	}
	site("site_new", (void *)site_new);
	site("site_new_array", (void *)site_new_array);
	site("site_new_nothrow", (void *)site_new_nothrow);
	site("site_new_aligned", (void *)site_new_aligned);
	site("site_delete", (void *)site_delete);
	site("site_delete_sized", (void *)site_delete_sized);
	site("site_delete_array", (void *)site_delete_array);
	site("site_delete_aligned", (void *)site_delete_aligned);
	site("site_malloc", (void *)site_malloc);
	site("site_free", (void *)site_free);
	for (int i = 0; i < ncalls; i++) {
		call_line(calls[i].site, calls[i].func, (uintptr_t)calls[i].addr, calls[i].size, 0);
	}
	done();
	return 0;
}
