// ebpf_trap: calls one of a few tiny functions N times and prints the
// nanoseconds per call, to measure what a bare uprobe costs on this machine.
//
//   ebpf_trap FUNC N [wait]
//
// FUNC is push (starts with push %rbp, which the kernel emulates) or test
// (starts with test %rdi,%rdi, which it single-steps). With "wait" it reads
// a line from stdin first, so that probes can be attached. It prints
// "ns_per_call W" (wall clock) and "cpu_ns_per_call C" (its CPU time).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// Written in assembly so that the first instruction is known.
__asm__(".text\n"
	".globl trap_push\n.type trap_push,@function\ntrap_push:\n"
	"\tpush %rbp\n\tmov %rdi,%rax\n\tpop %rbp\n\tret\n"
	".size trap_push, .-trap_push\n"
	".globl trap_test\n.type trap_test,@function\ntrap_test:\n"
	"\ttest %rdi,%rdi\n\tmov %rdi,%rax\n\tret\n"
	".size trap_test, .-trap_test\n");

long trap_push(long);
long trap_test(long);

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// cpu is the thread's CPU time, which includes the kernel's time in traps:
// steadier than the wall clock on a shared machine.
static double cpu(void) {
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
	if (argc < 3)
		return 2;
	long (*f)(long) = strcmp(argv[1], "test") == 0 ? trap_test : trap_push;
	long n = atol(argv[2]);
	printf("ready\n");
	fflush(stdout);
	if (argc > 3) {
		char c;
		while (read(0, &c, 1) == 1 && c != '\n')
			;
	}
	volatile long sum = 0;
	double t0 = now(), c0 = cpu();
	for (long i = 0; i < n; i++)
		sum += f(i);
	double t1 = now(), c1 = cpu();
	printf("ns_per_call %.2f\ncpu_ns_per_call %.2f\n", (t1 - t0) / n, (c1 - c0) / n);
	return 0;
}
