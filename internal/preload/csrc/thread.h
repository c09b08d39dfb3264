/*
 * thread.h: the real functions (filled by resolve_reals in boot.h), each thread's state
 * (struct hs_tls), the reentrancy states a nested call is judged by
 * (HOOK_*), and IN_LIB, which holds asynchronous signals around a C library
 * call made from our bookkeeping.
 *
 * Part of heapscope_preload.c, a unity build: included once, in order, after
 * the parts before it, whose names it uses.
 */
#ifndef HEAPSCOPE_THREAD_H
#define HEAPSCOPE_THREAD_H

static struct {
	void (*free)(void *);
	void *(*malloc)(size_t);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void *(*reallocarray)(void *, size_t, size_t);
	int (*posix_memalign)(void **, size_t, size_t);
	void *(*aligned_alloc)(size_t, size_t);
	void *(*memalign)(size_t, size_t);
	void *(*valloc)(size_t);
	void *(*pvalloc)(size_t);
	void *(*mmap)(void *, size_t, int, int, int, off_t);
	void *(*mmap64)(void *, size_t, int, int, int, off_t);
	int (*munmap)(void *, size_t);
	void *(*mremap)(void *, size_t, size_t, int, ...);
	int (*dlclose)(void *);
	void *(*dlopen)(const char *, int);
	int (*dl_iterate_phdr)(int (*)(struct dl_phdr_info *, size_t, void *), void *);
	size_t (*malloc_usable_size)(void *);
	/* the exec family (exec.h): resolved with the rest, so that an exec in
	 * a forked child never calls dlsym, whose lock a thread of its parent
	 * may have held at the fork */
	int (*execve)(const char *, char *const[], char *const[]);
	int (*execv)(const char *, char *const[]);
	int (*execvp)(const char *, char *const[]);
	int (*execvpe)(const char *, char *const[], char *const[]);
	int (*posix_spawn)(pid_t *, const char *, const void *, const void *, char *const[], char *const[]);
	int (*posix_spawnp)(pid_t *, const char *, const void *, const void *, char *const[], char *const[]);
} real;

/*
 * What a thread is doing, as seen by an allocation call that arrives
 * while it is not done (in_hook):
 *  HOOK_REAL: running a real function for the program (reallocarray,
 *    posix_memalign, ...): a nested call is part of it, not recorded.
 *  HOOK_LIB: our bookkeeping, inside a C library call that may allocate
 *    (dlsym, realpath, libunwind's first walk, ...): a nested
 *    call is ours: served from our own heap (own.h), not recorded, nor the
 *    free of its block, whenever it comes.
 *  HOOK_BUSY: our bookkeeping, calling nothing that allocates: a call can
 *    only come from a signal handler that interrupted us. It is queued
 *    (with its stack) and written when the interrupted hook is done.
 */
enum { HOOK_NONE, HOOK_REAL, HOOK_BUSY, HOOK_LIB };

/* A call made by a signal handler while this thread was in HOOK_BUSY. */
#define HS_PEND 4
struct hs_pend {
	uint32_t func, kind, nbody, nframes;
	uint64_t ts, a, b, c, d;
	uint64_t frames[HS_MAX_FRAMES];
};

/* Per-thread state. Initial-exec TLS: one %fs-relative access. */
struct hs_slot;
struct hs_tls {
	uint32_t in_hook;   /* HOOK_*: inside a call of ours */
	uint32_t gen;       /* g_gen when slot was attached */
	uint32_t resolving; /* this thread is resolving the real functions */
	uint32_t swallow;   /* in a real C++ operator: its own malloc or free is not recorded */
	struct hs_slot *slot;
	uintptr_t stack_lo, stack_hi;
	uint32_t stack_retry; /* the bounds were asked on a signal stack: ask again */
	uint32_t in_phdr;     /* inside the program's dl_iterate_phdr: the loader's lock is held */
	uint32_t unw_warm;  /* libunwind walked this thread once (its TLS is allocated) */
	uint32_t safe_point; /* waiting for room in a section: a signal handler's call
	                      * may write to the ring itself */
	uint32_t stack_locked; /* holds g_stack_lock */
	uint32_t npend;     /* calls queued by signal handlers (may exceed HS_PEND) */
	uint32_t pdone;     /* of which written */
	uint32_t pend_lost; /* queued calls that did not fit */
	struct hs_pend pend[HS_PEND];
	/* the block's own bookkeeping (tls.h); kept last: a reused block is
	 * zeroed up to here */
	pid_t owner_pid, owner_tid;
	struct hs_tls *all_next;
};

/*
 * The state lives in a block of its own (tls.h), named by one word of
 * initial-exec TLS: a library loaded by dlopen into a running process
 * (heapscope attach --inject) finds only a small surplus of static TLS
 * (glibc's is about 1.5 KiB), and the state is over 4 KiB. `tls` reads as
 * the struct, as it did when it was the TLS variable itself.
 */
static __thread struct hs_tls *tls_p __attribute__((tls_model("initial-exec")));
static struct hs_tls *tls_new(void);
static inline __attribute__((always_inline)) struct hs_tls *tls_self(void)
{
	struct hs_tls *t = tls_p;
	return __builtin_expect(t != NULL, 1) ? t : tls_new();
}
#define tls (*tls_self())

/*
 * Run a C library call that may allocate from inside our bookkeeping. Its
 * allocations are ours (never shown), so a signal handler's call in that
 * window could be told from them by nothing: asynchronous signals are held
 * until it returns (two system calls; every use is rare: once per thread or
 * per module). Faults still arrive.
 */
static void lib_block(uint64_t *old)
{
	uint64_t all = ~(uint64_t)0;
	all &= ~((1ull << (SIGSEGV - 1)) | (1ull << (SIGBUS - 1)) | (1ull << (SIGILL - 1)) | (1ull << (SIGFPE - 1)) |
	         (1ull << (SIGTRAP - 1)) | (1ull << (SIGABRT - 1)));
	if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, old, sizeof all) != 0)
		*old = ~(uint64_t)0; /* nothing to restore */
}

static void lib_unblock(const uint64_t *old)
{
	if (*old != ~(uint64_t)0)
		syscall(SYS_rt_sigprocmask, SIG_SETMASK, old, NULL, sizeof *old);
}

#define IN_LIB(stmt)                                                                                                   \
	do {                                                                                                           \
		uint64_t _saved_mask;                                                                                  \
		lib_block(&_saved_mask);                                                                               \
		uint32_t _saved_hook = tls.in_hook;                                                                    \
		tls.in_hook = HOOK_LIB;                                                                                \
		stmt;                                                                                                  \
		tls.in_hook = _saved_hook;                                                                             \
		lib_unblock(&_saved_mask);                                                                             \
	} while (0)

#endif
