// scan_planted: heap blocks of known reachability classes, for scan's
// tests, to be compared with Memcheck and LeakSanitizer on the same program.
//
//   scan_planted          the blocks below, in a process with four threads
//   scan_planted fork     blocks planted before a fork and changed in the
//                         child, which is the process to look at
//   scan_planted late     as the first, once a line came on standard input
//                         (after "waiting PID"): for a tracer that attaches
//                         before the blocks are made
//
// It plants the blocks, prints one line per block
//
//   block LABEL ADDR SIZE CLASS
//
// (CLASS is Memcheck's: definite, indirect, possible or reachable), then
// runs the leak check of the tool it runs under (VALGRIND_DO_LEAK_CHECK
// under valgrind, __lsan_do_leak_check when built with -fsanitize=leak;
// neither does anything otherwise), prints "ready PID" and waits for a line
// on standard input before it ends with _exit (no check at exit). Every
// block has a size of its own and an allocation stack of its own, so that
// the tools' loss records (which group blocks by stack) hold one block each.
// No copy of a planted pointer stays in a register or on a stack except
// where a case puts it: the planting runs in functions that return before
// the check, and the stack below is scrubbed. With scan_interposer.c
// preloaded, one more block is held only by that library.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define VALGRIND_DO_LEAK_CHECK
#endif

extern void __lsan_do_leak_check(void) __attribute__((weak));

#define KEY 0x5a5a5a5a5a5a5a5aULL

// Sizes: one per block, none that glibc's own blocks have.
enum {
	S_GLOBAL = 3016,
	S_L0 = 3032, S_L1 = 3048, S_L2 = 3064,
	S_C0 = 3080, S_C1 = 3096, S_C2 = 3112,
	S_CYA = 3128, S_CYB = 3144,
	S_INT = 3160, S_INTCHILD = 3176,
	S_STACK = 3192, S_REG = 3208, S_TLSMAIN = 3224, S_TLSTHREAD = 3240,
	S_BYLEAKED = 3256, S_LEAKER = 3272,
	S_F_KEPT = 3288, S_F_DROPPED = 3304, S_F_CHILD = 3320, S_F_CHILDLOST = 3336,
	S_INTERPOSER = 3352,
};

struct planted {
	const char *label;
	uintptr_t enc; // the address, xor KEY: not a pointer
	size_t size;
	const char *class;
};
static struct planted planted[32];
static int nplanted;

static void note(const char *label, void *p, size_t size, const char *class)
{
	int i = __atomic_fetch_add(&nplanted, 1, __ATOMIC_SEQ_CST);
	planted[i] = (struct planted){label, (uintptr_t)p ^ KEY, size, class};
}

// z allocates zeroed memory: no stale pointer left in a block by an
// earlier use of its memory adds a reference.
__attribute__((noinline)) static void *z(size_t n)
{
	void *p = malloc(n);
	memset(p, 0, n);
	return p;
}

