// rawout.h: output without malloc, for the workloads that log their own
// calls (ebpf_alloc, ebpf_calls, ebpf_cxx, ebpf_mmap): stdio would allocate
// its buffer on first use, an allocation the tests would count. Lines go to
// a static buffer and out with write(2).
//
// Define RAWOUT_SIZE before including it for another buffer size (1 << 22).
#ifndef HEAPSCOPE_RAWOUT_H
#define HEAPSCOPE_RAWOUT_H

#include <stdint.h>
#include <string.h>
#include <unistd.h>

#ifndef RAWOUT_SIZE
#define RAWOUT_SIZE (1 << 22)
#endif

#define RAWOUT_UNUSED __attribute__((unused)) // not every workload uses every helper

static char out[RAWOUT_SIZE];
static size_t outn;

static RAWOUT_UNUSED void puts_(const char *s) {
	size_t n = strlen(s);
	if (outn + n < sizeof out) {
		memcpy(out + outn, s, n);
		outn += n;
	}
}

// hex appends a space and v in hex.
static RAWOUT_UNUSED void hex(uintptr_t v) {
	char b[20];
	int i = sizeof b;
	b[--i] = 0;
	do {
		b[--i] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	puts_(" ");
	puts_(b + i);
}

static RAWOUT_UNUSED void flush(void) {
	size_t off = 0;
	while (off < outn) {
		ssize_t n = write(1, out + off, outn - off);
		if (n <= 0)
			_exit(4);
		off += n;
	}
	outn = 0;
}

static RAWOUT_UNUSED void wait_line(void) {
	char c;
	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

// site prints "site NAME ADDR": where a call-site function is.
static RAWOUT_UNUSED void site(const char *name, void *addr) {
	puts_("site ");
	puts_(name);
	hex((uintptr_t)addr);
	puts_("\n");
}

// call_line prints "call SITE FUNC ADDR SIZE OLDADDR", flushing when the
// buffer is half full.
static RAWOUT_UNUSED void call_line(const char *site, const char *func, uintptr_t addr, uintptr_t size, uintptr_t old) {
	puts_("call ");
	puts_(site);
	puts_(" ");
	puts_(func);
	hex(addr);
	hex(size);
	hex(old);
	puts_("\n");
	if (outn > sizeof out / 2)
		flush();
}

// ready prints "ready" and waits for a line on stdin: the tracer attaches
// meanwhile.
static RAWOUT_UNUSED void ready(void) {
	puts_("ready\n");
	flush();
	wait_line();
}

// done prints "done" and waits for another line before the program exits.
static RAWOUT_UNUSED void done(void) {
	puts_("done\n");
	flush();
	wait_line();
}

#endif