__attribute__((noinline)) static void scrub(void)
{
	volatile char buf[16384];
	memset((char *)buf, 0, sizeof buf);
	__asm__ volatile("" ::: "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "memory");
}

void *g_global, *g_interior, *g_leaker_holder;
__thread void *t_main_tls, *t_thread_tls; // not static: GCC drops stores to a static never read
static volatile uintptr_t g_enc;
static volatile int g_ready;

// ---- threads ----

static void *stack_thread(void *arg)
{
	void *volatile held = z(S_STACK); // on this thread's stack
	note("stack", (void *)held, S_STACK, "reachable");
	__atomic_add_fetch(&g_ready, 1, __ATOMIC_SEQ_CST);
	for (;;)
		pause();
	return (void *)held;
}

__attribute__((noinline)) static void reg_plant(void)
{
	void *p = z(S_REG);
	note("register", p, S_REG, "reachable");
	g_enc = (uintptr_t)p ^ KEY;
}

static void *reg_thread(void *arg)
{
	reg_plant();
	scrub();
	// The pointer only in r12, a callee-saved register, while the thread
	// waits in pause(2) (which leaves r12 alone).
	__asm__ volatile(
		"movabs $0x5a5a5a5a5a5a5a5a, %%r12\n\t"
		"xor %0, %%r12\n\t"
		"movq $0, %0\n\t"
		"lock addl $1, %1\n\t"
		"1: mov $34, %%eax\n\t"
		"syscall\n\t"
		"jmp 1b"
		: "+m"(g_enc), "+m"(g_ready)
		:
		: "rax", "rcx", "r11", "r12", "memory");
	return NULL;
}

__attribute__((noinline)) static void tls_plant(void)
{
	t_thread_tls = z(S_TLSTHREAD);
	note("tls thread", t_thread_tls, S_TLSTHREAD, "reachable");
}

static void *tls_thread(void *arg)
{
	tls_plant();
	scrub();
	__atomic_add_fetch(&g_ready, 1, __ATOMIC_SEQ_CST);
	for (;;)
		pause();
	return NULL;
}

// ---- the main cases ----

struct node {
	struct node *next;
	void *child;
	void *other;
};

__attribute__((noinline)) static void plant(void)
{
	g_global = z(S_GLOBAL);
	note("global", g_global, S_GLOBAL, "reachable");

	// A lost list whose nodes hold children.
	struct node *l0 = z(S_L0), *l1 = z(S_L1), *l2 = z(S_L2);
	l0->next = l1;
	l1->next = l2;
	l0->child = z(S_C0);
	l1->child = z(S_C1);
	l2->child = z(S_C2);
	note("list 0", l0, S_L0, "definite");
	note("list 1", l1, S_L1, "indirect");
	note("list 2", l2, S_L2, "indirect");
	note("child 0", l0->child, S_C0, "indirect");
	note("child 1", l1->child, S_C1, "indirect");
	note("child 2", l2->child, S_C2, "indirect");

	// A lost cycle: Memcheck calls the one at the lower address definite.
	struct node *a = z(S_CYA), *b = z(S_CYB);
	a->next = b;
	b->next = a;
	note("cycle a", a, S_CYA, a < b ? "definite" : "indirect");
	note("cycle b", b, S_CYB, a < b ? "indirect" : "definite");

	// Held only through an interior pointer, and what it holds.
	struct node *in = z(S_INT);
	in->child = z(S_INTCHILD);
	g_interior = (char *)in + 40;
	note("interior", in, S_INT, "possible");
	note("interior child", in->child, S_INTCHILD, "possible");

	// Held by a block that is itself leaked.
	struct node *leaker = z(S_LEAKER);
	leaker->child = z(S_BYLEAKED);
	note("leaker", leaker, S_LEAKER, "definite");
	note("held by leaked", leaker->child, S_BYLEAKED, "indirect");

	// The main thread's TLS.
	t_main_tls = z(S_TLSMAIN);
	note("tls main", t_main_tls, S_TLSMAIN, "reachable");

	// Held only by heapscope's interposer (scan_interposer.c preloaded
	// under its name, in scan/roots' tests): not a root, so lost.
	void **slot = dlsym(RTLD_DEFAULT, "heapscope_fake_slot");
	if (slot) {
		*slot = z(S_INTERPOSER);
		note("interposer", *slot, S_INTERPOSER, "definite");
	}
}

// ---- after fork ----

void *g_kept, *g_dropped, *g_child;

__attribute__((noinline)) static void plant_parent(void)
{
	g_kept = z(S_F_KEPT);
	g_dropped = z(S_F_DROPPED);
}

__attribute__((noinline)) static void plant_child(void)
{
	note("fork kept", g_kept, S_F_KEPT, "reachable");
	note("fork dropped", g_dropped, S_F_DROPPED, "definite");
	g_dropped = NULL;
	g_child = z(S_F_CHILD);
	note("fork child", g_child, S_F_CHILD, "reachable");
	note("fork child lost", z(S_F_CHILDLOST), S_F_CHILDLOST, "definite");
}

__attribute__((noinline)) static void print_blocks(void)
{
	for (int i = 0; i < nplanted; i++)
		printf("block %s 0x%lx %zu %s\n", planted[i].label, (unsigned long)(planted[i].enc ^ KEY),
		       planted[i].size, planted[i].class);
	fflush(stdout);
}

__attribute__((noinline)) static void check_and_wait(void)
{
	VALGRIND_DO_LEAK_CHECK;
	if (__lsan_do_leak_check)
		__lsan_do_leak_check();
	printf("ready %d\n", getpid());
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		_exit(0);
	_exit(0);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "late") == 0) {
		char line[16];
		printf("waiting %d\n", getpid());
		fflush(stdout);
		if (!fgets(line, sizeof line, stdin))
			_exit(0);
	}
	if (argc > 1 && strcmp(argv[1], "fork") == 0) {
		plant_parent();
		scrub();
		pid_t c = fork();
		if (c == 0) {
			plant_child();
			scrub();
			print_blocks();
			scrub();
			check_and_wait();
		}
		int st;
		waitpid(c, &st, 0);
		_exit(0);
	}

	pthread_t t;
	pthread_create(&t, NULL, stack_thread, NULL);
	pthread_create(&t, NULL, reg_thread, NULL);
	pthread_create(&t, NULL, tls_thread, NULL);
	while (__atomic_load_n(&g_ready, __ATOMIC_SEQ_CST) < 3)
		usleep(1000);
	plant();
	scrub();
	print_blocks();
	scrub();
	check_and_wait();
	return 0;
}
